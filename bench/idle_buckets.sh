#!/usr/bin/env bash
# What idle buckets and rules cost a running gateway (in-process store, jemalloc as shipped), each
# in a gateway of its own (one thread, nginx as the upstream), as RSS growth:
#   keys    one rule keyed by a header (`keyBy: header:X-Client`), KEYS requests with distinct
#           values: KEYS buckets in the store, each made by one request and left idle
#   rules   RULES rules (never binding: 1,000,000/s), RSS once it is ready ("loaded"), then one
#           request to each rule's path (its bucket made, its series counted)
# The base of each is the same gateway after 200 requests to an unmatched path. Prints one JSON
# line: the RSS of each step (KiB), bytes per bucket and per rule, and the CPU the idle gateway
# with RULES rules uses (its once-a-second console sample). About 40 s with the defaults.
#   bench/idle_buckets.sh                               # build-bench/tollgate
#   TOLLGATE_BIN=build/tollgate KEYS=10000 RULES=1000 bench/idle_buckets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TOLLGATE_BIN:-build-bench/tollgate}
KEYS=${KEYS:-100000}
RULES=${RULES:-100000}
[[ -x $BIN ]] || { echo "idle_buckets.sh: no gateway binary at $BIN (set TOLLGATE_BIN)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "idle_buckets.sh: needs nginx (Debian: nginx-light)" >&2; exit 1; }

source bench/common.sh
bench_workdir buckets
UP=$(free_port)
cat >"$W/upstream.conf" <<NGX
worker_processes 1; daemon off; master_process off; error_log $W/upstream.err crit; pid $W/upstream.pid;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 10000000;
  server { listen 127.0.0.1:$UP; location / { return 200 'ok'; } } }
NGX
nginx -c "$W/upstream.conf" -p "$W" >"$W/upstream.log" 2>&1 &
PIDS+=($!)
wait_port "$UP"

# MEASURE KIND N: a gateway with the KIND's config for N; prints its RSS (KiB) after the warm-up,
# after N requests (each a new rule's path or a new key), and its CPU (cores) over 5 idle seconds.
measure() {
  local kind=$1 n=$2 port pid
  port=$(free_port)
  python3 - "$W/$kind.json" "$kind" "$n" "$UP" "$port" <<'PY'
import json, sys
path, kind, n, up, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if kind == "rules":
    rules = [{"configId": i + 1, "interfaceUrl": f"/r{i}", "rateLimit": 1000000, "cache": 0, "status": 1} for i in range(n)]
else:
    rules = [{"configId": 1, "interfaceUrl": "/k", "rateLimit": 1000000, "cache": 0, "status": 1, "keyBy": "header:X-Client"}]
json.dump({"listen": f"127.0.0.1:{port}", "threads": 1, "admin": {"listen": "127.0.0.1:0"},
           "upstreams": {"up": {"url": f"http://127.0.0.1:{up}"}}, "routes": [{"prefix": "/", "upstream": "up"}],
           "limits": {"store": "local", "max_client_keys": 2 * n + 1024, "rules": rules}}, open(path, "w"))
PY
  "$BIN" --config "$W/$kind.json" >"$W/$kind.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  python3 - "$port" "$pid" "$kind" "$n" <<'PY'
import socket, sys, time
port, pid, kind, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
def cpu_s():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100
def requests(heads):
    # Pipelined keep-alive requests on one connection, 200 at a time; every answer must be 200.
    s = socket.create_connection(("127.0.0.1", port))
    for i in range(0, len(heads), 200):
        batch = heads[i:i + 200]
        s.sendall(b"".join(batch))
        got = b""
        while got.count(b"HTTP/1.1 ") < len(batch) or not got.endswith(b"ok"):
            chunk = s.recv(1 << 16)
            if not chunk:
                raise SystemExit("the gateway closed the connection")
            got += chunk
        if got.count(b"HTTP/1.1 200") != len(batch):
            raise SystemExit("an answer was not 200: " + got[:300].decode(errors="replace"))
    s.close()
time.sleep(1.5)  # the first console samples taken
requests([b"GET /ibe/warm HTTP/1.1\r\nHost: b\r\n\r\n"] * 200)
time.sleep(1.5)
before = rss()
if kind == "rules":
    requests([f"GET /ibe/r{i} HTTP/1.1\r\nHost: b\r\n\r\n".encode() for i in range(n)])
else:
    requests([f"GET /ibe/k HTTP/1.1\r\nHost: b\r\nX-Client: c{i}\r\n\r\n".encode() for i in range(n)])
time.sleep(1.5)
after = rss()
c0 = cpu_s()
time.sleep(5)
print(before, after, round((cpu_s() - c0) / 5, 3))
PY
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}
read -r base_rules _ _ < <(measure rules 1)
read -r loaded touched idle_cpu < <(measure rules "$RULES")
read -r keys_before keys_after _ < <(measure keys "$KEYS")
python3 - "$RULES" "$KEYS" "$base_rules" "$loaded" "$touched" "$idle_cpu" "$keys_before" "$keys_after" <<'PY'
import json, sys
rules, keys, base, loaded, touched = (int(x) for x in sys.argv[1:6])
idle_cpu = float(sys.argv[6])
kb, ka = int(sys.argv[7]), int(sys.argv[8])
print(json.dumps({"keys": keys, "rss_keys_before_kib": kb, "rss_keys_after_kib": ka,
                  "bytes_per_keyed_bucket": round((ka - kb) * 1024 / keys), "keyed_buckets_mib": round((ka - kb) / 1024, 1),
                  "rules": rules, "rss_base_kib": base, "rss_rules_loaded_kib": loaded, "rss_rules_touched_kib": touched,
                  "bytes_per_rule_loaded": round((loaded - base) * 1024 / rules),
                  "bytes_per_rule_touched": round((touched - base) * 1024 / rules),
                  "rules_mib": round((touched - base) / 1024, 1), "idle_cpu_cores_with_rules": idle_cpu}))
PY
