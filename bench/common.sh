# Sourced by the benchmark scripts that start servers of their own:
#   source bench/common.sh; bench_workdir tlsres
# bench_workdir NAME makes the scratch folder $W (/tmp/tollgate-NAME-XXXXXX) and, on exit, stops
# every process whose pid was added to PIDS and removes $W. free_port prints a loopback TCP port
# nobody listens on; wait_port PORT waits up to 10 s for something to listen on it.
bench_workdir() {
  W=$(mktemp -d "/tmp/tollgate-$1-XXXXXX")
  PIDS=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 never opened" >&2
  exit 1
}
