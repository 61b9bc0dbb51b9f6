#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): installs what is missing, builds from scratch in
# build-test/, starts the servers the integration tests use (a private MariaDB and a private Redis,
# on free loopback ports, in a temporary folder), runs every test through ctest, stops the servers;
# then the sanitizer, fuzzing and compose (Docker image and fleet, tests/compose/run.sh) stages.
# Ends with one line per stage: passed and its time, or skipped and why (docs/testing.md). Under CI
# nothing may skip: a skipped test or a compose stage that cannot run fails the run.
#
#   scripts/test.sh           everything (CI)
#   scripts/test.sh --quick   the contributors' loop: an incremental build in build-test/, the unit
#                             and end-to-end tests (MariaDB and Redis included), without the browser,
#                             Redis Cluster, sanitizer, fuzzing and compose stages
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

# Each stage's outcome and time, printed at the end (and where a stage failed, what ran before).
summary=()
skips=0
stage_started=0
stage_name=""
stage_skipped=""  # what the stage skipped (tests, or the whole stage), and why
begin() { stage_name=$1; stage_started=$SECONDS; stage_skipped=""; echo "test: $1"; }
passed() {
  if [[ -n "$stage_skipped" ]]; then
    summary+=("$(printf '%-34s SKIPPED %4d s: %s' "$stage_name" $((SECONDS - stage_started)) "$stage_skipped")")
    skips=$((skips + 1))
  else
    summary+=("$(printf '%-34s passed  %4d s' "$stage_name" $((SECONDS - stage_started)))")
  fi
}
print_summary() {
  echo "test: stages"
  for line in "${summary[@]}"; do echo "test:   $line"; done
}
# Nothing may skip under CI (or with TOLLGATE_REQUIRE_ALL=1): every package is installed above and
# every server is started here, so a skip means a test did not test.
require_all=0
[[ -n "${CI:-}" || "${TOLLGATE_REQUIRE_ALL:-}" == 1 ]] && require_all=1
export TOLLGATE_REQUIRE_BROWSER=1
((require_all)) && export TOLLGATE_REQUIRE_COMPOSE=1
# ctest in build-test/ or build-asan/ (first argument) with the other arguments; the tests it
# reports as skipped ("did not run", a GTEST_SKIP or exit code 77) fail the stage under
# require_all and are named in the summary otherwise.
run_ctest() {
  local dir=$1
  shift
  local log
  log=$(mktemp /tmp/tollgate-ctest-XXXXXX)
  (cd "$dir" && ctest "$@") 2>&1 | tee "$log"
  local skipped
  skipped=$(sed -n '/The following tests did not run:/,/^$/p' "$log" | { grep -E '\((Skipped|Not Run)\)' || true; } |
    sed -E 's/^[[:space:]]*[0-9]+ - //; s/ \((Skipped|Not Run)\)$//' | tr '\n' ' ' | sed 's/ $//')
  rm -f "$log"
  [[ -z "$skipped" ]] && return 0
  if ((require_all)); then
    echo "test: FAIL: tests skipped where nothing may skip (CI): $skipped"
    return 1
  fi
  stage_skipped="tests skipped: $skipped"
}

begin "dependencies (scripts/deps.sh test)"
scripts/deps.sh test
passed

begin "build (build-test, Release)"
((quick)) || rm -rf build-test
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=ON >/dev/null
cmake --build build-test -j"$(nproc)"
passed

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers=$(mktemp -d /tmp/tollgate-servers-XXXXXX)
cleanup() {
  local rc=$?
  "$root/scripts/mysql-server.sh" stop "$servers/mysql" || true
  "$root/scripts/redis-server.sh" stop "$servers/redis" || true
  rm -rf "$servers"
  if ((rc != 0)); then
    summary+=("$(printf '%-34s FAILED  %4d s' "$stage_name" $((SECONDS - stage_started)))")
    print_summary
  fi
}
trap cleanup EXIT

export TOLLGATE_TEST_MYSQL_DIR="$servers/mysql"
export TOLLGATE_TEST_MYSQL_PORT=$(free_port)
scripts/mysql-server.sh start "$TOLLGATE_TEST_MYSQL_DIR" "$TOLLGATE_TEST_MYSQL_PORT"
echo "test: MariaDB on 127.0.0.1:$TOLLGATE_TEST_MYSQL_PORT ($TOLLGATE_TEST_MYSQL_DIR)"
export TOLLGATE_TEST_REDIS_DIR="$servers/redis"
export TOLLGATE_TEST_REDIS_PORT=$(free_port)
scripts/redis-server.sh start "$TOLLGATE_TEST_REDIS_DIR" "$TOLLGATE_TEST_REDIS_PORT"
echo "test: Redis on 127.0.0.1:$TOLLGATE_TEST_REDIS_PORT ($TOLLGATE_TEST_REDIS_DIR)"

if ((quick)); then
  begin "ctest (unit, end-to-end, MySQL, Redis)"
  run_ctest build-test --output-on-failure -j2 --timeout 300 -LE 'cluster|browser'
  passed
  print_summary
  echo "test: quick loop passed (not run: browser, Redis Cluster, sanitizers, fuzzing, compose)"
  exit 0
fi

# The browser test must run here, not skip: its packages were installed above.
begin "ctest (every test, browser included)"
run_ctest build-test --output-on-failure -j2 --timeout 300
passed

# Sanitizers: the unit and end-to-end tests again, built with ASan + UBSan (g++; no jemalloc, which
# would hide allocations from ASan). Leak checking stays on for the unit tests; the gateway
# processes exit with coroutines still suspended on purpose (SIGTERM), so not for them.
# -Wno-mismatched-new-delete: with the sanitizers' inlining g++ 12 sees Asio's coroutine frames,
# taken from its per-thread recycling cache (::operator new) and given back through the frame's own
# operator delete (which returns them to that cache), as a mismatch; it is not one, and the Release
# build, which does not inline that far, has no such warning.
# -O1 -g1 (line tables only): what ASan's authors advise, and enough for a report's stack trace with
# file and line; it builds in half the time of -O2 -g (a heavy file measured 28 -> 13 s, a test
# file 34 -> 16 s).
begin "ASan + UBSan build"
rm -rf build-asan
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DTOLLGATE_JEMALLOC=OFF -DTOLLGATE_SERVER_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Wno-maybe-uninitialized -Wno-mismatched-new-delete" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j"$(nproc)" --target unit_tests e2e_tests redis_cluster_tests tollgate tollgate-mock-upstream tollgate-sim \
  tollgate-hostile-upstream
passed
begin "ASan + UBSan tests"
(cd build-asan && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./tests/unit_tests --gtest_brief=1)
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan --output-on-failure -j2 --timeout 300 -LE 'cluster|browser'
passed
# The Redis Cluster and Sentinel tests (their own servers), alone: slot moves, failovers and
# re-routing under the sanitizers, with the machine's two cores to themselves.
begin "ASan + UBSan: Redis Cluster, Sentinel"
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan --output-on-failure --timeout 300 -L cluster
passed

# Fuzzing: a short run of each libFuzzer target on its seeded corpus (clang; longer runs: docs/testing.md).
begin "fuzzing"
rm -rf build-fuzz
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DTOLLGATE_FUZZ=ON -DTOLLGATE_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_config fuzz_request fuzz_rules fuzz_http1
for target in config request rules http1; do
  work="$servers/fuzz-$target"
  mkdir -p "$work"
  build-fuzz/fuzz_$target -max_total_time="${FUZZ_SECONDS:-20}" -max_len=4096 -artifact_prefix="$work/" \
    "$work" tests/fuzz/corpus/$target 2>"$work.log" || { tail -40 "$work.log"; exit 1; }
  tail -1 "$work.log"
done
passed
# The image and the compose fleet, as users run them (a private Docker engine). Where none can run
# it exits 77 saying why: a skip here, a failure under require_all (TOLLGATE_REQUIRE_COMPOSE=1).
begin "compose (image and fleet)"
compose_log=$(mktemp /tmp/tollgate-compose-log-XXXXXX)
set +e
tests/compose/run.sh 2>&1 | tee "$compose_log"
compose_rc=${PIPESTATUS[0]}
set -e
if ((compose_rc == 77)); then
  stage_skipped=$(grep -o 'SKIPPED: .*' "$compose_log" | tail -1 | sed 's/^SKIPPED: //')
  stage_skipped=${stage_skipped:-the compose stage cannot run here}
fi
rm -f "$compose_log"
((compose_rc == 0 || compose_rc == 77)) || exit "$compose_rc"
passed
print_summary
if ((skips)); then
  echo "test: every stage that ran passed; $skips skipped (see above)"
else
  echo "test: all stages passed"
fi
