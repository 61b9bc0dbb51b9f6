#!/usr/bin/env bash
# The hold measurement alone: a gateway of its own (one thread, in-process store, a fresh process),
# one rule that makes every request wait (200/s, burst 1, cache 60 s: up to 12,000 slots in the
# window), the caps on held requests (proxy.max_held, proxy.max_held_per_bucket) raised far above
# HOLD, and bench/hold.py holding HOLD requests on that one bucket. nginx is the upstream the
# released requests go to. About 1 min 10 s for 10,000 (15 s with ANSWERS=0).
#   bench/hold.sh                                            # 10,000 held, build-bench/tollgate
#   TOLLGATE_BIN=build-hold/tollgate ANSWERS=0 bench/hold.sh # memory and CPU only, no answers
#   HOLD=4000 OUT=/tmp/hold.json bench/hold.sh               # the JSON line into a file too
#   PAD=1500 bench/hold.sh                                   # each request's head 1.5 KiB longer
#   WRAP="env LD_PRELOAD=/path/shim.so" bench/hold.sh        # a command the gateway runs under
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TOLLGATE_BIN:-build-bench/tollgate}
HOLD=${HOLD:-10000}
ANSWERS=${ANSWERS:-1}
OUT=${OUT:-}
PAD=${PAD:-0}
WRAP=${WRAP:-}
[[ -x $BIN ]] || { echo "hold.sh: no gateway binary at $BIN (set TOLLGATE_BIN)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "hold.sh: needs nginx (Debian: nginx-light)" >&2; exit 1; }

source bench/common.sh
bench_workdir hold
if (($(nproc) >= 2)); then LOAD_CORE=0; SERVER_CORE=1; else LOAD_CORE=0; SERVER_CORE=0; fi
ulimit -n 65536 2>/dev/null || true

UP=$(free_port); T=$(free_port); TA=$(free_port)
cat >"$W/upstream.conf" <<NGX
worker_processes 1; daemon off; master_process off; error_log $W/upstream.err crit; pid $W/upstream.pid;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000;
  server { listen 127.0.0.1:$UP; location / { default_type application/json; return 200 '{"flights":[]}'; } } }
NGX
taskset -c "$SERVER_CORE" nginx -c "$W/upstream.conf" -p "$W" >"$W/upstream.log" 2>&1 &
PIDS+=($!)
cat >"$W/hold.json" <<JSON
{"listen": "127.0.0.1:$T", "threads": 1, "admin": {"listen": "127.0.0.1:$TA"},
 "upstreams": {"up": {"url": "http://127.0.0.1:$UP"}}, "routes": [{"prefix": "/", "upstream": "up"}],
 "proxy": {"max_held": 1000000, "max_held_per_bucket": 1000000, "max_connections_per_client": 0, "drain_timeout_ms": 1000},
 "limits": {"store": "local", "rules": [
   {"configId": 3, "interfaceUrl": "/hold", "rateLimit": 200, "burst": 1, "cache": 60, "status": 1}]}}
JSON
# shellcheck disable=SC2086  # WRAP is a command and its arguments
taskset -c "$SERVER_CORE" $WRAP "$BIN" --config "$W/hold.json" >"$W/tollgate.log" 2>&1 &
PIDS+=($!)
GATEWAY=$!
wait_port "$UP"; wait_port "$T"; wait_port "$TA"
flags=(--pad "$PAD")
[[ $ANSWERS == 0 ]] && flags+=(--no-answers)
line=$(taskset -c "$LOAD_CORE" python3 bench/hold.py "$T" "$GATEWAY" "$HOLD" /ibe/hold --admin "$TA" "${flags[@]}")
echo "$line"
[[ -n $OUT ]] && echo "$line" >"$OUT"
exit 0
