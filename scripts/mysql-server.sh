#!/usr/bin/env bash
# A private MariaDB for tests, in a folder of its own, on a loopback port. Not a system service.
#   scripts/mysql-server.sh start DIR PORT   initialise DIR if new, start, wait until it answers,
#                                            create user tg@127.0.0.1 (password tgpass)
#   scripts/mysql-server.sh stop DIR         stop the server started in DIR (and wait for it)
#   scripts/mysql-server.sh sql DIR [DB]     run SQL from stdin as root over DIR's socket
set -euo pipefail
cmd=${1:?start|stop|sql}
dir=${2:?DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock="$dir/sock"
case "$cmd" in
  start)
    port=${3:?PORT}
    if [[ ! -d "$dir/data/mysql" ]]; then
      mariadb-install-db --user=root --datadir="$dir/data" --auth-root-authentication-method=normal \
        --skip-test-db >"$dir/install.log" 2>&1 || { cat "$dir/install.log" >&2; exit 1; }
    fi
    mariadbd --user=root --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 --socket="$sock" \
      --pid-file="$dir/pid" --skip-name-resolve --innodb-buffer-pool-size=32M --innodb-log-file-size=8M \
      --max-connections=200 >>"$dir/server.log" 2>&1 &
    for _ in $(seq 1 300); do
      if mariadb -S "$sock" -uroot -e 'select 1' >/dev/null 2>&1; then
        mariadb -S "$sock" -uroot -e "CREATE USER IF NOT EXISTS 'tg'@'127.0.0.1' IDENTIFIED BY 'tgpass';
          GRANT ALL ON *.* TO 'tg'@'127.0.0.1'; FLUSH PRIVILEGES;"
        exit 0
      fi
      sleep 0.1
    done
    echo "mysql-server: no answer after 30 s; log:" >&2
    tail -20 "$dir/server.log" >&2
    exit 1
    ;;
  stop)
    [[ -f "$dir/pid" ]] || exit 0
    pid=$(cat "$dir/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || { rm -f "$dir/pid"; exit 0; }
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/pid"
    ;;
  sql)
    exec mariadb -S "$sock" -uroot ${3:+"$3"}
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR | sql DIR [DB]" >&2
    exit 2
    ;;
esac
