#!/usr/bin/env bash
# Demo traffic for the embedded default (scripts/run.sh starts it): a steady mix, with a surge every
# 40 s, that the console (http://127.0.0.1:9901/) shows live. /shopping/search (5/s) gets about 16
# requests a second, 32 in a surge: held, then refused. /pricing stays under its 10/s, /booking
# sits at its 2/s, and /login runs into its per-client quota of 5 a minute.
# Usage: scripts/demo-traffic.sh [base URL, default http://127.0.0.1:8080/ibe]. Ctrl-C stops it.
set -uo pipefail
base=${1:-http://127.0.0.1:8080/ibe}
hit() { curl -s -o /dev/null --max-time 5 "$@"; }
until curl -s -o /dev/null --max-time 1 "$base/pricing"; do sleep 0.5; done
echo "demo-traffic: sending to $base (Ctrl-C stops it)"
while true; do
  n=8
  ((SECONDS % 40 < 10)) && n=16
  for ((i = 0; i < n; i++)); do hit "$base/shopping/search" & done
  for i in 1 2 3; do hit "$base/pricing" & done
  hit "$base/booking" &
  ((SECONDS % 2 == 0)) && hit "$base/login" &
  sleep 0.5
  wait
done
