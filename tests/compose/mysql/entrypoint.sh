#!/bin/bash
# The official mysql image's entrypoint behaviour, on Debian's MariaDB (tests only). At the first
# start (an empty data directory): MYSQL_ROOT_PASSWORD, MYSQL_ALLOW_EMPTY_PASSWORD or
# MYSQL_RANDOM_ROOT_PASSWORD is required; MYSQL_DATABASE, MYSQL_USER and MYSQL_PASSWORD create a
# database and a user with every privilege on it; /docker-entrypoint-initdb.d/*.sh, *.sql and *.sql.gz
# run in name order, against a server that does not listen on TCP, so a TCP health check only
# passes once they are done. "-flag" as the first argument means mysqld.
set -euo pipefail
log() { echo "standin-mysql: $*"; }
if [[ "${1:-}" == -* ]]; then set -- mysqld "$@"; fi
if [[ "${1:-}" != mysqld ]]; then exec "$@"; fi

# MySQL 8's --default-authentication-plugin has no MariaDB equivalent to pass on: MariaDB creates
# its users with mysql_native_password already, which is what the option asks for here.
args=()
for a in "$@"; do
  case "$a" in
    --default-authentication-plugin=*|--default_authentication_plugin=*)
      [[ "$a" == *=mysql_native_password ]] || { log "only mysql_native_password can be stood in for: $a"; exit 1; }
      log "ignoring $a (MariaDB's users are mysql_native_password already)" ;;
    *) args+=("$a") ;;
  esac
done
set -- "${args[@]}"

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock
chown -R mysql:mysql "$datadir" /run/mysqld

sql_escape() { printf '%s' "$1" | sed "s/\\\\/\\\\\\\\/g; s/'/\\\\'/g"; }

if [[ ! -d "$datadir/mysql" ]]; then
  if [[ -z "${MYSQL_ROOT_PASSWORD:-}" && -z "${MYSQL_ALLOW_EMPTY_PASSWORD:-}" && -z "${MYSQL_RANDOM_ROOT_PASSWORD:-}" ]]; then
    log "error: database is uninitialized and password option is not specified"
    log "  You need to specify one of MYSQL_ROOT_PASSWORD, MYSQL_ALLOW_EMPTY_PASSWORD and MYSQL_RANDOM_ROOT_PASSWORD"
    exit 1
  fi
  if [[ -n "${MYSQL_USER:-}" && "${MYSQL_USER}" == root ]]; then
    log "error: MYSQL_USER=root; use MYSQL_ROOT_PASSWORD for root"; exit 1
  fi
  if [[ -n "${MYSQL_USER:-}" && -z "${MYSQL_PASSWORD:-}" ]] || [[ -z "${MYSQL_USER:-}" && -n "${MYSQL_PASSWORD:-}" ]]; then
    log "error: MYSQL_USER and MYSQL_PASSWORD go together"; exit 1
  fi
  log "initializing $datadir"
  mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=normal \
    --skip-test-db >/dev/null
  "$@" --user=mysql --skip-networking --socket="$socket" &
  pid=$!
  for i in $(seq 1 60); do
    mysqladmin --socket="$socket" -uroot ping --silent 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { log "error: the first-start server exited"; exit 1; }
    ((i < 60)) || { log "error: the first-start server did not answer within 30 s"; kill "$pid"; exit 1; }
    sleep 0.5
  done
  client=(mysql --protocol=socket --socket="$socket" -uroot)
  root_pw=${MYSQL_ROOT_PASSWORD:-}
  if [[ -n "${MYSQL_RANDOM_ROOT_PASSWORD:-}" ]]; then
    root_pw=$(head -c 18 /dev/urandom | base64)
    log "GENERATED ROOT PASSWORD: $root_pw"
  fi
  {
    echo "DELETE FROM mysql.user WHERE user = '';"
    echo "CREATE USER 'root'@'%' IDENTIFIED BY '$(sql_escape "$root_pw")';"
    echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY '$(sql_escape "$root_pw")';"
    if [[ -n "${MYSQL_DATABASE:-}" ]]; then
      echo "CREATE DATABASE IF NOT EXISTS \`${MYSQL_DATABASE}\`;"
    fi
    if [[ -n "${MYSQL_USER:-}" && -n "${MYSQL_PASSWORD:-}" ]]; then
      echo "CREATE USER '$(sql_escape "$MYSQL_USER")'@'%' IDENTIFIED BY '$(sql_escape "$MYSQL_PASSWORD")';"
      [[ -n "${MYSQL_DATABASE:-}" ]] && echo "GRANT ALL ON \`${MYSQL_DATABASE}\`.* TO '$(sql_escape "$MYSQL_USER")'@'%';"
    fi
    echo "FLUSH PRIVILEGES;"
  } | "${client[@]}"
  client+=(--password="$root_pw")
  [[ -n "${MYSQL_DATABASE:-}" ]] && client+=("$MYSQL_DATABASE")
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) log "running $f"; if [[ -x "$f" ]]; then "$f"; else . "$f"; fi ;;
      *.sql) log "running $f"; "${client[@]}" < "$f" ;;
      *.sql.gz) log "running $f"; gunzip -c "$f" | "${client[@]}" ;;
      *) [[ -e "$f" ]] && log "ignoring $f" ;;
    esac
  done
  mysqladmin --socket="$socket" -uroot --password="$root_pw" shutdown
  wait "$pid" || true
  log "initialized; starting the server"
fi
exec "$@" --user=mysql
