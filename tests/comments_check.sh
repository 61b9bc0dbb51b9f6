#!/usr/bin/env bash
# Comments explain the code, not the project's history: no issue numbers ("issue 17") and no
# references to design notes outside the repository (DESIGN.md, ../shared/) in the sources,
# tests, scripts and build files. A long story belongs in docs/, linked by its section.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnIE '([Ii]ssue #?[0-9]+|DESIGN\.md|\.\./shared/)' \
         src include tools tests scripts bench cmake CMakeLists.txt Dockerfile docker-compose.yml conf sql .ci \
         --exclude-dir=results --exclude=comments_check.sh || true)
if [[ -n "$hits" ]]; then
  echo "comments that point at the project's history or outside the repository:"
  echo "$hits"
  exit 1
fi
echo "comments: no issue numbers, nothing outside the repository"
