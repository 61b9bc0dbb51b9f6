#!/usr/bin/env bash
# A private Redis Cluster for tests: six nodes on loopback ports, three primaries and three replicas,
# each in a folder of its own under DIR. Not a system service. Every node also listens on its port
# + 10000 (the cluster bus).
#   scripts/redis-cluster.sh start DIR P1 P2 P3 P4 P5 P6   start the six nodes, create the cluster
#                               (P1..P3 primaries, P4 replicates P1, P5 P2, P6 P3) and wait until
#                               every node says cluster_state:ok and all agree (at most ~20 s)
#   scripts/redis-cluster.sh stop DIR         stop every node started in DIR (SIGTERM, then SIGKILL)
#   scripts/redis-cluster.sh kill DIR PORT    kill one node hard (SIGKILL), as in a crash
set -euo pipefail
cmd=${1:?start|stop|kill}
dir=${2:?DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

source "$(dirname "${BASH_SOURCE[0]}")/redis-procs.sh"  # now_ms, cli, alive, stop_pidfile, stop_all

# One line per node of its CLUSTER NODES view, reduced to what all nodes must agree on: address,
# role, primary and slots (no flags, no timings, no "myself"), sorted.
layout() {
  cli "$1" cluster nodes | awk '{
      role = ($3 ~ /master/) ? "master" : "replica"
      line = $2 " " role " " $4
      for (i = 9; i <= NF; i++) line = line " " $i
      print line
    }' | sort
}

case "$cmd" in
  start)
    shift 2
    (($# == 6)) || { echo "usage: $0 start DIR P1 P2 P3 P4 P5 P6" >&2; exit 2; }
    ports=("$@")
    # On any failure, stop what was started (the logs stay in DIR); cleared once the cluster is ok.
    trap stop_all EXIT
    echo "${ports[*]}" >"$dir/ports"
    for port in "${ports[@]}"; do
      d="$dir/$port"
      mkdir -p "$d"
      rm -f "$d/nodes.conf"
      redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
        --enable-debug-command local --cluster-enabled yes --cluster-config-file "$d/nodes.conf" \
        --cluster-node-timeout 1000 --cluster-require-full-coverage no --repl-diskless-sync-delay 0 --dir "$d" --pidfile "$d/pid" --logfile "$d/server.log" \
        </dev/null >>"$d/stdout.log" 2>&1 &
      echo $! >"$d/pid.launch"
    done
    for port in "${ports[@]}"; do
      ok=0
      for _ in $(seq 1 100); do
        if [[ "$(cli "$port" ping)" == "PONG" ]]; then ok=1; break; fi
        alive "$(cat "$dir/$port/pid.launch")" || break  # e.g. its port was taken
        sleep 0.05
      done
      if ((!ok)); then
        echo "redis-cluster: node $port: no answer" >&2
        tail -20 "$dir/$port/server.log" >&2 || true
        exit 1
      fi
    done
    deadline=$(($(now_ms) + 20000))
    addrs=()
    for port in "${ports[@]}"; do addrs+=("127.0.0.1:$port"); done
    # redis-cli makes the first three primaries; it pairs the replicas at random (all share a host).
    if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1; then
      echo "redis-cluster: redis-cli --cluster create failed:" >&2
      cat "$dir/create.log" >&2
      exit 1
    fi
    # Then re-pair them so that P4 replicates P1, P5 P2 and P6 P3: tests can rely on that.
    for i in 0 1 2; do
      primary=${ports[$i]}
      replica=${ports[$((i + 3))]}
      id=$(cli "$primary" cluster myid)
      current=$(cli "$replica" cluster nodes | awk '$3 ~ /myself/ {print $4}')
      if [[ "$current" != "$id" ]]; then
        cli "$replica" cluster replicate "$id" >/dev/null
      fi
    done
    # Wait until every node is ok, has the same view (roles and slots), each replica has synced
    # from its primary (a replica that never did would refuse to fail over) and
    # redis-cli --cluster check passes.
    while :; do
      ready=1
      first=""
      for port in "${ports[@]}"; do
        info=$(cli "$port" cluster info) || true
        if ! grep -q '^cluster_state:ok' <<<"$info"; then ready=0; break; fi
        view=$(layout "$port") || true
        if [[ -z "$first" ]]; then first=$view; elif [[ "$view" != "$first" ]]; then ready=0; break; fi
      done
      if ((ready)); then
        for i in 3 4 5; do
          info=$(cli "${ports[$i]}" info replication) || true
          if ! grep -q '^master_link_status:up' <<<"$info" \
            || ! grep -q "^master_port:${ports[$((i - 3))]}" <<<"$info"; then
            ready=0
            break
          fi
        done
      fi
      if ((ready)) && redis-cli --cluster check "127.0.0.1:${ports[0]}" >"$dir/check.log" 2>&1; then
        break
      fi
      if (($(now_ms) > deadline)); then
        echo "redis-cluster: not ok after 20 s" >&2
        for port in "${ports[@]}"; do
          echo "--- $port: $(cli "$port" cluster info | grep cluster_state)" >&2
          cli "$port" cluster nodes >&2 || true
        done
        cat "$dir/check.log" >&2 || true
        exit 1
      fi
      sleep 0.1
    done
    trap - EXIT
    for i in 3 4 5; do
      echo "redis-cluster: 127.0.0.1:${ports[$i]} replicates 127.0.0.1:${ports[$((i - 3))]}"
    done
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
    echo "usage: $0 start DIR P1 P2 P3 P4 P5 P6 | stop DIR | kill DIR PORT" >&2
    exit 2
    ;;
esac
