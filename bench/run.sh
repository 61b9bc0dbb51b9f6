#!/usr/bin/env bash
# Tollgate against nginx (and Redis's own ceiling) on this machine. Installs what it needs from
# Debian, starts everything on loopback ports (servers pinned to one core, wrk to the other), runs
# the cases in interleaved rounds (A B C ... A B C ...), stops exactly the processes it started,
# and writes bench/results/<time>/summary.md (medians, min-max) with the raw output beside it.
#   ROUNDS=3 DURATION=10 CONNS=64 bench/run.sh
#   ONLY="T2B T2K" bench/run.sh     # those cases only (no Redis ceiling, hold or micro benchmarks;
#                                   # REDIS_CEILING=1 adds the ceiling)
#   bench/hold.sh                   # the hold step alone (about a minute; see that script)
#   ONLY="T1 N1 T1s N1s N1s3 T1sN N1sN N1sN3 HS" bench/run.sh   # plain against TLS upstreams, and
#                                   # HS: TLS handshakes per second per core (openssl s_time)
#   BENCH_BUILD=/other/build-bench bench/run.sh   # that build's binaries (tollgate, tollgate-mock-upstream,
#                                   # and for a full run tollgate-sim, tollgate-micro-bench): no build here
# TLS upstreams (nginx `listen ssl`, TLSv1.2 TLSv1.3, a shared session cache) use a private CA made
# at run time in the temporary folder by tests/support/tls_pki.sh (removed at exit, never kept).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
HOLD=${HOLD:-10000}
ONLY=${ONLY:-}
HS_SECONDS=${HS_SECONDS:-5}  # each openssl s_time measurement (HS), per round

scripts/deps.sh build
need=()
for p in wrk nginx-light redis-server redis-tools gnuplot-nox python3 libbenchmark-dev openssl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [[ -n ${BENCH_BUILD:-} ]]; then
  BIN=$(cd "$BENCH_BUILD" && pwd)
else
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=OFF -DTOLLGATE_BUILD_BENCH=ON >/dev/null
  cmake --build build-bench -j"$(nproc)" >/dev/null
  BIN=$ROOT/build-bench
fi

OUT=$ROOT/bench/results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT/raw"
# Which binaries, and whether the sources differed from HEAD (others may be editing the tree).
SRC=$ROOT  # with BENCH_BUILD, the checkout the build folder sits in, if it is one
[[ -n ${BENCH_BUILD:-} ]] && SRC=$(dirname "$BIN")
{ echo "binaries: $BIN"
  echo "sources: $SRC, HEAD $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?'); changed from HEAD: $(
    git -C "$SRC" status --porcelain -- src include CMakeLists.txt 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
} >"$OUT/build.txt"
W=$(mktemp -d /tmp/tollgate-bench-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

if (($(nproc) >= 2)); then LOAD_CORE=0; SERVER_CORE=1; else LOAD_CORE=0; SERVER_CORE=0; fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
start() { # start NAME CMD... : pinned to the server core, logged, remembered
  local name=$1; shift
  taskset -c "$SERVER_CORE" "$@" >"$W/$name.log" 2>&1 &
  PIDS+=($!)
  echo $! >"$W/$name.pid"
}
ulimit -n 65536 || true

# --- upstreams ---------------------------------------------------------------------------------
UP=$(free_port); MOCK=$(free_port); RP=$(free_port)
cat >"$W/upstream.conf" <<NGX
worker_processes 1; daemon off; master_process off; error_log $W/upstream.err crit; pid $W/upstream.pid;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000;
  server { listen 127.0.0.1:$UP; location / { default_type application/json; return 200 '{"flights":[{"flight":"TG101","fare":880}]}'; } } }
NGX
start upstream nginx -c "$W/upstream.conf" -p "$W"
# The same upstream over TLS: UPS keeps connections alive (T1s, N1s), UPSN closes each after one
# request (keepalive_requests 1: T1sN, N1sN and the handshake measurement, HS) and logs whether
# each handshake was resumed. The CA and keys live in $W only.
PKI=$W/pki
if [[ -f tests/support/tls_pki.sh ]]; then
  bash tests/support/tls_pki.sh "$PKI"
else  # the recipe's CA and server certificate (localhost, 127.0.0.1), P-256
  mkdir -p "$PKI"
  (cd "$PKI" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=test-ca -keyout ca.key -out ca.pem &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost -keyout server.key -out srv.csr &&
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf &&
    openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile ext.cnf -out server.pem &&
    chmod 600 ./*.key) >"$W/pki.log" 2>&1 || { cat "$W/pki.log" >&2; exit 1; }
fi
UPS=$(free_port); UPSN=$(free_port)
UPS_LOG=$W/upstream-tls.access UPSN_LOG=$W/upstream-tlsn.access
# Both log each request's connection serial number, whether its handshake was resumed, the
# protocol: how many connections (handshakes) a case made, full or resumed.
for v in "upstream-tls $UPS 10000000" "upstream-tlsn $UPSN 1"; do
  read -r name port requests <<<"$v"
  log="log_format tls '\$connection \$ssl_session_reused \$ssl_protocol'; access_log $W/$name.access tls;"
  cat >"$W/$name.conf" <<NGX
worker_processes 1; daemon off; master_process off; error_log $W/$name.err crit; pid $W/$name.pid;
events { worker_connections 8192; }
http { $log keepalive_requests $requests;
  server { listen 127.0.0.1:$port ssl; ssl_certificate $PKI/server.pem; ssl_certificate_key $PKI/server.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:S:1m;
    location / { default_type application/json; return 200 '{"flights":[{"flight":"TG101","fare":880}]}'; } } }
NGX
  start "$name" nginx -c "$W/$name.conf" -p "$W"
done
start mock "$BIN/tollgate-mock-upstream" --port "$MOCK"
start redis redis-server --bind 127.0.0.1 --port "$RP" --save '' --appendonly no
wait_port "$UP"; wait_port "$MOCK"; wait_port "$RP"; wait_port "$UPS"; wait_port "$UPSN"
# A 3-primary Redis Cluster (no replicas) for T2K, on the same core: each port's +10000 (the
# cluster bus) free too.
cluster_port() {
  python3 -c 'import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    if p >= 55535: continue
    try: b = socket.socket(); b.bind(("127.0.0.1", p + 10000)); print(p); break
    except OSError: pass'
}
CP=()
for i in 0 1 2; do
  CP+=("$(cluster_port)")
  mkdir -p "$W/cluster-$i"
  start "cluster-$i" redis-server --bind 127.0.0.1 --port "${CP[$i]}" --save '' --appendonly no --dir "$W/cluster-$i" \
    --cluster-enabled yes --cluster-config-file nodes.conf
  wait_port "${CP[$i]}"
done
redis-cli --cluster create "127.0.0.1:${CP[0]}" "127.0.0.1:${CP[1]}" "127.0.0.1:${CP[2]}" --cluster-replicas 0 \
  --cluster-yes >"$W/cluster-create.log" 2>&1 || { cat "$W/cluster-create.log" >&2; exit 1; }
for _ in $(seq 1 100); do
  ok=0
  for p in "${CP[@]}"; do redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && ok=$((ok + 1)); done
  ((ok == 3)) && break
  sleep 0.1
done

# --- nginx as the proxy (N0: plain, N1: limit_req that never binds, N2: a binding limit,
#     N3: limit_req per client address that never binds; N1s, N1sN: N1 to the TLS upstreams,
#     verified, sessions reused, a keep-alive pool; N1s3, N1sN3: the same offering TLS 1.3, which
#     nginx 1.22 does not to upstreams unless told, and Tollgate does) --------------------------------
N0=$(free_port); N1=$(free_port); N2=$(free_port); N3=$(free_port); N0M=$(free_port); N1M=$(free_port)
N1S=$(free_port); N1SN=$(free_port); N1S3=$(free_port); N1SN3=$(free_port)
cat >"$W/proxy.conf" <<NGX
worker_processes 1; daemon off; master_process off; error_log $W/proxy.err crit; pid $W/proxy.pid;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000;
  limit_req_zone \$host zone=never:1m rate=100000000r/s;
  limit_req_zone \$host zone=bind:1m rate=1000r/s;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=100000000r/s;
  limit_req_status 429; limit_req_log_level info;
  upstream up { server 127.0.0.1:$UP; keepalive 256; keepalive_requests 10000000; }
  upstream mock { server 127.0.0.1:$MOCK; keepalive 256; keepalive_requests 10000000; }
  # The TLS pools are the plain ones' size and reuse (keepalive_requests defaults to 1000 here): with
  # 64 clients, keepalive 32 closed about a quarter of the upstream connections after one request
  # (a handshake each).
  # One block per case: a pool shared by N1s (TLS 1.2) and N1s3 would hand one the other's connections.
  upstream ups { server 127.0.0.1:$UPS; keepalive 256; keepalive_requests 10000000; }
  upstream ups3 { server 127.0.0.1:$UPS; keepalive 256; keepalive_requests 10000000; }
  upstream upsn { server 127.0.0.1:$UPSN; keepalive 256; keepalive_requests 10000000; }
  upstream upsn3 { server 127.0.0.1:$UPSN; keepalive 256; keepalive_requests 10000000; }
  proxy_http_version 1.1; proxy_set_header Connection "";
  server { listen 127.0.0.1:$N0; location / { proxy_pass http://up; } }
  server { listen 127.0.0.1:$N1; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass http://up; } }
  server { listen 127.0.0.1:$N2; location / { limit_req zone=bind burst=200; proxy_pass http://up; } }
  server { listen 127.0.0.1:$N3; location / { limit_req zone=perip burst=100000000 nodelay; proxy_pass http://up; } }
  server { listen 127.0.0.1:$N0M; location / { proxy_pass http://mock; } }
  server { listen 127.0.0.1:$N1M; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass http://mock; } }
  server { listen 127.0.0.1:$N1S; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass https://ups;
    proxy_ssl_verify on; proxy_ssl_trusted_certificate $PKI/ca.pem; proxy_ssl_server_name on; proxy_ssl_name localhost;
    proxy_ssl_session_reuse on; } }
  server { listen 127.0.0.1:$N1SN; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass https://upsn;
    proxy_ssl_verify on; proxy_ssl_trusted_certificate $PKI/ca.pem; proxy_ssl_server_name on; proxy_ssl_name localhost;
    proxy_ssl_session_reuse on; } }
  server { listen 127.0.0.1:$N1S3; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass https://ups3;
    proxy_ssl_verify on; proxy_ssl_trusted_certificate $PKI/ca.pem; proxy_ssl_server_name on; proxy_ssl_name localhost;
    proxy_ssl_session_reuse on; proxy_ssl_protocols TLSv1.2 TLSv1.3; } }
  server { listen 127.0.0.1:$N1SN3; location / { limit_req zone=never burst=100000000 nodelay; proxy_pass https://upsn3;
    proxy_ssl_verify on; proxy_ssl_trusted_certificate $PKI/ca.pem; proxy_ssl_server_name on; proxy_ssl_name localhost;
    proxy_ssl_session_reuse on; proxy_ssl_protocols TLSv1.2 TLSv1.3; } }
}
NGX
start nginx nginx -c "$W/proxy.conf" -p "$W"

# --- Tollgate: one thread, same core ------------------------------------------------------------
gateway_conf() { # PORT ADMIN UPSTREAM_PORT STORE [tls: the upstream is https://localhost:PORT, our CA]
  local up="{\"url\": \"http://127.0.0.1:$3\"}"
  [[ ${5:-} == tls ]] && up="{\"url\": \"https://localhost:$3\", \"tls\": {\"ca_file\": \"$PKI/ca.pem\"}}"
  cat <<JSON
{"listen": "127.0.0.1:$1", "threads": 1, "admin": {"listen": "127.0.0.1:$2"},
 "upstreams": {"up": $up}, "routes": [{"prefix": "/", "upstream": "up"}],
 "limits": {"store": "$4", "redis": {"host": "127.0.0.1", "port": $RP, "decision_timeout_ms": 1000},
   "rules": [
     {"configId": 1, "interfaceUrl": "/nobind", "rateLimit": 1000000, "burst": 1000000000, "cache": 0.5, "status": 1},
     {"configId": 2, "interfaceUrl": "/bind", "rateLimit": 1000, "burst": 200, "cache": 0.2, "status": 1},
     {"configId": 3, "interfaceUrl": "/hold", "rateLimit": 200, "burst": 1, "cache": 60, "status": 1},
     {"configId": 4, "interfaceUrl": "/perclient", "rateLimit": 1000000, "burst": 1000000000, "cache": 0.5,
      "keyBy": "client_ip", "status": 1,
      "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 1000000000, "keyBy": "client_ip"}]}]}}
JSON
}
# T2B and T2K: 100 never-binding rules /b0 .. /b99, requested round-robin (bench/buckets.lua); on
# one Redis, and on the cluster.
buckets_conf() { # PORT ADMIN REDIS_JSON
  local rules="" i
  for ((i = 0; i < 100; i++)); do
    rules+="${rules:+, }{\"configId\": $((i + 1)), \"interfaceUrl\": \"/b$i\", \"rateLimit\": 1000000, \"burst\": 1000000000, \"cache\": 0.5, \"status\": 1}"
  done
  cat <<JSON
{"listen": "127.0.0.1:$1", "threads": 1, "admin": {"listen": "127.0.0.1:$2"},
 "upstreams": {"up": {"url": "http://127.0.0.1:$UP"}}, "routes": [{"prefix": "/", "upstream": "up"}],
 "limits": {"store": "redis", "redis": $3, "rules": [$rules]}}
JSON
}
TB=$(free_port); TBA=$(free_port); TK=$(free_port); TKA=$(free_port)
buckets_conf "$TB" "$TBA" "{\"host\": \"127.0.0.1\", \"port\": $RP, \"decision_timeout_ms\": 1000}" >"$W/tb.json"
buckets_conf "$TK" "$TKA" "{\"mode\": \"cluster\", \"nodes\": [\"127.0.0.1:${CP[0]}\"], \"decision_timeout_ms\": 1000}" >"$W/tk.json"
start tollgate-buckets "$BIN/tollgate" --config "$W/tb.json"
start tollgate-cluster "$BIN/tollgate" --config "$W/tk.json"
T=$(free_port); TA=$(free_port); TR=$(free_port); TRA=$(free_port); TM=$(free_port); TMA=$(free_port)
gateway_conf "$T" "$TA" "$UP" local >"$W/t.json"
gateway_conf "$TR" "$TRA" "$UP" redis >"$W/tr.json"
gateway_conf "$TM" "$TMA" "$MOCK" local >"$W/tm.json"
start tollgate "$BIN/tollgate" --config "$W/t.json"
start tollgate-redis "$BIN/tollgate" --config "$W/tr.json"
start tollgate-mock "$BIN/tollgate" --config "$W/tm.json"
TS=$(free_port); TSA=$(free_port); TSN=$(free_port); TSNA=$(free_port)
gateway_conf "$TS" "$TSA" "$UPS" local tls >"$W/ts.json"
gateway_conf "$TSN" "$TSNA" "$UPSN" local tls >"$W/tsn.json"
start tollgate-tls "$BIN/tollgate" --config "$W/ts.json"
start tollgate-tlsn "$BIN/tollgate" --config "$W/tsn.json"
for p in "$N0" "$N1" "$N2" "$N3" "$N0M" "$N1M" "$N1S" "$N1SN" "$N1S3" "$N1SN3" "$T" "$TR" "$TM" "$TB" "$TK" "$TS" "$TSN"; do wait_port "$p"; done
sleep 1  # Redis connection up

pid_of() { cat "$W/$1.pid"; }
# case name | url | process whose CPU is the proxy's | wrk script (optional)
CASES=(
  "U|http://127.0.0.1:$UP/ibe/shopping/search|upstream"
  "N0|http://127.0.0.1:$N0/ibe/shopping/search|nginx"
  "N1|http://127.0.0.1:$N1/ibe/shopping/search|nginx"
  "T0|http://127.0.0.1:$T/ibe/shopping/search|tollgate"
  "T1|http://127.0.0.1:$T/ibe/nobind|tollgate"
  "T2|http://127.0.0.1:$TR/ibe/nobind|tollgate-redis"
  "T2B|http://127.0.0.1:$TB/|tollgate-buckets|bench/buckets.lua"
  "T2K|http://127.0.0.1:$TK/|tollgate-cluster|bench/buckets.lua"
  "N2|http://127.0.0.1:$N2/ibe/bind|nginx"
  "T3|http://127.0.0.1:$T/ibe/bind|tollgate"
  "N3|http://127.0.0.1:$N3/ibe/perclient|nginx"
  "T4|http://127.0.0.1:$T/ibe/perclient|tollgate"
  "T5|http://127.0.0.1:$TR/ibe/perclient|tollgate-redis"
  "Um|http://127.0.0.1:$MOCK/ibe/shopping/search|mock"
  "N0m|http://127.0.0.1:$N0M/ibe/shopping/search|nginx"
  "N1m|http://127.0.0.1:$N1M/ibe/shopping/search|nginx"
  "T1m|http://127.0.0.1:$TM/ibe/nobind|tollgate-mock"
  "N1s|http://127.0.0.1:$N1S/ibe/shopping/search|nginx"
  "N1s3|http://127.0.0.1:$N1S3/ibe/shopping/search|nginx"
  "T1s|http://127.0.0.1:$TS/ibe/nobind|tollgate-tls"
  "N1sN|http://127.0.0.1:$N1SN/ibe/shopping/search|nginx"
  "N1sN3|http://127.0.0.1:$N1SN3/ibe/shopping/search|nginx"
  "T1sN|http://127.0.0.1:$TSN/ibe/nobind|tollgate-tlsn"
)

proc_cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }         # utime + stime, clock ticks
core_busy() { awk -v c="cpu$SERVER_CORE" '$1 == c {print $2+$3+$4+$7+$8}' /proc/stat; }

if [[ -n $ONLY ]]; then  # a subset: the cases named, nothing else
  kept=()
  for c in "${CASES[@]}"; do [[ " $ONLY " == *" ${c%%|*} "* ]] && kept+=("$c"); done
  CASES=("${kept[@]}")
fi

run_case() { # NAME URL PROC ROUND SECONDS [SCRIPT]
  local name=$1 url=$2 proc=$3 round=$4 secs=$5 script=${6:-} pid out
  pid=$(pid_of "$proc")
  local c0 p0 c1 p1 l0 l1 log=""
  # A TLS case: which upstream's log shows its handshakes
  case $url in
    *":$N1S/"* | *":$N1S3/"* | *":$TS/"*) log=$UPS_LOG ;;
    *":$N1SN/"* | *":$N1SN3/"* | *":$TSN/"*) log=$UPSN_LOG ;;
  esac
  [[ -n $log ]] && l0=$(wc -l <"$log")
  c0=$(core_busy); p0=$(proc_cpu "$pid")
  out=$(taskset -c "$LOAD_CORE" wrk -t1 -c"$CONNS" -d"${secs}s" --latency ${script:+-s "$script"} "$url")
  c1=$(core_busy); p1=$(proc_cpu "$pid")
  if [[ $round != warm ]]; then
    echo "$out" >"$OUT/raw/$name-round$round.txt"
    if [[ -n $log ]]; then
      # The upstream connections this run made (one handshake each), and those resumed after the
      # run's first. The log is written as each request ends: give it a moment.
      sleep 0.5
      l1=$(wc -l <"$log")
      sed -n "$((l0 + 1)),${l1}p" "$log" |
        awk '!($1 in seen) {seen[$1] = 1; n++; if (n > 1 && $2 == "r") r++; p[$3]++} END {printf "%d %d", n, r + 0; for (k in p) printf " %s:%d", k, p[k]; print ""}' \
          >"$OUT/raw/$name-round$round.resumed"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$((c1 - c0))" "$((p1 - p0))" "$secs" >>"$OUT/cpu.tsv"
  fi
}

echo "bench: warm-up"
for c in "${CASES[@]}"; do IFS='|' read -r n u p sc <<<"$c"; run_case "$n" "$u" "$p" warm 2 "$sc"; done
for r in $(seq 1 "$ROUNDS"); do
  echo "bench: round $r of $ROUNDS"
  for c in "${CASES[@]}"; do IFS='|' read -r n u p sc <<<"$c"; run_case "$n" "$u" "$p" "$r" "$DURATION" "$sc"; done
done

# --- Redis's ceiling for Tollgate's own script (with ONLY, when REDIS_CEILING=1) ------------------
if [[ -z $ONLY || ${REDIS_CEILING:-0} == 1 ]]; then
echo "bench: redis-benchmark"
SHA=$(redis-cli -p "$RP" SCRIPT LOAD "$("$BIN/tollgate-sim" --redis-script)")
# permits, timeout, mode, now (Redis TIME), one bucket, no parent, no quotas, no maxShare, not adaptive, its shape
ARGS=(1 500000 0 "" 1 0 0 0 0 1 1000000000000 1 0 0 0 0)
# The lean script the store sends for T2's rule (Redis TIME, pay now, interval, size, then permits
# and timeout: one decision a call) and the minimal token bucket (bench/minimal_bucket.lua), the
# reference a Redis decision is measured against (its cost must not exceed it).
LEAN_SHA=$(redis-cli -p "$RP" SCRIPT LOAD "$("$BIN/tollgate-sim" --redis-lean-script)")
MIN_SHA=$(redis-cli -p "$RP" SCRIPT LOAD "$(cat bench/minimal_bucket.lua)")
# One call of each by hand first: a script that refuses its arguments makes redis-benchmark spin on
# errors for ever instead of failing.
for call in "$MIN_SHA 1 bench:{bucket} 1000000 1000000" "$LEAN_SHA 1 tollgate:{bench} '' 0 1 1000000000000 1 500000"; do
  eval "set -- $call"
  check=$(redis-cli -p "$RP" EVALSHA "$@" 2>&1 | head -1)
  [[ $check != *ERR* ]] || { echo "bench: EVALSHA $call answered $check" >&2; exit 1; }
done
check=$(redis-cli -p "$RP" EVALSHA "$SHA" 1 "tollgate:{bench}" "${ARGS[@]}" 2>&1 | head -1)
[[ $check != *ERR* ]] || { echo "bench: the general script refused its arguments: $check" >&2; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  taskset -c "$LOAD_CORE" redis-benchmark -p "$RP" -c "$CONNS" -n 300000 -q \
    EVALSHA "$MIN_SHA" 1 "bench:{bucket}" 1000000 1000000 >>"$OUT/raw/redis-evalsha-minimal.txt" 2>&1
  taskset -c "$LOAD_CORE" redis-benchmark -p "$RP" -c "$CONNS" -n 300000 -q \
    EVALSHA "$LEAN_SHA" 1 "tollgate:{bench}" "" 0 1 1000000000000 1 500000 >>"$OUT/raw/redis-evalsha-lean.txt" 2>&1
  taskset -c "$LOAD_CORE" redis-benchmark -p "$RP" -c "$CONNS" -n 300000 -q \
    EVALSHA "$SHA" 1 "tollgate:{bench}" "${ARGS[@]}" >>"$OUT/raw/redis-evalsha.txt" 2>&1
  taskset -c "$LOAD_CORE" redis-benchmark -p "$RP" -c "$CONNS" -n 300000 -q -P 16 \
    EVALSHA "$SHA" 1 "tollgate:{bench}" "${ARGS[@]}" >>"$OUT/raw/redis-evalsha-p16.txt" 2>&1
  taskset -c "$LOAD_CORE" redis-benchmark -p "$RP" -c "$CONNS" -n 300000 -q -t ping_mbulk >>"$OUT/raw/redis-ping.txt" 2>&1
done

fi  # not ONLY, or REDIS_CEILING

# --- TLS handshakes per second per core (HS): openssl s_time against the keepalive_requests 1 TLS
# upstream (nginx on the server core), the client on the load core: full handshakes (-new) and
# resumed ones (-reuse), -www / so that each connection also reads a response (and with TLS 1.3 the
# session ticket that comes before it); TLS 1.3 as negotiated by default, and TLS 1.2 (-tls1_2: what
# nginx 1.22 speaks to upstreams by default). Per core: handshakes over each side's own CPU seconds
# (user + system: TCP connect/accept/close and the one request included), the client's read from
# the wrapping shell's /proc/<pid>/stat (its children's times), the server's from /proc/<nginx>/stat.
# That is OpenSSL's cost on this machine (s_time as the client), not Tollgate's.
if [[ -z $ONLY || " $ONLY " == *" HS "* ]]; then
  echo "bench: TLS handshakes (openssl s_time, ${HS_SECONDS}s each)"
  hs_pid=$(pid_of upstream-tlsn)
  for r in $(seq 1 "$ROUNDS"); do
    for mode in new reuse new12 reuse12; do
      flags="-${mode%12}"
      [[ $mode == *12 ]] && flags+=" -tls1_2"
      l0=$(wc -l <"$UPSN_LOG"); p0=$(proc_cpu "$hs_pid"); t0=$(date +%s.%N)
      # shellcheck disable=SC2016
      taskset -c "$LOAD_CORE" bash -c 'openssl s_time -connect "$1" -www / $2 -time "$3" >"$4" 2>&1
        awk "{print \$16 + \$17}" /proc/$$/stat >"$4.cpu"' _ "127.0.0.1:$UPSN" "$flags" "$HS_SECONDS" \
        "$OUT/raw/hs-$mode-round$r.txt"
      t1=$(date +%s.%N); p1=$(proc_cpu "$hs_pid")
      sleep 0.3
      l1=$(wc -l <"$UPSN_LOG")
      sed -n "$((l0 + 1)),${l1}p" "$UPSN_LOG" |
        awk -v wall="$(echo "$t1 - $t0" | bc)" -v server=$((p1 - p0)) -v client="$(cat "$OUT/raw/hs-$mode-round$r.txt.cpu")" \
          '{n++} $2 == "r" {r++} {p[$3]++} END {printf "%d %d %s %d %s", n, r + 0, wall, server, client; for (k in p) printf " %s:%d", k, p[k]; print ""}' \
          >"$OUT/raw/hs-$mode-round$r.tsv"
      rm -f "$OUT/raw/hs-$mode-round$r.txt.cpu"
    done
  done
fi

# --- scale: requests held in a wait window (bench/hold.sh: a gateway of its own, in a fresh
# process, with proxy.max_held and proxy.max_held_per_bucket above HOLD); micro benchmarks --------
if [[ -z $ONLY ]]; then
echo "bench: holding $HOLD requests"
TOLLGATE_BIN="$BIN/tollgate" HOLD="$HOLD" OUT="$OUT/raw/hold.json" bench/hold.sh >/dev/null
echo "bench: micro benchmarks"
taskset -c "$SERVER_CORE" "$BIN/tollgate-micro-bench" --benchmark_filter='^BM_(TryAcquire|LocalStore|Suffix)' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >"$OUT/raw/micro.txt" 2>&1
# Memory is one measurement of a fresh process, not an average over repetitions.
# Memory figures are RSS deltas: each in a process of its own, so none reuses another's freed pages.
for f in '^BM_IdleBuckets' '^BM_ClientKeysMemory/10000/' '^BM_ClientKeysMemory/100000/'; do
  taskset -c "$SERVER_CORE" "$BIN/tollgate-micro-bench" --benchmark_filter="$f" >>"$OUT/raw/micro.txt" 2>&1
done

fi  # not ONLY

python3 bench/summarize.py "$OUT" "$DURATION" "$CONNS" "$(nproc)"
ln -sfn "$OUT" "$ROOT/bench/results/latest"
echo "bench: $OUT/summary.md"
