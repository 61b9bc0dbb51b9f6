#!/usr/bin/env bash
# A private Redis for tests, in a folder of its own, on a loopback port. Not a system service.
#   scripts/redis-server.sh start DIR PORT [ARGS...]   start (with more redis-server options, e.g.
#                                                      --cluster-enabled yes) and wait for PING
#   scripts/redis-server.sh stop DIR         stop the server started in DIR (and wait for it)
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$cmd" in
  start)
    port=${3:?PORT}
    shift 3
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no --enable-debug-command local \
      --dir "$dir" --pidfile "$dir/pid" --logfile "$dir/server.log" "$@" &
    echo $! >"$dir/pid.launch"
    for _ in $(seq 1 100); do
      if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]; then exit 0; fi
      sleep 0.05
    done
    echo "redis-server: no answer after 5 s" >&2
    tail -20 "$dir/server.log" >&2 || true
    exit 1
    ;;
  stop)
    [[ -f "$dir/pid.launch" ]] || exit 0
    pid=$(cat "$dir/pid.launch")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || { rm -f "$dir/pid.launch" "$dir/pid"; exit 0; }
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/pid.launch" "$dir/pid"
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
