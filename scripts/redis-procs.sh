#!/usr/bin/env bash
# Shared by scripts/redis-cluster.sh and scripts/redis-sentinel.sh (sourced, not run): the
# processes each starts in DIR (one folder per port with its launch pid in pid.launch), probed and
# stopped without killing a pid that has since been reused. Uses $dir, the caller's DIR.

now_ms() { echo $(($(date +%s%N) / 1000000)); }
cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }

# True while the process lives. Nobody may reap our orphans (PID 1 need not be an init), so a
# zombie counts as gone.
alive() {
  local pid=$1 state
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ "$state" != "Z" ]]
}

# Sends SIG to the process whose launch pid is in FILE if it is still a redis-server (the pid may
# have been reused since), waits up to 5 s for it to go, then forgets the pid.
stop_pidfile() {
  local file=$1 sig=$2 pid
  [[ -f "$file" ]] || return 0
  pid=$(cat "$file")
  if alive "$pid" && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.05
    done
    if alive "$pid"; then
      kill -9 "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        alive "$pid" || break
        sleep 0.05
      done
    fi
  fi
  rm -f "$file"
}

# Stops everything started in DIR.
stop_all() {
  local file
  for file in "$dir"/*/pid.launch; do
    [[ -e "$file" ]] || continue
    stop_pidfile "$file" TERM
    rm -f "$(dirname "$file")/pid"
  done
}
