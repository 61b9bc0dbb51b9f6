#!/usr/bin/env bash
# What warm pools (upstreams.<name>.min_idle_conns) save a request granted after a wait: the time
# from its permit to its answer's head, less the supplier's own latency, with and without them.
# The supplier is the mock upstream over HTTPS, 50 ms to answer (--latency-ms 50) and holding each
# new connection 50 ms before its handshake (--connect-delay-ms 50: the round trips of a distant
# supplier); its certificate comes from a private CA made here (tests/support/tls_pki.sh).
# Tollgate runs one thread with a binding rule (/book at 10/s, wait window 3 s). Bursts of 20
# requests arrive every 6 s, longer than the pooled connections live (4 s), so that without warm
# pools each burst meets an empty pool.
#
#   bench/warm_pools.sh                          # min_idle_conns 0, 2, then 12
#   WARM="0 1 4" BURSTS=8 TOLLGATE_BIN=build/tollgate bench/warm_pools.sh
#
# Per setting: from Tollgate's access log, for every request answered 200, duration_ms - wait_ms -
# 50 (the time after its permit that was not the supplier's answer): p50, p99 and max; and the
# connections the supplier accepted. About 35 s per setting.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TOLLGATE_BIN=${TOLLGATE_BIN:-$ROOT/build/tollgate}
MOCK_BIN=${MOCK_BIN:-$(dirname "$TOLLGATE_BIN")/tollgate-mock-upstream}
WARM=${WARM:-"0 2 12"}
BURSTS=${BURSTS:-5}
for b in "$TOLLGATE_BIN" "$MOCK_BIN"; do
  [[ -x $b ]] || { echo "warm_pools: no $b (build it, or set TOLLGATE_BIN)" >&2; exit 1; }
done
command -v openssl >/dev/null || { echo "warm_pools: openssl is missing" >&2; exit 1; }

source bench/common.sh
bench_workdir warm

bash tests/support/tls_pki.sh "$W/pki"
UP=$(free_port)
"$MOCK_BIN" --port "$UP" --latency-ms 50 --connect-delay-ms 50 --tls-cert "$W/pki/server.pem" \
  --tls-key "$W/pki/server.key" >"$W/mock.log" 2>&1 & PIDS+=($!)
wait_port "$UP"

printf '%-16s %8s %10s %10s %10s %10s %12s\n' min_idle_conns answered "p50 ms" "p90 ms" "p99 ms" "max ms" connections
for warm in $WARM; do
  G=$(free_port)
  rm -f "$W/access.log"
  cat >"$W/tollgate.json" <<JSON
{"listen": "127.0.0.1:$G", "threads": 1, "access_log": "$W/access.log", "admin": {"listen": "127.0.0.1:0"},
 "upstreams": {"up": {"url": "https://localhost:$UP", "tls": {"ca_file": "$W/pki/ca.pem"}, "min_idle_conns": $warm}},
 "routes": [{"prefix": "/", "upstream": "up"}],
 "limits": {"source": "file", "store": "local",
   "rules": [{"configId": 1, "interfaceUrl": "/book", "rateLimit": 10, "cache": 3, "status": 1}]}}
JSON
  curl -s -X POST --cacert "$W/pki/ca.pem" -o /dev/null --resolve "localhost:$UP:127.0.0.1" "https://localhost:$UP/__reset"
  "$TOLLGATE_BIN" --config "$W/tollgate.json" >"$W/tollgate.log" 2>&1 & gw=$!
  wait_port "$G"
  sleep 1  # the warm connections (if any) are made
  python3 - "$G" "$BURSTS" <<'PY'
import http.client, sys, threading, time
port, bursts = int(sys.argv[1]), int(sys.argv[2])
def one():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/book")
    c.getresponse().read()
    c.close()
for b in range(bursts):
    if b:
        time.sleep(6)
    ts = [threading.Thread(target=one) for _ in range(20)]
    for t in ts: t.start()
    for t in ts: t.join()
PY
  kill "$gw"; wait "$gw" 2>/dev/null || true
  conns=$(curl -s --cacert "$W/pki/ca.pem" --resolve "localhost:$UP:127.0.0.1" "https://localhost:$UP/__stats" |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"] - 1)')
  python3 - "$W/access.log" "$warm" "$conns" <<'PY'
import json, sys
xs = sorted(l["duration_ms"] - l["wait_ms"] - 50 for l in map(json.loads, open(sys.argv[1])) if l["status"] == 200)
q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]
print(f"{sys.argv[2]:<16} {len(xs):>8} {q(0.5):>10.1f} {q(0.9):>10.1f} {q(0.99):>10.1f} {xs[-1]:>10.1f} {sys.argv[3]:>12}")
PY
done
