#!/usr/bin/env bash
# Installs what is missing, builds from scratch in build-test/, and runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
rm -rf build-test
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=ON >/dev/null
cmake --build build-test -j"$(nproc)"
cd build-test
ctest --output-on-failure -j2 --timeout 300
