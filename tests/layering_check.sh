#!/usr/bin/env bash
# Fails when a source or header includes a header of an area its own area does not depend on
# (docs/design.md's layout; the CMake libraries link in the same order):
#   limiter <- config, store <- proxy <- admin <- app
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [limiter]="limiter"
  [config]="config limiter"
  [store]="store limiter"
  [proxy]="proxy config store limiter"
  [admin]="admin proxy config store limiter"
  [app]="app admin proxy config store limiter"
)
bad=0
for area in "${!allowed[@]}"; do
  for f in $(find "src/$area" "include/tollgate/$area" -name '*.cpp' -o -name '*.hpp' 2>/dev/null); do
    while IFS= read -r used; do
      [[ " ${allowed[$area]} " == *" $used "* ]] && continue
      echo "$f: area '$area' includes tollgate/$used/ (allowed: ${allowed[$area]})"
      bad=1
    done < <(grep -o '#include "tollgate/[a-z_]*/' "$f" | sed 's|#include "tollgate/||; s|/$||' | sort -u)
  done
done
# The request logic of the proxy stays free of Beast and of Asio's I/O (unit-testable, fuzzable;
# parsing an IP address with Asio is fine).
for f in src/proxy/{throttle,request_target,client_key,request_policy,metrics,access_log}.cpp \
         include/tollgate/proxy/{throttle,request_target,client_key,request_policy,metrics,access_log}.hpp; do
  if grep -Eq '#include <boost/(beast|asio\.hpp|asio/(awaitable|co_spawn|io_context|steady_timer))' "$f"; then
    echo "$f: request logic includes Beast or Asio's I/O"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "layering: ok"
exit "$bad"
