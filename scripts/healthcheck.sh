#!/bin/bash
# The container's health probe: exits 0 when GET <path> on <host:port> answers 200 within the
# timeout, 1 otherwise. Plain bash (/dev/tcp), so the runtime image needs no HTTP client.
# Usage: tollgate-healthcheck [host:port] [path]   (default 127.0.0.1:9901 /readyz, the admin listener)
addr=${1:-127.0.0.1:9901}
path=${2:-/readyz}
host=${addr%:*}
port=${addr##*:}
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$addr" >&3
IFS=$' \r' read -r -t "${TOLLGATE_HEALTH_TIMEOUT_S:-2}" version status _ <&3 || exit 1
[[ $version == HTTP/1.* && $status == 200 ]]
