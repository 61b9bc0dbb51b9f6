# Sourced by bench/instructions.sh and bench/redis_script_cost.sh: the script calls both of them
# measure, written once. Each had its own copy, and when the general script took more arguments
# only one was changed, so RS measured a bucket read from the wrong arguments (docs/history).
#
# script_call CASE SHA: sets the array CALL to the command for redis-cli and redis-benchmark.
script_call() {
  local sha=$2
  case $1 in
    # permits 1, timeout 0.5 s, pay now, Redis TIME, one bucket, no parent, no quota, no maxShare,
    # not adaptive, the channel's cost 1 (none here), no reserved shares, no meter, then its shape:
    # 1 µs interval, 1e12 permits (never empties), cool-down 1 µs, not warm.
    RS) CALL=(EVALSHA "$sha" 1 "tollgate:{bench}" 1 500000 0 "" 1 0 0 0 0 1 0 0 0 1 1000000000000 1 0 0 0 0) ;;
    # The same bucket, adaptive (on): its hash as the second key; after its shape its rate (1e6/s) and
    # burst, the caller (1), nothing admitted since the last decision, not asked again, no advertised
    # allowance (five empty arguments) and no learned window pair (0 0), as RedisStore sends them.
    RA) CALL=(EVALSHA "$sha" 2 "tollgate:{bench}" "tollgate:{bench}r:bench" 1 500000 0 "" 1 0 0 0 1 1 0 0 0
              1 1000000000000 1 0 0 0 0 1000000 1000000000000 1 0 0 0 "" "" "" "" "" 0 0) ;;
    # The lean script, as the store sends a decision alone for that bucket: Redis TIME, pay now,
    # interval 1 µs, 1e12 permits, then permits 1 and timeout 0.5 s.
    RL) CALL=(EVALSHA "$sha" 1 "tollgate:{bench}" "" 0 1 1000000000000 1 500000) ;;
    RF) CALL=(EVALSHA "$sha" 1 "tollgate:{bench}" "" 0 1 1000000000000.5 1 500000) ;;
    # The reference token bucket (bench/minimal_bucket.lua): rate and size.
    RM) CALL=(EVALSHA "$sha" 1 "bench:{bucket}" 1000000 1000000) ;;
    RP) CALL=(PING) ;;
    *) echo "script_call: unknown case $1" >&2; return 1 ;;
  esac
}
