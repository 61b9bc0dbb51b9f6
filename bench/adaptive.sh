#!/usr/bin/env bash
# The adaptive rate's figures: a 50/s rule in front of a supplier that allows 20/s, then 35/s, then 50/s
# (12-14 s each), 60 requests a second offered. Runs the end-to-end tests of
# tests/integration/adaptive_e2e_test.cpp (one gateway with adaptive, the same traffic without it,
# shadow, a fleet of three on one Redis; then the supplier kinds: fixed one-second windows or a
# token bucket, refusing with Retry-After, with RateLimit fields or with nothing, with 429 or 503,
# in front of one gateway or three on Redis, while its allowance drops from 20 to 12/s and rises to
# 30/s, 12 s each, and again with the rise just after a refusal, about the latest a rise is found
# (a test the suite runs only here); and one caller's own 429s, which must change nothing) with
# TOLLGATE_ADAPTIVE_OUT set, so that each run leaves its per-second series; then prints the
# per-phase figures of every run and draws docs/adaptive.svg and docs/adaptive-<run>.svg for each
# supplier kind.
#   bench/adaptive.sh                        # build/ must hold a build with tests (redis_tests)
#   BUILD=/path/to/build bench/adaptive.sh
# With MATRIX set, it runs the matrix of suppliers that advertise nothing instead (Cells/Matrix:
# fixed windows of 1 s and 10 s starting 0, 100, ..., 900 ms into the second, each refusing
# signal, one gateway and three on Redis; a token bucket's two kinds), the cells whose names
# match MATRIX (gtest patterns, ':' between them: '*' for all 124, about 2 h 40 min; '*_w1s_*_one'
# for the one-gateway cells of one-second windows), and writes matrix.md, a row per cell, beside
# the series:
#   MATRIX='*_w1s_o*00_one' bench/adaptive.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=$ROOT/bench/results/adaptive-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/redis-server.sh start "$OUT/redis" "$PORT" >/dev/null
trap 'scripts/redis-server.sh stop "$OUT/redis" >/dev/null 2>&1 || true' EXIT
if [[ -n ${MATRIX:-} ]]; then
  TOLLGATE_ADAPTIVE_OUT=$OUT TOLLGATE_TEST_REDIS_PORT=$PORT TOLLGATE_TEST_REDIS_DIR=$OUT/redis \
    "$BUILD/tests/redis_tests" --gtest_filter="Cells/Matrix.*/${MATRIX//:/:Cells/Matrix.*/}" --gtest_also_run_disabled_tests 2>&1 |
    tee "$OUT/tests.log" | grep -E '^\[(  FAILED|       OK)|by its windows|allowance' || true
  python3 bench/adaptive_matrix.py "$OUT/tests.log" | tee "$OUT/matrix.md"
  echo "series in $OUT; the table in $OUT/matrix.md"
  exit 0
fi
TOLLGATE_ADAPTIVE_OUT=$OUT TOLLGATE_TEST_REDIS_PORT=$PORT TOLLGATE_TEST_REDIS_DIR=$OUT/redis \
  "$BUILD/tests/redis_tests" --gtest_filter='Adaptive*:Suppliers*:Topologies*' --gtest_also_run_disabled_tests 2>&1 | tee "$OUT/tests.log" | grep -E '^\[|allowance' || true
python3 bench/plot_adaptive.py "$OUT" docs/adaptive.svg | tee "$OUT/summary.txt"
echo "series in $OUT; plots in docs/adaptive.svg and docs/adaptive-*.svg"
