#!/usr/bin/env bash
# Installs the Debian packages Tollgate needs, only those missing.
# Usage: scripts/deps.sh build|test|compose   (compose: the Docker engine, Compose v1 and debootstrap)
set -euo pipefail
want=(cmake g++ make pkg-config libboost-dev libssl-dev nlohmann-json3-dev libmysqlcppconn-dev libhiredis-dev libc-ares-dev libjemalloc-dev libspdlog-dev prometheus-cpp-dev curl)
if [[ "${1:-build}" == "compose" ]]; then
  want=(docker.io docker-compose debootstrap python3 curl)
elif [[ "${1:-build}" == "test" ]]; then
  want+=(googletest libgtest-dev mariadb-server mariadb-client redis-server redis-tools python3 clang libclang-rt-14-dev
        chromium chromium-driver python3-selenium
        nginx-light openssl  # TLS tests: nginx as an HTTPS upstream, a private CA made by tests/support/tls_pki.sh
        dnsmasq-base         # a DNS server whose answers the upstream-name tests change (tests/support/dns.hpp)
        universal-ctags)     # tests/function_length_check.py measures the functions of src/
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
