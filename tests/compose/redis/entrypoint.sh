#!/bin/bash
# The official redis image's entrypoint behaviour, on Debian's redis-server (tests only):
# "-flag" or "x.conf" as the first argument means redis-server; the server runs as the redis user;
# protected mode is off unless the configuration asks for it (the official image builds Redis with
# that default, since the container's network, not Redis, decides who can connect).
set -euo pipefail
if [[ "${1:-}" == -* || "${1:-}" == *.conf ]]; then set -- redis-server "$@"; fi
if [[ "${1:-}" == redis-server ]]; then
  asks=0
  for a in "$@"; do [[ "$a" == --protected-mode ]] && asks=1; done
  if [[ "${2:-}" == *.conf && -r "$2" ]] && grep -Eqi '^[[:space:]]*protected-mode' "$2"; then asks=1; fi
  ((asks)) || set -- "$@" --protected-mode no
  if [[ $(id -u) == 0 ]]; then
    find . \! -user redis -exec chown redis '{}' +
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
  fi
fi
exec "$@"
