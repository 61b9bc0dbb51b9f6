#!/usr/bin/env bash
# Installs what is missing, builds from scratch in build-test/, starts the servers the integration
# tests use (a private MariaDB and a private Redis, on free loopback ports, in a temporary folder),
# runs every test through ctest, and stops the servers again.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/deps.sh test

rm -rf build-test
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=ON >/dev/null
cmake --build build-test -j"$(nproc)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers=$(mktemp -d /tmp/tollgate-servers-XXXXXX)
cleanup() {
  "$root/scripts/mysql-server.sh" stop "$servers/mysql" || true
  "$root/scripts/redis-server.sh" stop "$servers/redis" || true
  rm -rf "$servers"
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

cd build-test
ctest --output-on-failure -j2 --timeout 300
