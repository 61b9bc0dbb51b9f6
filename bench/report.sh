#!/usr/bin/env bash
# Every figure the docs state as current, measured again at one commit, and the current-figures
# table written from them: the block between the report markers in docs/BENCHMARKS.md, the figures
# other docs quote (<!-- fig:ID -->...<!-- /fig --> spans), and docs/figures.json, which
# tests/docs/check_figures.py holds the docs to. Deterministic figures (instructions counted by
# callgrind) are measured in full; wall-clock ones in a short interleaved run. About 35 minutes
# on a 2-core machine, which must be otherwise idle for the wall-clock figures to mean anything.
#
#   bench/report.sh                  # build build-report/ at HEAD, measure, write the docs
#   APPLY=0 bench/report.sh          # measure and write bench/results/report-<time>/ only
#   ALLOW_DIRTY=1 bench/report.sh    # measure a work tree that differs from HEAD (marked as such)
#   REPORT_DIR=bench/results/report-<time> STEPS=none bench/report.sh   # write the docs again
#                                    # from an earlier run's results, measuring nothing
#   REPORT_DIR=bench/results/report-<time> STEPS=wall bench/report.sh   # measure that step again
#                                    # (e.g. on a quieter machine), at the same commit
#
# Steps (each one's raw output in bench/results/report-<time>/):
#   instructions   bench/instructions.sh, every case (plain, Redis, cluster, TLS), then T0 T1 N1
#                  twice more: the spread between runs
#   script-cost    bench/redis_script_cost.sh RA RF (the other script cases come with R0)
#   micro          tollgate-micro-bench: decisions, suffix lookup, the console's answers at 20,000 rules
#                  (medians of 3), memory
#   buckets        bench/idle_buckets.sh: 100,000 keyed buckets, 100,000 rules
#   hold           bench/hold.sh three times (ANSWERS=0), once with 1.5 KiB longer heads
#   tls-resumption bench/tls_resumption.sh at 1 to 64 clients
#   warm-pools     bench/warm_pools.sh
#   adaptive       bench/adaptive.sh (the end-to-end runs, docs/adaptive.svg)
#   wall           bench/run.sh, the plain, Redis, binding and TLS cases, 3 rounds of 5 s, with
#                  the Redis ceiling and the TLS handshake rates
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
APPLY=${APPLY:-1}

STEPS=${STEPS:-"instructions script-cost micro buckets hold tls-resumption warm-pools adaptive wall"}
COMMIT=$(git rev-parse --short HEAD)
if [[ -n ${REPORT_DIR:-} ]]; then
  OUT=$(cd "$REPORT_DIR" && pwd)
  measured=$(sed -n 's/^commit=//p' "$OUT/machine.txt")
  if [[ $STEPS != none && $measured != "$COMMIT" ]]; then
    echo "report: $OUT measured $measured, HEAD is $COMMIT: one report is one commit" >&2
    exit 1
  fi
else
  OUT=$ROOT/bench/results/report-$(date -u +%Y%m%dT%H%M%SZ)
  mkdir -p "$OUT"
fi
if [[ $STEPS != none ]]; then
  DIRTY=$(git status --porcelain -- src include CMakeLists.txt cmake bench tests/support tests/integration/adaptive_e2e_test.cpp \
    2>/dev/null | awk '{print $2}' | grep -v '^bench/results' | tr '\n' ' ' || true)
  if [[ -n $DIRTY && ${ALLOW_DIRTY:-0} != 1 ]]; then
    echo "report: the work tree differs from HEAD ($DIRTY); commit first, or ALLOW_DIRTY=1" >&2
    exit 1
  fi
  STAMP=$(date -u +%Y%m%dT%H%M%SZ)
  scripts/deps.sh build >/dev/null
  B=$ROOT/build-report
  echo "report: building $B"
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=ON -DTOLLGATE_BUILD_BENCH=ON >"$OUT/build.log"
  cmake --build "$B" -j"$(nproc)" --target tollgate tollgate-sim tollgate-micro-bench tollgate-mock-upstream redis_tests \
    >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" >&2; exit 1; }
  if [[ ! -f $OUT/machine.txt ]]; then
    {
      echo "commit=$COMMIT"
      echo "dirty=$DIRTY"
      echo "started=$(date -u '+%Y-%m-%d %H:%M UTC')"
      echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
      echo "cores=$(nproc)"
      echo "memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
      echo "os=$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
      echo "compiler=$(c++ --version | head -1)"
    } >"$OUT/machine.txt"
  fi
  # Each step's start time and the load average then, for the table.
  step() { [[ " $STEPS " == *" $1 "* ]] || return 1; echo "report: $1 ($(date -u +%H:%M:%S))"
           echo "$1 $(date -u '+%Y-%m-%d %H:%M') $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/steps.txt"; }

  if step instructions; then
    STAMP=$STAMP-main TOLLGATE_BIN=$B/tollgate \
      CASES="N0 N1 T0 T1 T1R T1P T1M T1A T1H T1I T2 T2C1 T2B R0 R1 K T1s N1s N1s3 T1sN N1sN N1sN3" bench/instructions.sh >"$OUT/instructions.log" 2>&1
    cp "bench/results/instructions-$STAMP-main.json" "$OUT/instructions.json"
    for r in 2 3; do
      STAMP=$STAMP-repeat$r TOLLGATE_BIN=$B/tollgate CASES="T0 T1 N1" PROFILES="" bench/instructions.sh \
        >"$OUT/instructions-repeat$r.log" 2>&1
      cp "bench/results/instructions-$STAMP-repeat$r.json" "$OUT/instructions-repeat$r.json"
    done
  fi
  if step script-cost; then
    CASES="RA RF" bench/redis_script_cost.sh "$B/tollgate-sim" >"$OUT/script-cost.txt" 2>&1
  fi
  if step micro; then
    taskset -c 1 "$B/tollgate-micro-bench" --benchmark_filter='^BM_(TryAcquire|LocalStore|Suffix|Admin)' \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json >"$OUT/micro.json" 2>"$OUT/micro.log"
    # Memory: one fresh process each, so that none reuses another's freed pages.
    for f in IdleBucketsMemory ClientKeysMemory/10000/ ClientKeysMemory/100000/; do
      taskset -c 1 "$B/tollgate-micro-bench" --benchmark_filter="^BM_$f" --benchmark_format=json \
        >"$OUT/micro-$(echo "$f" | tr -d /).json" 2>>"$OUT/micro.log"
    done
  fi
  if step buckets; then
    TOLLGATE_BIN=$B/tollgate bench/idle_buckets.sh >"$OUT/buckets.json" 2>"$OUT/buckets.log"
  fi
  if step hold; then
    for r in 1 2 3; do
      TOLLGATE_BIN=$B/tollgate ANSWERS=0 OUT="$OUT/hold-$r.json" bench/hold.sh >"$OUT/hold-$r.log" 2>&1
    done
    TOLLGATE_BIN=$B/tollgate ANSWERS=0 PAD=1500 OUT="$OUT/hold-pad.json" bench/hold.sh >"$OUT/hold-pad.log" 2>&1
  fi
  if step tls-resumption; then
    TOLLGATE_BIN=$B/tollgate CONCS="1 8 16 32 64" bench/tls_resumption.sh >"$OUT/tls-resumption.txt" 2>&1
  fi
  if step warm-pools; then
    TOLLGATE_BIN=$B/tollgate bench/warm_pools.sh >"$OUT/warm-pools.txt" 2>&1
  fi
  if step adaptive; then
    BUILD=$B bench/adaptive.sh >"$OUT/adaptive.txt" 2>&1
    rm -rf "$OUT/adaptive"
    cp -r "$(ls -d bench/results/adaptive-* | tail -1)" "$OUT/adaptive"
    cp docs/adaptive.svg "$OUT/adaptive.svg"  # the plot of this run, for the docs
  fi
  if step wall; then
    BENCH_BUILD=$B ROUNDS=3 DURATION=5 REDIS_CEILING=1 \
      ONLY="N0 N1 T0 T1 T2 N2 T3 N1s N1s3 T1s N1sN N1sN3 T1sN HS" bench/run.sh >"$OUT/wall.log" 2>&1
    rm -rf "$OUT/wall"
    cp -r "$(readlink -f bench/results/latest)" "$OUT/wall"
  fi
  sed -i '/^finished=/d' "$OUT/machine.txt"
  echo "finished=$(date -u '+%Y-%m-%d %H:%M UTC')" >>"$OUT/machine.txt"
fi

python3 bench/report.py "$OUT" $([[ $APPLY == 1 ]] && echo --apply "$ROOT")
echo "report: $OUT/report.md"
