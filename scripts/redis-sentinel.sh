#!/usr/bin/env bash
# A private Redis Sentinel set-up for tests: a primary, one replica and three sentinels on loopback
# ports, each in a folder of its own under DIR. Not a system service. The sentinels are
# `redis-server CONF --sentinel` (the redis-sentinel package is not needed) with a quick failover:
# down after 1 s, quorum 2.
#   scripts/redis-sentinel.sh start DIR NAME PRIMARY_PORT REPLICA_PORT S1 S2 S3
#                                start them and wait until the replica has synced and every sentinel
#                                reports the primary and knows the replica and the other sentinels
#                                (at most ~20 s)
#   scripts/redis-sentinel.sh stop DIR        stop everything started in DIR (SIGTERM, then SIGKILL)
#   scripts/redis-sentinel.sh kill DIR PORT   kill one server or sentinel hard (SIGKILL), as in a crash
set -euo pipefail
cmd=${1:?start|stop|kill}
dir=${2:?DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

source "$(dirname "${BASH_SOURCE[0]}")/redis-procs.sh"  # now_ms, cli, alive, stop_pidfile, stop_all

# Waits up to 5 s for PING on PORT; on failure (or if the process ended, e.g. because its port was
# taken) shows the end of LOG and exits.
wait_ping() {
  local port=$1 log=$2
  for _ in $(seq 1 100); do
    if [[ "$(cli "$port" ping)" == "PONG" ]]; then return 0; fi
    alive "$(cat "$dir/$port/pid.launch")" || break
    sleep 0.05
  done
  echo "redis-sentinel: $port: no answer" >&2
  tail -20 "$log" >&2 || true
  exit 1
}

case "$cmd" in
  start)
    (($# == 8)) || { echo "usage: $0 start DIR NAME PRIMARY_PORT REPLICA_PORT S1 S2 S3" >&2; exit 2; }
    name=$3
    primary=$4
    replica=$5
    sentinels=("$6" "$7" "$8")
    # On any failure, stop what was started (the logs stay in DIR); cleared once all are ready.
    trap stop_all EXIT
    # The primary and its replica. No delay before a diskless full sync (the default 5 s would
    # hold up the replica).
    for port in "$primary" "$replica"; do
      d="$dir/$port"
      mkdir -p "$d"
      extra=()
      [[ "$port" == "$replica" ]] && extra=(--replicaof 127.0.0.1 "$primary")
      redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
        --enable-debug-command local --repl-diskless-sync-delay 0 --dir "$d" --pidfile "$d/pid" \
        --logfile "$d/server.log" "${extra[@]}" </dev/null >>"$d/stdout.log" 2>&1 &
      echo $! >"$d/pid.launch"
      wait_ping "$port" "$d/server.log"
    done
    deadline=$(($(now_ms) + 20000))
    until grep -q '^master_link_status:up' <<<"$(cli "$replica" info replication || true)"; do
      if (($(now_ms) > deadline)); then
        echo "redis-sentinel: replica $replica not in sync with $primary after 20 s" >&2
        tail -20 "$dir/$replica/server.log" >&2 || true
        exit 1
      fi
      sleep 0.05
    done
    # The sentinels, each with a config file of its own (a sentinel rewrites it as it learns).
    for port in "${sentinels[@]}"; do
      d="$dir/$port"
      mkdir -p "$d"
      cat >"$dir/s$port.conf" <<EOF
port $port
bind 127.0.0.1
dir $d
logfile $d/sentinel.log
sentinel monitor $name 127.0.0.1 $primary 2
sentinel down-after-milliseconds $name 1000
sentinel failover-timeout $name 5000
sentinel parallel-syncs $name 1
EOF
      redis-server "$dir/s$port.conf" --sentinel </dev/null >>"$d/stdout.log" 2>&1 &
      echo $! >"$d/pid.launch"
    done
    for port in "${sentinels[@]}"; do wait_ping "$port" "$dir/$port/sentinel.log"; done
    # Every sentinel must report the primary, know the replica and both other sentinels (they
    # find each other through hello messages on the primary, every 2 s).
    while :; do
      ready=1
      for port in "${sentinels[@]}"; do
        addr=$(cli "$port" sentinel get-master-addr-by-name "$name" | tr '\n' ' ') || true
        replicas=$(cli "$port" sentinel replicas "$name") || true
        others=$(cli "$port" sentinel sentinels "$name") || true
        if [[ "$addr" != "127.0.0.1 $primary " ]] \
          || ! grep -qx "127.0.0.1:$replica" <<<"$replicas" \
          || (($(grep -cx runid <<<"$others" || true) < 2)); then
          ready=0
          break
        fi
      done
      ((ready)) && break
      if (($(now_ms) > deadline)); then
        echo "redis-sentinel: sentinels not ready after 20 s" >&2
        for port in "${sentinels[@]}"; do
          echo "--- sentinel $port" >&2
          tail -10 "$dir/$port/sentinel.log" >&2 || true
        done
        exit 1
      fi
      sleep 0.1
    done
    trap - EXIT
    echo "redis-sentinel: $name primary 127.0.0.1:$primary, replica 127.0.0.1:$replica, sentinels ${sentinels[*]}"
    ;;
  stop)
    stop_all
    ;;
  kill)
    port=${3:?PORT}
    stop_pidfile "$dir/$port/pid.launch" KILL
    rm -f "$dir/$port/pid"
    ;;
  *)
    echo "usage: $0 start DIR NAME PRIMARY_PORT REPLICA_PORT S1 S2 S3 | stop DIR | kill DIR PORT" >&2
    exit 2
    ;;
esac
