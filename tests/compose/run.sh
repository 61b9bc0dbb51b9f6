#!/usr/bin/env bash
# The compose stage of scripts/test.sh: the shipped Dockerfile and docker-compose.yml, run as users
# run them, end to end. Starts a private Docker engine (data in a temporary folder), makes the
# debian:12 base from Debian's mirror with debootstrap (registries are out of reach here), builds
# stand-ins for mysql:8.0 and redis:7 (tests/compose/standins.yml), brings the fleet up with
# `docker-compose up --build`, runs tests/compose/checks.py and the container checks below, then
# `down -v` and stops exactly the engine it started. When the engine cannot run on this machine it
# says why in one line and exits 77 (a skip), or fails (exit 1) with TOLLGATE_REQUIRE_COMPOSE=1,
# which scripts/test.sh sets under CI: there a stage that did not run is not a stage that passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
say() { echo "compose: $*"; }
fail() { echo "compose: FAIL: $*"; exit 1; }
skip() {
  [[ "${TOLLGATE_REQUIRE_COMPOSE:-}" == 1 ]] && fail "cannot run, and TOLLGATE_REQUIRE_COMPOSE=1: $*"
  say "SKIPPED: $*"
  exit 77
}

if [[ $(id -u) -ne 0 ]]; then
  skip "starting a private Docker engine needs root"
fi
scripts/deps.sh compose
docker=/usr/bin/docker   # Debian's client, the engine's own version

work=$(mktemp -d /tmp/tollgate-compose-XXXXXX)
export DOCKER_HOST="unix://$work/docker.sock"
project="tgcompose$$"
compose=(docker-compose -p "$project" -f docker-compose.yml -f tests/compose/standins.yml)
dockerd_pid=""
fleet_up=0

cleanup() {
  local rc=$?
  if ((fleet_up)); then
    if ((rc != 0)); then
      "${compose[@]}" ps || true
      "${compose[@]}" logs --no-color --tail=60 || true
    fi
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  if [[ -n "$dockerd_pid" ]]; then
    "$docker" ps -aq 2>/dev/null | xargs -r "$docker" rm -f >/dev/null 2>&1 || true
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$dockerd_pid" 2>/dev/null || true
    # What the engine changed on the host, put back: its firewall rules (and FORWARD's DROP policy)
    # and the bridges it made.
    iptables-restore <"$work/iptables.before" 2>/dev/null || true
    for l in $(links); do grep -qxF "$l" "$work/links.before" || ip link delete "$l" 2>/dev/null || true; done
    while read -r k v; do echo "$v" >"/proc/sys/$k" 2>/dev/null || true; done <"$work/sysctl.before"
  fi
  # The engine unmounts its layers when it stops; whatever it left mounted is unmounted here.
  grep -o " $work/[^ ]*" /proc/mounts 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT

# --- the engine --------------------------------------------------------------------------------
if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null; then
  skip "dockerd or docker-compose is not installed (scripts/deps.sh compose)"
fi
links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1; }
links >"$work/links.before"
iptables-save >"$work/iptables.before" 2>/dev/null || true
if ! grep -q '^\*filter' "$work/iptables.before"; then  # no rules yet: the empty tables to return to
  printf '*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n' >>"$work/iptables.before"
fi
if ! grep -q '^\*nat' "$work/iptables.before"; then
  printf '*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n' >>"$work/iptables.before"
fi
sysctls=(net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables)
for k in "${sysctls[@]}"; do [[ -r /proc/sys/$k ]] && echo "$k $(cat "/proc/sys/$k")"; done >"$work/sysctl.before"
# Its own session: a signal to this script's process group does not stop the engine before `down`.
setsid dockerd --data-root "$work/data" --exec-root "$work/exec" --host "$DOCKER_HOST" \
  --pidfile "$work/dockerd.pid" >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 1 150); do
  "$docker" info >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || break
  sleep 0.2
done
if ! "$docker" info >/dev/null 2>&1; then
  reason=$(grep -Ei 'level=(fatal|error)|failed' "$work/dockerd.log" | tail -1 | cut -c1-240)
  skip "the Docker engine cannot run on this machine: ${reason:-no answer within 30 s}"
fi
say "private Docker engine $("$docker" version --format '{{.Server.Version}}') ($("$docker" info --format '{{.Driver}}')), data in $work"

# --- debian:12, from the mirror apt already uses -------------------------------------------------
mirror=""
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
  [[ -r "$f" ]] || continue
  mirror=$(awk '/^URIs:/ {print $2; exit}' "$f")
  [[ -n "$mirror" ]] && break
done
if [[ -z "$mirror" && -r /etc/apt/sources.list ]]; then
  mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
[[ -n "$mirror" ]] || fail "no Debian mirror found in apt's sources"
started=$SECONDS
for attempt in 1 2; do  # once more if the mirror failed us part-way
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 && break
  ((attempt < 2)) || { tail -20 "$work/debootstrap.log"; fail "debootstrap bookworm from $mirror"; }
done
# The image's apt reads what the host's does (bookworm, its updates and security suites).
rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
  rm -f "$work/rootfs/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/debian.sources "$work/rootfs/etc/apt/sources.list.d/"
fi
# As in Debian's official images: packages never start services while an image is built.
printf '#!/bin/sh\nexit 101\n' >"$work/rootfs/usr/sbin/policy-rc.d"
chmod 755 "$work/rootfs/usr/sbin/policy-rc.d"
tar -C "$work/rootfs" -c . | "$docker" import -c 'CMD ["bash"]' - debian:12 >/dev/null
rm -rf "$work/rootfs"
say "debian:12 imported from a minbase debootstrap ($((SECONDS - started)) s, $("$docker" image inspect -f '{{.Size}}' debian:12 | awk '{printf "%.0f MB", $1 / 1e6}'))"

# --- the fleet ---------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export TOLLGATE_ADMIN_TOKEN="compose-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export COMPOSE="${compose[*]}"

# The admin token is required: without it the file does not start.
if (unset TOLLGATE_ADMIN_TOKEN; "${compose[@]}" config >/dev/null 2>"$work/no-token.err"); then
  fail "docker-compose accepted the file without TOLLGATE_ADMIN_TOKEN"
fi
grep -q TOLLGATE_ADMIN_TOKEN "$work/no-token.err" || fail "no word of TOLLGATE_ADMIN_TOKEN: $(cat "$work/no-token.err")"
say "ok: without TOLLGATE_ADMIN_TOKEN docker-compose refuses: ...$(tail -1 "$work/no-token.err" | sed 's/.*in service/in service/')"

started=$SECONDS
fleet_up=1
export TOLLGATE_COMMIT=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
"${compose[@]}" build >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "docker-compose build"; }
# The host ports are picked now, just before `up` binds them (not minutes before, during the build).
export TOLLGATE_A_PORT=$(free_port) TOLLGATE_B_PORT=$(free_port)
export TOLLGATE_A_ADMIN_PORT=$(free_port) TOLLGATE_B_ADMIN_PORT=$(free_port)
"${compose[@]}" up -d --build >"$work/up.log" 2>&1 || { tail -40 "$work/up.log"; fail "docker-compose up --build"; }
say "docker-compose build, then up --build: $((SECONDS - started)) s"
images=$("$docker" images --format '{{.Repository}}:{{.Tag}}' | grep -c '^tollgate:' || true)
[[ "$images" == 1 ]] || fail "$images Tollgate images, want one: $("$docker" images)"
say "ok: one Tollgate image for every Tollgate service: tollgate:local, $("$docker" image inspect -f '{{.Size}}' tollgate:local | awk '{printf "%.0f MB", $1 / 1e6}')"
# The image says what the binary says: its OCI labels and `tollgate --version` name the project's
# version and the commit it was built from.
want_version=$(sed -n 's/^project(tollgate VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
label() { "$docker" image inspect -f "{{index .Config.Labels \"$1\"}}" tollgate:local; }
[[ $(label org.opencontainers.image.version) == "$want_version" ]] || fail "image version label '$(label org.opencontainers.image.version)', want $want_version"
[[ $(label org.opencontainers.image.revision) == "$TOLLGATE_COMMIT" ]] || fail "image revision label '$(label org.opencontainers.image.revision)', want $TOLLGATE_COMMIT"
binary_says=$("$docker" run --rm tollgate:local tollgate --version | head -1)
[[ $binary_says == "tollgate $want_version (commit $TOLLGATE_COMMIT)" ]] || fail "tollgate --version in the image: '$binary_says'"
say "ok: labels and tollgate --version agree: $binary_says"

container() { "${compose[@]}" ps -q "$1"; }
# By container id, with the name a failure reports.
health() { "$docker" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$1"; }
wait_healthy_id() {
  local deadline=$((SECONDS + $3))
  until [[ $(health "$1") == healthy ]]; do
    ((SECONDS < deadline)) || { "$docker" logs --tail 20 "$1" 2>&1; fail "$2 not healthy within $3 s (health: $(health "$1"))"; }
    sleep 0.5
  done
}
wait_healthy() { wait_healthy_id "$(container "$1")" "$1" "$2"; }
# A stopped container exited 0 after the gateway's drain.
drained() {
  local code log
  code=$("$docker" inspect -f '{{.State.ExitCode}}' "$1")
  log=$("$docker" logs "$1" 2>&1)
  [[ "$code" == 0 ]] || fail "$2 exited $code on docker stop"
  grep -q 'tollgate: drained' <<<"$log" || fail "$2's log has no drain"
}
for s in mysql redis upstream gateway-a gateway-b; do wait_healthy "$s" 180; done
say "ok: every service healthy (the gateways by their image's HEALTHCHECK on /readyz)"

for s in gateway-a gateway-b upstream; do
  uid=$("$docker" exec "$(container "$s")" id -u)
  [[ "$uid" != 0 ]] || fail "$s runs as root"
done
say "ok: the Tollgate containers run as uid $uid, not root"

python3 tests/compose/checks.py ready token row shared switch

# A crash is restarted by the restart policy.
read -r pid restarts < <("$docker" inspect -f '{{.State.Pid}} {{.RestartCount}}' "$(container gateway-b)")
((pid > 0)) || fail "gateway-b is not running (pid $pid)"
kill -9 "$pid"
deadline=$((SECONDS + 60))
until [[ $("$docker" inspect -f '{{.RestartCount}} {{.State.Running}}' "$(container gateway-b)") == "$((restarts + 1)) true" ]]; do
  ((SECONDS < deadline)) || fail "gateway-b not restarted after a SIGKILL within 60 s"
  sleep 0.2
done
wait_healthy gateway-b 60
say "ok: gateway-b killed (SIGKILL) was restarted by its restart policy and is healthy again"

# docker stop sends the image's STOPSIGNAL: a drain, exit 0.
started=$SECONDS
"${compose[@]}" stop gateway-b >/dev/null 2>&1
drained "$(container gateway-b)" gateway-b
say "ok: docker stop drained gateway-b, exit 0, in $((SECONDS - started)) s"

# Start-up: from `docker start` to /readyz 200 (rules loaded from MySQL, Redis connected).
t0=$(date +%s%N)
"${compose[@]}" start gateway-b >/dev/null 2>&1
until curl -fs -o /dev/null "http://127.0.0.1:$TOLLGATE_B_ADMIN_PORT/readyz"; do
  (( $(date +%s%N) - t0 < 30000000000 )) || fail "gateway-b not ready within 30 s of docker start"
  sleep 0.02
done
ready=$(date +%s%N)
since_start=$(( (ready - $(date -d "$("$docker" inspect -f '{{.State.StartedAt}}' "$(container gateway-b)")" +%s%N)) / 1000000 ))
say "ok: gateway-b ready $(( (ready - t0) / 1000000 )) ms after docker-compose start, $since_start ms after its process started"
python3 tests/compose/checks.py ready

# The image alone, as `docker run` starts it: its own CMD (the embedded default configuration),
# HEALTHCHECK and STOPSIGNAL, none of them overridden.
solo=$("$docker" run -d tollgate:local)
wait_healthy_id "$solo" "docker run tollgate:local" 60
"$docker" stop -t 35 "$solo" >/dev/null
drained "$solo" "docker run tollgate:local"
"$docker" rm "$solo" >/dev/null
say "ok: docker run tollgate:local: healthy on its own HEALTHCHECK, docker stop drains it, exit 0"

"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
fleet_up=0
[[ -z $("$docker" ps -aq) ]] || fail "containers left after down -v"
[[ -z $("$docker" volume ls -q) ]] || fail "volumes left after down -v"
say "ok: down -v removed every container and volume"
say "all checks passed"
