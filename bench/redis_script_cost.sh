#!/usr/bin/env bash
# Redis's own cost per decision, in instructions (callgrind), for the acquire scripts alone:
#   RS  Tollgate's general acquire script (`tollgate-sim --redis-script`), one bucket
#   RL  the lean script the store sends for a request with one bucket and nothing else
#       (`tollgate-sim --redis-lean-script`)
#   RF  the same with a bucket of 1e12 + 0.5 permits, so that what remains is a fraction (as in
#       most real buckets) and goes back as %.17g text rather than as an integer
#   RA  the general script for an adaptive bucket, never throttled: the same decision
#       plus its adapted-rate hash (HMGET, HSET, PEXPIRE)
#   RM  a minimal token bucket (TIME, HMGET, HSET, PEXPIRE on one key), for reference
#   RP  PING: the fixed cost of one call
# Each case runs redis-server under callgrind twice, fed N_LO and N_HI calls by `redis-benchmark
# -c 1` (one call per read), on a bucket that never binds (1 µs interval, never empties);
# Ir per call = (Ir(N_HI) - Ir(N_LO)) / (N_HI - N_LO), so that start-up and shutdown cancel.
# serverCron (memory statistics, 10 times a second whatever the load) is left out of the count.
#
#   bench/redis_script_cost.sh [path/to/tollgate-sim]      # default: build/tollgate-sim
#   CASES="RS RL" N_LO=500 N_HI=1500 bench/redis_script_cost.sh
#   KEEP=1 bench/redis_script_cost.sh    # keeps the callgrind files, for
#       python3 bench/instructions.py profile DIR/RL.2000.callgrind DIR/RL.6000.callgrind 2000 6000
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=${1:-build/tollgate-sim}
CASES=${CASES:-"RS RA RL RF RM RP"}
N_LO=${N_LO:-2000}
N_HI=${N_HI:-6000}
[[ -x $SIM ]] || { echo "redis_script_cost: no $SIM (build it first)" >&2; exit 1; }
for tool in valgrind redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "redis_script_cost: $tool is missing" >&2; exit 1; }
done
W=$(mktemp -d /tmp/tollgate-script-cost-XXXXXX)
REDIS_PID=""
cleanup() { if [[ -n $REDIS_PID ]]; then kill -TERM "$REDIS_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

source bench/script_calls.sh
MINIMAL_LUA=$(cat bench/minimal_bucket.lua)  # the reference token bucket (read from the repository root)

# CASE N: prints the Ir of one redis-server run that served N calls of CASE.
run() {
  local case=$1 n=$2 port out=$W/$1.$2.callgrind sha="" cmd=()
  port=$(free_port)
  valgrind --tool=callgrind -q --toggle-collect=serverCron --collect-atstart=yes --callgrind-out-file="$out" \
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$W" >"$W/redis.log" 2>&1 &
  REDIS_PID=$!
  for _ in $(seq 1 600); do
    [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && break
    sleep 0.1
  done
  case $case in
    RS|RA) sha=$(redis-cli -p "$port" SCRIPT LOAD "$("$SIM" --redis-script)") ;;
    RL|RF) sha=$(redis-cli -p "$port" SCRIPT LOAD "$("$SIM" --redis-lean-script)") ;;
    RM) sha=$(redis-cli -p "$port" SCRIPT LOAD "$MINIMAL_LUA") ;;
  esac
  script_call "$case" "$sha"
  cmd=("${CALL[@]}")
  # One call by hand first: it must succeed (and grant), or the count means nothing.
  local check
  check=$(redis-cli -p "$port" "${cmd[@]}" 2>&1 | head -1)
  [[ $check != *ERR* && $check != *rror* && $check != 0 ]] || { echo "$case: ${cmd[*]} answered $check" >&2; exit 1; }
  redis-benchmark -h 127.0.0.1 -p "$port" -c 1 -n "$((n - 1))" -q "${cmd[@]}" >"$W/$case.$n.bench" 2>&1
  if grep -qi error "$W/$case.$n.bench"; then cat "$W/$case.$n.bench" >&2; exit 1; fi
  kill -TERM "$REDIS_PID"
  wait "$REDIS_PID" || true
  REDIS_PID=""
  sed -n 's/^summary: //p' "$out"
}

echo "Redis per call, Ir (callgrind, serverCron excluded), N=$N_LO and N=$N_HI, redis-benchmark -c 1;" \
  "$(redis-server --version | awk '{print $3}'), $(valgrind --version)"
for c in $CASES; do
  lo=$(run "$c" "$N_LO")
  hi=$(run "$c" "$N_HI")
  echo "$c $(( (hi - lo) / (N_HI - N_LO) ))   (Ir $lo at N=$N_LO, $hi at N=$N_HI)"
done
if [[ -n ${KEEP:-} ]]; then echo "callgrind files in $W"; else rm -rf "$W"; fi
