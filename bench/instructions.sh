#!/usr/bin/env bash
# Instructions per proxied request, counted by callgrind: a cost figure that does not depend on
# what else the machine is doing (wall-clock benchmarks on this shared 2-core VM move by 15-25%
# from run to run, and perf counters are not available here). Each case runs twice, with N_LO and
# N_HI keep-alive requests, each time in a fresh process; Ir/request = (Ir(N_HI) - Ir(N_LO)) /
# (N_HI - N_LO), so that start-up and shutdown cancel. What still varies from run to run is small:
# how 8 connections interleave (event-loop wake-ups, malloc's free lists) and, in Redis, the hash
# seed it picks at start (command and key lookups walk different chains); see docs/BENCHMARKS.md.
#
#   bench/instructions.sh                                  # every case below, 2000/6000 requests
#   CASES="T0 T1" bench/instructions.sh                    # a subset (PROFILES="T1 T2": profiles kept)
#   CASES="T1s N1s T1sN N1sN" bench/instructions.sh        # the TLS upstream cases (not in the default)
#   QUICK=1 bench/instructions.sh                          # 500/1500 requests (noisier slope)
#   TOLLGATE_BIN=/path/to/tollgate bench/instructions.sh   # measure another build (no build here)
#
# Cases (one nginx `return 200` upstream, started plainly, serves them all):
#   N0 nginx proxy, no limit            N1 nginx proxy + limit_req that never binds
#   T0 Tollgate, no matching rule       T1 Tollgate, never-binding rule, in-process store
#   T1R Tollgate, a rule that refuses all but the first request (429s), in-process store
#   T1P T1 with priority classes on the rule (the request is the lower class, keeping 30% back)
#   T1M T1 with an srTCM meter in place of the bucket (never red)
#   T1A T1 with a supplier credential on the upstream (auth type header: X-Api-Key from the environment)
#   T1H T1 with a several-host upstream: urls 127.0.0.1, 127.0.0.2 and 127.0.0.3 (the same nginx),
#       balanced by least outstanding requests
#   T1I T1 with the client's own X-Request-Id on every request (checked and kept; T1's are made)
#   T2 Tollgate, never-binding rule, Redis store (gateway under callgrind, Redis not)
#   T2C1 T2 with one client (no decisions to coalesce)
#   T2B  T2 over 100 never-binding rules, requests spread round-robin (bench/keepalive_load.py)
#   R0 redis-server under callgrind: RT per Tollgate decision (T2 traffic, gateway not under
#      callgrind), RS per EVALSHA of Tollgate's general script, RL of its lean script (one bucket
#      and nothing else), RM per EVALSHA of a minimal token bucket, RP per PING (the last four with
#      redis-benchmark -c 1).
#   R1 redis-server under callgrind: RT1 per decision of T2C1's traffic, RTB of T2B's.
#   K  a 3-primary Redis Cluster (no replicas) instead of one server, with T2B's traffic (100
#      rules, their slots spread over the three primaries): T2K the gateway under callgrind (the
#      cluster not); RKB the three redis-servers under callgrind (the gateway not), their sum per
#      decision (each node's share in the log), against RK1, one server (not a cluster) counted the
#      same way: only the request path (reading, running and answering commands), because a
#      cluster node's serverCron cannot be left out with --toggle-collect (the count comes out
#      inverted) and its cost is per second, not per decision.
# TLS to the upstream (a private CA made at run time in the temporary folder, by
# tests/support/tls_pki.sh: ca.pem, server.pem/key for localhost and 127.0.0.1; no key is kept):
#   T1s  T1 with the upstream `https://localhost:P` (nginx `listen ssl`, TLSv1.2 TLSv1.3, a shared
#        session cache, `return 200`, keep-alive), verified against the run's CA (tls.ca_file)
#   N1s  N1 with `proxy_pass https://` to that upstream: proxy_ssl_verify on, the CA trusted,
#        proxy_ssl_server_name on, proxy_ssl_name localhost, proxy_ssl_session_reuse on, and an
#        upstream keep-alive pool (keepalive 32)
#   T1sN, N1sN  the same two against a second TLS upstream with keepalive_requests 1: every request
#        a new upstream connection and a handshake.
#   N1s3, N1sN3  N1s and N1sN with proxy_ssl_protocols TLSv1.2 TLSv1.3: nginx 1.22 offers upstreams
#        only up to TLS 1.2 unless told, Tollgate offers 1.3 (whose resumption still does an ECDHE).
#   TLS_UPSTREAM_PROTOCOLS="TLSv1.2" makes both TLS upstreams speak TLS 1.2 only (default: TLSv1.2 TLSv1.3).
#   Both TLS upstreams log $connection and $ssl_session_reused: each run's upstream connections,
#   full handshakes and the share resumed after its first go into the table's note and a table of
#   their own. All six take about 6 minutes here (T1sN and N1sN3 about 2.5 each: a TLS 1.3
#   handshake per request under callgrind), T1s N1s about 40 s: not in the default CASES, run them
#   with CASES="T1s N1s T1sN N1sN" (and N1s3 N1sN3).
# Writes bench/results/instructions-<time>.txt (the table, the T1 and T2 profiles) and keeps every
# callgrind file in bench/results/instructions-<time>/ for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CASES=${CASES:-"N0 N1 T0 T1 T2 T2C1 T2B R0 R1 K"}
if [[ ${QUICK:-0} == 1 ]]; then N_LO=${N_LO:-500}; N_HI=${N_HI:-1500}; else N_LO=${N_LO:-2000}; N_HI=${N_HI:-6000}; fi
CONC=${CONC:-8}
# whose profiles (top functions, each as a slope) go in the results file (of the cases that ran)
PROFILES=${PROFILES:-"T1 T2 T1s T1sN N1s N1sN N1s3 N1sN3"}

# --- what it needs, installed only if missing (as scripts/deps.sh does) -------------------------
missing=()
have() { command -v "$1" >/dev/null 2>&1; }
have valgrind || missing+=(valgrind)
have nginx || missing+=(nginx-light)
have ab || missing+=(apache2-utils)
have python3 || missing+=(python3)
TLS_CASES=0
[[ " $CASES " =~ " "(T1s|N1s|T1sN|N1sN|N1s3|N1sN3)" " ]] && TLS_CASES=1
((TLS_CASES)) && { have openssl || missing+=(openssl); }
if [[ " $CASES " =~ " "(T2|T2C1|T2B|R0|R1|K)" " ]]; then
  have redis-server || missing+=(redis-server)
  { have redis-cli && have redis-benchmark; } || missing+=(redis-tools)
fi
if ((${#missing[@]})); then
  echo "instructions: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the gateway under test -----------------------------------------------------------------------
if [[ -z ${TOLLGATE_BIN:-} ]]; then
  scripts/deps.sh build
  # Its own build directory, Release, no tests: what is measured is the shipped binary.
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=OFF >/dev/null
  cmake --build build-bench -j"$(nproc)" --target tollgate tollgate-sim >/dev/null
  TOLLGATE_BIN=$ROOT/build-bench/tollgate
  # Others may be editing the tree: say which sources differed from HEAD when this was built.
  changed=$(git status --porcelain -- src include CMakeLists.txt 2>/dev/null | awk '{print $2}' | tr '\n' ' ')
  DESCRIBE="$(git rev-parse --short HEAD 2>/dev/null || echo '?') work tree, build-bench; sources changed from HEAD: ${changed:-none}"
else
  DESCRIBE="TOLLGATE_BIN"
fi
[[ -x $TOLLGATE_BIN ]] || { echo "instructions: $TOLLGATE_BIN is not an executable" >&2; exit 1; }
# The acquire script for RS comes from the same build's tollgate-sim, if there is one.
TOLLGATE_SIM=${TOLLGATE_SIM:-$(dirname "$TOLLGATE_BIN")/tollgate-sim}

STAMP=${STAMP:-$(date -u +%Y%m%dT%H%M%SZ)}  # bench/report.sh names its runs
OUT=$ROOT/bench/results/instructions-$STAMP
mkdir -p "$OUT"
W=$(mktemp -d /tmp/tollgate-instr-XXXXXX)
RUNS=$W/runs.tsv
: >"$RUNS"

# --- processes: every one started here is remembered and stopped here -----------------------------
PIDS=()
forget() { local p keep=(); for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done; PIDS=("${keep[@]}"); }
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "instructions: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # start NAME CMD...: in the background, output to $W/NAME.log; sets LAST_PID
  local name=$1; shift
  "$@" >"$W/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}
# Waits for a listening socket by reading /proc/net/tcp: connecting to find out would itself be
# work for the process under callgrind, and a number of probes that depends on timing.
wait_listen() { # PORT PID NAME
  local hex
  hex=$(printf '0100007F:%04X' "$1")
  for _ in $(seq 1 1200); do
    kill -0 "$2" 2>/dev/null || { cat "$W/$3.log" >&2; fail "$3 exited during start-up"; }
    awk -v a="$hex" '$2 == a && $4 == "0A" {found=1} END {exit !found}' /proc/net/tcp && return 0
    sleep 0.25
  done
  fail "$3 never listened on port $1"
}
wait_log() { # NAME PID TEXT: a line its log prints once ready
  for _ in $(seq 1 1200); do
    grep -q "$3" "$W/$1.log" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$W/$1.log" >&2; fail "$1 exited during start-up"; }
    sleep 0.25
  done
  fail "$1 never printed '$3'"
}
# SIGTERM, then wait: callgrind writes its file when the process exits (Tollgate drains first,
# nginx with master_process off exits on SIGTERM, Redis on SIGTERM without saving: --save '').
stop() { # PID NAME
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 1200); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1" 2>/dev/null || true; fi
  wait "$1" 2>/dev/null || true
  forget "$1"
}
CG=(valgrind --tool=callgrind -q)
record() { # CASE N FILE NOTE: the run's total goes into the table
  local ir
  ir=$(python3 bench/instructions.py total "$3") || fail "$1 N=$2: no total in $3"
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$ir" "$3" "$4" >>"$RUNS"
  printf 'instructions: %-3s N=%-5s %15s Ir\n' "$1" "$2" "$ir"
}
# ab -k -q -n N -c CONC URL, and fail loudly unless every request completed with a 2xx on a
# kept-alive connection (a refused or reconnected request would be a different cost).
load() { # N URL LOGNAME [CONCURRENCY]
  local out=$W/$3.ab
  local header=()
  [[ -n ${AB_HEADER:-} ]] && header=(-H "$AB_HEADER")
  ab -k -q "${header[@]}" -n "$1" -c "${4:-$CONC}" "$2" >"$out" 2>&1 || { cat "$out" >&2; fail "ab failed for $2"; }
  local complete failed non2xx keepalive
  complete=$(awk '/^Complete requests:/ {print $3}' "$out")
  failed=$(awk '/^Failed requests:/ {print $3}' "$out")
  non2xx=$(awk '/^Non-2xx responses:/ {print $3}' "$out")
  keepalive=$(awk '/^Keep-Alive requests:/ {print $3}' "$out")
  if [[ ${REFUSED:-} == 1 ]]; then
    # Every answer but the first is a 429 (whose length differs from the 200's: ab counts those
    # as failed for their length, nothing else may fail).
    local length
    length=$(awk -F'[:,)]' '/Length:/ {gsub(/ /, "", $3); print $3}' "$out")
    [[ $complete == "$1" && ${non2xx:-0} -ge $(($1 - 1)) && $failed == "${length:-0}" ]] ||
      { cat "$out" >&2; fail "$2: complete $complete of $1, non-2xx ${non2xx:-0} (all but one expected)"; }
  else
    [[ $complete == "$1" && $failed == 0 && -z $non2xx ]] ||
      { cat "$out" >&2; fail "$2: complete $complete of $1, failed $failed, non-2xx ${non2xx:-0}"; }
  fi
  [[ $keepalive == "$1" ]] || { cat "$out" >&2; fail "$2: only $keepalive of $1 requests were kept alive"; }
}

# --- the upstream: nginx `return 200`, not measured --------------------------------------------------
mkdir -p "$W/tmp"
UP=$(free_port)
nginx_common() { # NAME: the lines every nginx here shares (one process, foreground, files in $W)
  cat <<NGX
worker_processes 1; master_process off; daemon off;
error_log $W/$1.err warn; pid $W/$1.pid;
events { worker_connections 1024; }
NGX
}
{
  nginx_common upstream
  cat <<NGX
http { access_log off; keepalive_requests 100000000; keepalive_timeout 600s;
  client_body_temp_path $W/tmp/upstream-body; proxy_temp_path $W/tmp/upstream-proxy;
  server { listen 127.0.0.1:$UP; listen 127.0.0.2:$UP; listen 127.0.0.3:$UP;
    location / { default_type text/plain; return 200 "ok"; } } }
NGX
} >"$W/upstream.conf"
start upstream nginx -c "$W/upstream.conf" -p "$W"
UP_PID=$LAST_PID
wait_listen "$UP" "$UP_PID" upstream

# --- the TLS upstreams (T1s N1s: keep-alive; T1sN N1sN: keepalive_requests 1), not measured ---------
# The CA and the server's key are made here, in the temporary folder (removed at exit): no key
# material is ever written under the repository.
PKI=$W/pki
tls_upstream_conf() { # NAME PORT KEEPALIVE_REQUESTS ACCESS_LOG
  nginx_common "$1"
  cat <<NGX
http { $4 keepalive_requests $3; keepalive_timeout 600s;
  client_body_temp_path $W/tmp/$1-body; proxy_temp_path $W/tmp/$1-proxy;
  server { listen 127.0.0.1:$2 ssl; ssl_certificate $PKI/server.pem; ssl_certificate_key $PKI/server.key;
    ssl_protocols ${TLS_UPSTREAM_PROTOCOLS:-TLSv1.2 TLSv1.3}; ssl_session_cache shared:S:1m;
    location / { default_type text/plain; return 200 "ok"; } } }
NGX
}
if ((TLS_CASES)); then
  if [[ -f tests/support/tls_pki.sh ]]; then
    bash tests/support/tls_pki.sh "$PKI" || fail "tests/support/tls_pki.sh failed"
  else  # the recipe's CA and server certificate (localhost, 127.0.0.1), P-256
    mkdir -p "$PKI"
    (cd "$PKI" &&
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=test-ca \
        -keyout ca.key -out ca.pem &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost -keyout server.key -out srv.csr &&
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf &&
      openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile ext.cnf -out server.pem &&
      chmod 600 ./*.key) >"$W/pki.log" 2>&1 || { cat "$W/pki.log" >&2; fail "the test CA could not be made"; }
  fi
  # Both log one line per request: nginx's connection serial number, whether that connection's
  # handshake was resumed ("r" or "."), the protocol. Not measured (nginx runs natively).
  for v in "upstream-tls 100000000" "upstream-tlsn 1"; do
    read -r name requests <<<"$v"
    port=$(free_port)
    tls_upstream_conf "$name" "$port" "$requests" \
      "log_format tls '\$connection \$ssl_session_reused \$ssl_protocol'; access_log $W/$name.access tls;" >"$W/$name.conf"
    start "$name" nginx -c "$W/$name.conf" -p "$W"
    wait_listen "$port" "$LAST_PID" "$name"
    if [[ $name == upstream-tls ]]; then UPS=$port UPS_PID=$LAST_PID; else UPSN=$port UPSN_PID=$LAST_PID; fi
  done
fi
# The lines a run leaves in a TLS upstream's log: its upstream connections, each one handshake,
# and how many were resumed after the run's first (with keepalive_requests 1, one per request).
tls_log() { # PORT: that TLS upstream's access log (none for the plain upstream)
  if [[ -n ${UPS:-} && $1 == "$UPS" ]]; then echo "$W/upstream-tls.access"
  elif [[ -n ${UPSN:-} && $1 == "$UPSN" ]]; then echo "$W/upstream-tlsn.access"; fi
}
tls_lines() { # PORT: the log's line count now
  local log
  log=$(tls_log "$1")
  if [[ -n $log && -f $log ]]; then wc -l <"$log"; else echo 0; fi
}
handshake_note() { # CASE N PORT FIRST_LINE: a line in $OUT/handshakes.tsv, and the table's note
  python3 - "$(tls_log "$3")" "$4" "$1" "$2" "$OUT/handshakes.tsv" <<'PY'
import collections, sys
log, skip, case, n, tsv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
lines = [l.split() for l in open(log).read().splitlines()[skip:]]
conns = {}  # connection serial -> (reused flag, protocol), in order of first request
for f in lines:
    conns.setdefault(f[0], (f[1], f[2] if len(f) > 2 else "?"))
handshakes = list(conns.values())
rest = handshakes[1:]
reused = sum(1 for flag, _ in rest if flag == "r")
full = sum(1 for flag, _ in handshakes if flag != "r")
protocols = collections.Counter(p for _, p in handshakes)
ratio = reused / len(rest) if rest else 0.0
with open(tsv, "a") as f:
    f.write(f"{case}\t{n}\t{len(lines)}\t{len(handshakes)}\t{full}\t{reused}\t{len(rest)}\t{ratio:.4f}\t"
            + ",".join(f"{k}:{v}" for k, v in sorted(protocols.items())) + "\n")
print(f"upstream: {len(handshakes)} connections, {full} full handshakes, resumed {reused}/{len(rest)} after the first"
      f" = {100 * ratio:.2f}%, " + ", ".join(f"{k} {v}" for k, v in sorted(protocols.items())))
PY
}

# --- nginx as the proxy (N0, N1) ---------------------------------------------------------------------
nginx_proxy_conf() { # NAME PORT LIMIT(0|1)
  nginx_common "$1"
  local limit_zone="" limit=""
  if [[ $3 == 1 ]]; then
    # One zone keyed by a constant and a rate nothing here reaches: the limit_req code runs for
    # every request (lookup, accounting) and never delays or rejects one.
    limit_zone='limit_req_zone "all" zone=never:1m rate=1000000r/s;'
    limit='limit_req zone=never burst=1000000 nodelay;'
  fi
  cat <<NGX
http { access_log off; keepalive_requests 100000000; keepalive_timeout 600s;
  client_body_temp_path $W/tmp/$1-body; proxy_temp_path $W/tmp/$1-proxy;
  $limit_zone
  upstream up { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 100000000; }
  server { listen 127.0.0.1:$2;
    location / { $limit proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://up; } } }
NGX
}
# N1s, N1sN: N1's never-binding limit_req, proxying to a TLS upstream that it verifies, sessions
# reused, connections kept in a pool (keepalive 32; with keepalive_requests 1 upstream the pool
# never keeps one).
# N1s3, N1sN3: the same with proxy_ssl_protocols TLSv1.2 TLSv1.3 (nginx 1.22 offers only up to
# TLS 1.2 to upstreams unless told; Tollgate offers 1.3): the like-for-like protocol comparison.
nginx_tls_proxy_conf() { # NAME PORT UPSTREAM_PORT [PROTOCOLS]
  nginx_common "$1"
  local protocols=""
  [[ -n ${4:-} ]] && protocols="proxy_ssl_protocols $4;"
  cat <<NGX
http { access_log off; keepalive_requests 100000000; keepalive_timeout 600s;
  client_body_temp_path $W/tmp/$1-body; proxy_temp_path $W/tmp/$1-proxy;
  limit_req_zone "all" zone=never:1m rate=1000000r/s;
  upstream up { server 127.0.0.1:$3; keepalive 32; }
  server { listen 127.0.0.1:$2;
    location / { limit_req zone=never burst=1000000 nodelay;
      proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_ssl_verify on; proxy_ssl_trusted_certificate $PKI/ca.pem;
      proxy_ssl_server_name on; proxy_ssl_name localhost; proxy_ssl_session_reuse on; $protocols
      proxy_pass https://up; } } }
NGX
}
run_nginx() { # CASE LIMIT N [TLS_UPSTREAM_PORT [PROTOCOLS]]
  local port name=$1-$3 file=$OUT/$1.$3.callgrind first note=""
  port=$(free_port)
  if [[ -n ${4:-} ]]; then nginx_tls_proxy_conf "$name" "$port" "$4" "${5:-}" >"$W/$name.conf"
  else nginx_proxy_conf "$name" "$port" "$2" >"$W/$name.conf"; fi
  first=$(tls_lines "${4:-}")
  start "$name" "${CG[@]}" --callgrind-out-file="$file" nginx -c "$W/$name.conf" -p "$W"
  local pid=$LAST_PID
  wait_listen "$port" "$pid" "$name"
  load "$3" "http://127.0.0.1:$port/ibe/shopping/search" "$name"
  stop "$pid" "$name"
  [[ -n ${4:-} ]] && note=$(handshake_note "$1" "$3" "$4" "$first")
  record "$1" "$3" "$file" "$note"
}

# --- Tollgate (T0, T1, T2) -----------------------------------------------------------------------------
REDIS_PORT=6379  # replaced by the private Redis's port when one runs
REDIS_NODES=""   # a JSON array of "host:port": the gateway is configured for a cluster of those
BUCKETS=100  # T2B/RTB: rules /b0 .. /b99, requested as /ibe/b0 .. /ibe/b99
many_rules() { # the T2B rules, as JSON array items after the /nobind rule
  local i
  for ((i = 0; i < BUCKETS; i++)); do
    printf ', {"configId": %d, "interfaceUrl": "/b%d", "rateLimit": 1000000, "cache": 0, "status": 1}' $((i + 2)) "$i"
  done
}
bucket_paths() { local i; for ((i = 0; i < BUCKETS; i++)); do echo "/ibe/b$i"; done; }
# Exactly N requests over CONC keep-alive connections, round-robin over the 100 paths.
load_buckets() { # N PORT LOGNAME
  # shellcheck disable=SC2046
  python3 bench/keepalive_load.py "$1" "$CONC" "127.0.0.1:$2" $(bucket_paths) >"$W/$3.load" 2>&1 ||
    { cat "$W/$3.load" >&2; fail "$3: the 100-bucket load failed"; }
}
tollgate_conf() { # PORT STORE [many]
  # threads 1 (nginx has one worker); no access log (nginx's is off); admin on a port of its own
  # choosing. The rule never binds: a million permits a second with no wait (cache 0).
  # heartbeat_ms at its maximum: the heartbeat is a timer, work per second and not per request,
  # and a run under callgrind lasts longer with more requests, so it would leak into the slope.
  # decision_timeout_ms generous and fail_closed: a slow decision (Redis under callgrind) must
  # not turn into a local fallback that Redis never counts; if one fails, ab sees a non-2xx.
  # UPSTREAM_JSON, when set, replaces the plain upstream's object (T1s, T1sN: https and its CA).
  local upstream=${UPSTREAM_JSON:-}
  [[ -n $upstream ]] || upstream="{\"url\": \"http://127.0.0.1:$UP\"}"
  cat <<JSON
{"listen": "127.0.0.1:$1", "threads": 1, "access_log": "off", "admin": {"listen": "127.0.0.1:0"},
 "upstreams": {"up": $upstream}, "routes": [{"prefix": "/", "upstream": "up"}],
 "limits": {"source": "file", "store": "$2",
   "redis": {$(if [[ -n $REDIS_NODES ]]; then echo "\"mode\": \"cluster\", \"nodes\": $REDIS_NODES"
               else echo "\"host\": \"127.0.0.1\", \"port\": $REDIS_PORT"; fi),
             "decision_timeout_ms": 10000, "connect_timeout_ms": 10000,
             "failure_policy": "fail_closed", "heartbeat_ms": 60000},
   "rules": [{"configId": 1, "interfaceUrl": "/nobind", "rateLimit": 1000000, "cache": 0, "status": 1}$([[ ${3:-} == many ]] && many_rules)$(
     [[ ${REFUSED:-} == 1 ]] && echo ', {"configId": 100000, "interfaceUrl": "/refuse", "rateLimit": 0.001, "cache": 0, "status": 1}')$(
     [[ ${CLASSED:-} == 1 ]] && echo ', {"configId": 100001, "interfaceUrl": "/classed", "rateLimit": 1000000, "cache": 0, "status": 1, "priority": {"by": "header:X-Tollgate-Priority", "classes": ["book", "look"], "default": "look", "reserve": {"book": 0.3}}}')$(
     [[ ${METERED:-} == 1 ]] && echo ', {"configId": 100002, "interfaceUrl": "/metered", "status": 1, "cache": 0, "algorithm": "srtcm", "cir": 1000000, "cbs": 1000000000, "ebs": 1000000000}')]}}
JSON
}
redis_cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
flush_store() { # the private Redis, or every primary of the private cluster
  local p
  if [[ -n $REDIS_NODES ]]; then for p in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$p" FLUSHALL >/dev/null; done
  else redis_cli FLUSHALL >/dev/null; fi
}
# Redis store: Tollgate is ready for decisions once it has loaded its scripts; its first heartbeat
# follows at once and leaves the instances key, which says so (the key is flushed before each start).
wait_store() { # NAME PID
  for _ in $(seq 1 1200); do
    [[ $(redis-cli -c -h 127.0.0.1 -p "$REDIS_PORT" EXISTS 'tollgate:{instances}' 2>/dev/null) == 1 ]] && return 0
    kill -0 "$2" 2>/dev/null || { cat "$W/$1.log" >&2; fail "$1 exited during start-up"; }
    sleep 0.25
  done
  fail "$1 never connected to Redis"
}
run_tollgate() { # CASE STORE PATH N [CONCURRENCY]; PATH "many": the 100 rules, spread over
  # TLS_UP set: the upstream is https://localhost:TLS_UP, verified against the run's CA (T1s, T1sN)
  local port name=$1-$4 file=$OUT/$1.$4.callgrind first note UPSTREAM_JSON=""
  port=$(free_port)
  [[ -n ${TLS_UP:-} ]] && UPSTREAM_JSON="{\"url\": \"https://localhost:$TLS_UP\", \"tls\": {\"ca_file\": \"$PKI/ca.pem\"}}"
  [[ -n ${UPSTREAM_OVERRIDE:-} ]] && UPSTREAM_JSON=$UPSTREAM_OVERRIDE
  first=$(tls_lines "${TLS_UP:-}")
  tollgate_conf "$port" "$2" "$([[ $3 == many ]] && echo many)" >"$W/$name.json"
  [[ $2 == redis ]] && flush_store
  start "$name" "${CG[@]}" --callgrind-out-file="$file" "$TOLLGATE_BIN" --config "$W/$name.json"
  local pid=$LAST_PID
  wait_log "$name" "$pid" "tollgate: ready"
  [[ $2 == redis ]] && wait_store "$name" "$pid"
  if [[ $3 == many ]]; then load_buckets "$4" "$port" "$name"
  else load "$4" "http://127.0.0.1:$port$3" "$name" "${5:-}"; fi
  stop "$pid" "$name"
  note=""
  [[ -n ${5:-} ]] && note="ab -c $5"
  [[ -n ${TLS_UP:-} ]] && note=$(handshake_note "$1" "$4" "$TLS_UP" "$first")
  record "$1" "$4" "$file" "$note"
}

# --- Redis under callgrind (R0) -------------------------------------------------------------------------
# serverCron runs 10 times a second whatever the load (memory statistics through jemalloc's mallctl:
# ~1.2M Ir a second idle under callgrind) and a longer run has more of it: it is left out of the
# count with --toggle-collect (which must precede --collect-atstart=yes, or collection starts off).
CG_REDIS=(valgrind --tool=callgrind -q --toggle-collect=serverCron --collect-atstart=yes)
start_redis_cg() { # NAME FILE: sets REDIS_PORT, LAST_PID
  REDIS_PORT=$(free_port)
  mkdir -p "$W/$1.dir"
  start "$1" "${CG_REDIS[@]}" --callgrind-out-file="$2" \
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$W/$1.dir"
  wait_listen "$REDIS_PORT" "$LAST_PID" "$1"
}
source bench/script_calls.sh  # the script calls RS, RL, RM, RP (shared with bench/redis_script_cost.sh)
MINIMAL_LUA=$(cat bench/minimal_bucket.lua)  # the reference token bucket (read from the repository root)
# With Redis under callgrind, probing Redis would count; the gateway is not measured here, so its
# metrics say when its scripts are loaded (store up), and its first heartbeat is already sent.
wait_store_metric() { # NAME PID
  local admin
  admin=$(sed -n 's/^tollgate: admin listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/$1.log" | head -1)
  [[ -n $admin ]] || fail "$1: no admin port in its log"
  for _ in $(seq 1 1200); do
    python3 -c 'import sys, urllib.request as u
sys.exit(0 if "tollgate_store_up 1" in u.urlopen(sys.argv[1], timeout=5).read().decode() else 1)' \
      "http://127.0.0.1:$admin/metrics" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$W/$1.log" >&2; fail "$1 exited during start-up"; }
    sleep 0.25
  done
  fail "$1 never connected to Redis"
}
run_redis_gateway() { # CASE N [CONCURRENCY|many]: RT/RT1/RTB, Tollgate (not under callgrind) making N decisions
  local case=$1 n=$2 how=${3:-}
  local file=$OUT/$case.$n.callgrind
  start_redis_cg "redis-$case-$n" "$file"
  local rpid=$LAST_PID port name=tollgate-$case-$n
  port=$(free_port)
  tollgate_conf "$port" redis "$([[ $how == many ]] && echo many)" >"$W/$name.json"
  start "$name" "$TOLLGATE_BIN" --config "$W/$name.json"
  local gpid=$LAST_PID
  wait_log "$name" "$gpid" "tollgate: ready"
  wait_store_metric "$name" "$gpid"
  if [[ $how == many ]]; then load_buckets "$n" "$port" "$name"
  else load "$n" "http://127.0.0.1:$port/ibe/nobind" "$name" "$how"; fi
  stop "$gpid" "$name"
  stop "$rpid" "redis-$case-$n"
  if [[ $how == many ]]; then record "$case" "$n" "$file" "gateway native, $CONC clients over $BUCKETS buckets"
  else record "$case" "$n" "$file" "gateway native, ab -c ${how:-$CONC}"; fi
}
run_redis_bench() { # CASE N ARGS...: redis-benchmark -c 1 (one call per read: no batching to vary)
  local case=$1 n=$2; shift 2
  local file=$OUT/$case.$n.callgrind
  start_redis_cg "redis-$case-$n" "$file"
  local rpid=$LAST_PID sha=""
  case $case in
    RS) sha=$(redis_cli SCRIPT LOAD "$("$TOLLGATE_SIM" --redis-script)") ;;
    RL) sha=$(redis_cli SCRIPT LOAD "$("$TOLLGATE_SIM" --redis-lean-script)") ;;
    RM) sha=$(redis_cli SCRIPT LOAD "$MINIMAL_LUA") ;;
  esac
  script_call "$case" "$sha"
  local cmd=("${CALL[@]}")
  redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c 1 -n "$n" -q "${cmd[@]}" >"$W/redis-$case-$n.bench" 2>&1 ||
    { cat "$W/redis-$case-$n.bench" >&2; fail "redis-benchmark $case failed"; }
  if grep -qi 'error' "$W/redis-$case-$n.bench"; then cat "$W/redis-$case-$n.bench" >&2; fail "redis-benchmark $case: errors"; fi
  # Every call must have succeeded: the script's reply is checked once by hand.
  local check
  check=$(redis_cli "${cmd[@]}" 2>&1 | head -1)
  [[ $check != *ERR* && $check != *rror* ]] || fail "$case: ${cmd[*]} answered $check"
  stop "$rpid" "redis-$case-$n"
  record "$case" "$n" "$file" "redis-benchmark -c 1"
}

# --- a 3-primary Redis Cluster (K) ---------------------------------------------------------------------------
# Three cluster-enabled servers, plain or each under callgrind (FILE_PREFIX set: FILE_PREFIX.nodeI.callgrind),
# joined by redis-cli --cluster create (slots 0-5460, 5461-10922, 10923-16383). The cluster bus's
# gossip, like serverCron, is work per second and not per decision: what is received is left out.
cluster_port() { # a free port whose cluster bus port (+10000) is free too
  local p
  for _ in $(seq 1 50); do
    p=$(free_port)
    ((p < 55535)) && python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1])))' $((p + 10000)) 2>/dev/null &&
      { echo "$p"; return 0; }
  done
  fail "no port with a free cluster bus port"
}
# The request path of a redis-server: reading and running commands (readQueryFromClient) and
# writing replies (handleClientsWithPendingWritesUsingThreads, from beforeSleep); no cron, no gossip.
CG_REQUEST=(valgrind --tool=callgrind -q --collect-atstart=no --toggle-collect=readQueryFromClient
  --toggle-collect=handleClientsWithPendingWritesUsingThreads)
start_cluster() { # NAME [FILE_PREFIX]: sets CLUSTER_PORTS, CLUSTER_PIDS, REDIS_NODES, REDIS_PORT
  local i port addrs=() cg=("${CG_REQUEST[@]}")
  CLUSTER_PORTS=() CLUSTER_PIDS=()
  for i in 0 1 2; do
    port=$(cluster_port)
    rm -rf "$W/$1-$i.dir" && mkdir -p "$W/$1-$i.dir"  # a fresh nodes.conf: a node that knows others cannot join
    if [[ -n ${2:-} ]]; then
      start "$1-$i" "${cg[@]}" --callgrind-out-file="$2.node$i.callgrind" redis-server --bind 127.0.0.1 --port "$port" \
        --save '' --appendonly no --dir "$W/$1-$i.dir" --cluster-enabled yes --cluster-config-file nodes.conf
    else
      start "$1-$i" redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$W/$1-$i.dir" \
        --cluster-enabled yes --cluster-config-file nodes.conf
    fi
    CLUSTER_PIDS+=("$LAST_PID") CLUSTER_PORTS+=("$port") addrs+=("127.0.0.1:$port")
    wait_listen "$port" "$LAST_PID" "$1-$i"
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$W/$1.create" 2>&1 ||
    { cat "$W/$1.create" >&2; fail "$1: redis-cli --cluster create failed"; }
  for _ in $(seq 1 600); do
    local ok=0
    for port in "${CLUSTER_PORTS[@]}"; do
      redis-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q 'cluster_state:ok' && ok=$((ok + 1))
    done
    ((ok == 3)) && break
    sleep 0.25
  done
  ((ok == 3)) || fail "$1: the cluster never became ok"
  REDIS_NODES="[\"${addrs[0]}\", \"${addrs[1]}\", \"${addrs[2]}\"]" REDIS_PORT=${CLUSTER_PORTS[0]}
}
stop_cluster() { # NAME
  local i
  for i in 0 1 2; do stop "${CLUSTER_PIDS[$i]}" "$1-$i"; done
  REDIS_NODES=""
}
run_redis_cluster() { # CASE N NODES: NODES (1: one plain server, 3: a cluster) under callgrind (the
  # request path), Tollgate native making N decisions over 100 buckets
  local case=$1 n=$2 nodes=$3 name=tollgate-$1-$2 port i sum=0 ir shares=""
  if ((nodes == 3)); then
    start_cluster "cluster-$case-$n" "$OUT/$case.$n"
  else
    REDIS_PORT=$(free_port) CLUSTER_PORTS=() CLUSTER_PIDS=()
    mkdir -p "$W/redis-$case-$n.dir"
    start "redis-$case-$n" "${CG_REQUEST[@]}" --callgrind-out-file="$OUT/$case.$n.node0.callgrind" \
      redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$W/redis-$case-$n.dir"
    CLUSTER_PIDS=("$LAST_PID") CLUSTER_PORTS=("$REDIS_PORT")
    wait_listen "$REDIS_PORT" "$LAST_PID" "redis-$case-$n"
  fi
  port=$(free_port)
  tollgate_conf "$port" redis many >"$W/$name.json"
  start "$name" "$TOLLGATE_BIN" --config "$W/$name.json"
  local gpid=$LAST_PID
  wait_log "$name" "$gpid" "tollgate: ready"
  wait_store_metric "$name" "$gpid"
  load_buckets "$n" "$port" "$name"
  stop "$gpid" "$name"
  if ((nodes == 3)); then stop_cluster "cluster-$case-$n"; else stop "${CLUSTER_PIDS[0]}" "redis-$case-$n"; fi
  for ((i = 0; i < nodes; i++)); do
    ir=$(python3 bench/instructions.py total "$OUT/$case.$n.node$i.callgrind") || fail "$case N=$n: node $i has no total"
    sum=$((sum + ir)) shares="$shares $ir"
  done
  echo "summary: $sum" >"$OUT/$case.$n.callgrind"  # the nodes' sum, as record reads it
  echo "instructions: $case N=$n nodes:$shares"
  record "$case" "$n" "$OUT/$case.$n.callgrind" "gateway native, $CONC clients over $BUCKETS buckets, $nodes node(s), request path"
}

# --- the cases --------------------------------------------------------------------------------------------
echo "instructions: $TOLLGATE_BIN ($DESCRIBE); N=$N_LO and $N_HI, ab -k -c $CONC; cases: $CASES"
for c in $CASES; do
  for n in "$N_LO" "$N_HI"; do
    case $c in
      N0) run_nginx N0 0 "$n" ;;
      N1) run_nginx N1 1 "$n" ;;
      T0) run_tollgate T0 local /ibe/shopping/search "$n" ;;
      T1) run_tollgate T1 local /ibe/nobind "$n" ;;
      T1R) REFUSED=1 run_tollgate T1R local /ibe/refuse "$n" ;;
      T1P) CLASSED=1 run_tollgate T1P local /ibe/classed "$n" ;;
      T1M) METERED=1 run_tollgate T1M local /ibe/metered "$n" ;;
      T1A) TOLLGATE_BENCH_KEY=bench-key-0123456789 \
             UPSTREAM_OVERRIDE="{\"url\": \"http://127.0.0.1:$UP\", \"auth\": {\"type\": \"header\", \"name\": \"X-Api-Key\", \"value_env\": \"TOLLGATE_BENCH_KEY\"}}" \
             run_tollgate T1A local /ibe/nobind "$n" ;;
      T1H) UPSTREAM_OVERRIDE="{\"urls\": [\"http://127.0.0.1:$UP\", \"http://127.0.0.2:$UP\", \"http://127.0.0.3:$UP\"]}" \
             run_tollgate T1H local /ibe/nobind "$n" ;;
      T1I) AB_HEADER="X-Request-Id: bench-3f2a9c1e7b604d58" run_tollgate T1I local /ibe/nobind "$n" ;;
      T1s) TLS_UP=$UPS run_tollgate T1s local /ibe/nobind "$n" ;;
      T1sN) TLS_UP=$UPSN run_tollgate T1sN local /ibe/nobind "$n" ;;
      N1s) run_nginx N1s 1 "$n" "$UPS" ;;
      N1sN) run_nginx N1sN 1 "$n" "$UPSN" ;;
      N1s3) run_nginx N1s3 1 "$n" "$UPS" "TLSv1.2 TLSv1.3" ;;
      N1sN3) run_nginx N1sN3 1 "$n" "$UPSN" "TLSv1.2 TLSv1.3" ;;
      T2 | T2C1 | T2B)
        if [[ -z ${T2_REDIS_PID:-} ]]; then  # Redis for T2 is not measured: plain, one for all runs
          REDIS_PORT=$(free_port)
          mkdir -p "$W/redis-t2.dir"
          start redis-t2 redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$W/redis-t2.dir"
          T2_REDIS_PID=$LAST_PID T2_REDIS_PORT=$REDIS_PORT
          wait_listen "$REDIS_PORT" "$T2_REDIS_PID" redis-t2
        fi
        REDIS_PORT=$T2_REDIS_PORT
        case $c in
          T2) run_tollgate T2 redis /ibe/nobind "$n" ;;
          T2C1) run_tollgate T2C1 redis /ibe/nobind "$n" 1 ;;
          T2B) run_tollgate T2B redis many "$n" ;;
        esac ;;
      R1)
        run_redis_gateway RT1 "$n" 1
        run_redis_gateway RTB "$n" many ;;
      K)
        start_cluster cluster-t2k
        run_tollgate T2K redis many "$n"
        stop_cluster cluster-t2k
        run_redis_cluster RK1 "$n" 1
        run_redis_cluster RKB "$n" 3 ;;
      R0)
        run_redis_gateway RT "$n"
        if [[ -x $TOLLGATE_SIM ]]; then run_redis_bench RS "$n"; run_redis_bench RL "$n"
        else echo "instructions: no $TOLLGATE_SIM: RS and RL skipped"; fi
        run_redis_bench RM "$n"
        run_redis_bench RP "$n" ;;
      *) fail "unknown case $c (N0 N1 T0 T1 T1R T1P T1M T1A T1H T1I T2 T2C1 T2B R0 R1 K T1s N1s T1sN N1sN N1s3 N1sN3)" ;;
    esac
  done
done
if [[ -n ${T2_REDIS_PID:-} ]]; then stop "$T2_REDIS_PID" redis-t2; fi
stop "$UP_PID" upstream
if ((TLS_CASES)); then stop "$UPS_PID" upstream-tls; stop "$UPSN_PID" upstream-tlsn; fi

# --- the table, the profile, where the files are -------------------------------------------------------------
HEADER="Instructions per request (callgrind), $(date -u '+%Y-%m-%d %H:%M UTC'); Tollgate: $TOLLGATE_BIN ($DESCRIBE)
ab -k -c $CONC, N=$N_LO and N=$N_HI requests, one process start each; Ir/request = (Ir(N=$N_HI) - Ir(N=$N_LO)) / $((N_HI - N_LO)).
$(valgrind --version), $(nginx -v 2>&1 | sed 's/^nginx version: //'), $(redis-server --version 2>/dev/null | awk '{print "Redis " $3}' | sed 's/v=//')"
RESULT=$ROOT/bench/results/instructions-$STAMP.txt
python3 bench/instructions.py report "$RUNS" "$RESULT" "$HEADER"
if [[ -f $OUT/handshakes.tsv ]]; then
  { echo; echo "TLS upstreams: what each run's upstream saw in its access log (\$connection, \$ssl_session_reused):"
    echo "connections (each one handshake), full handshakes, resumed among the connections after the run's first."
    echo "A difference in full handshakes between the N=$N_LO and N=$N_HI runs goes into the slope (a full handshake"
    echo "costs the client millions of Ir): compare the two runs' counts before reading a keep-alive case's slope."
    printf '%-5s %6s %8s %11s %5s %8s %7s %8s  %s\n' case N requests connections full resumed of ratio protocols
    awk -F'\t' '{printf "%-5s %6s %8s %11s %5s %8s %7s %7.2f%%  %s\n", $1, $2, $3, $4, $5, $6, $7, 100 * $8, $9}' "$OUT/handshakes.tsv"
  } | tee -a "$RESULT"
fi
for p in $PROFILES; do
  if [[ -f $OUT/$p.$N_HI.callgrind && -f $OUT/$p.$N_LO.callgrind ]]; then
    { echo; echo "=== $p profile"; python3 bench/instructions.py profile "$OUT/$p.$N_LO.callgrind" "$OUT/$p.$N_HI.callgrind" "$N_LO" "$N_HI" 25; } >>"$RESULT"
  fi
done
echo
echo "instructions: table and profiles ($PROFILES) in $RESULT"
echo "instructions: callgrind files in $OUT (e.g. callgrind_annotate --inclusive=no $OUT/T1.$N_HI.callgrind)"
