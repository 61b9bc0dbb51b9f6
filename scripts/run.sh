#!/usr/bin/env bash
# Installs what is missing, builds, and runs the embedded default: the mock upstream on :9000, the
# gateway on :8080 (admin and console on 127.0.0.1:9901) with conf/gateway.json, and demo traffic
# for the console to show (TOLLGATE_DEMO=0: none). Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
scripts/build.sh -DTOLLGATE_BUILD_TESTS=OFF
# The admin token: yours if TOLLGATE_ADMIN_TOKEN is set, otherwise a random one made for this run
# (printed below), never a fixed word anyone could guess.
if [[ -z "${TOLLGATE_ADMIN_TOKEN:-}" ]]; then
  TOLLGATE_ADMIN_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  token_note="a random one made for this run (set TOLLGATE_ADMIN_TOKEN to choose it)"
else
  token_note="yours, from TOLLGATE_ADMIN_TOKEN"
fi
export TOLLGATE_ADMIN_TOKEN
./build/tollgate-mock-upstream --port 9000 &
mock=$!
demo=""
if [[ "${TOLLGATE_DEMO:-1}" != 0 ]]; then
  scripts/demo-traffic.sh >/dev/null &
  demo=$!
fi
trap 'kill $mock $demo 2>/dev/null || true' EXIT
cat <<MSG

Console: http://127.0.0.1:9901/  (demo traffic is running, so /shopping/search and /login are busy;
         TOLLGATE_DEMO=0 scripts/run.sh for a quiet gateway)

Admin token: $TOLLGATE_ADMIN_TOKEN
             ($token_note)

Try:
  curl -i http://127.0.0.1:8080/ibe/shopping/search          # 5/s, may wait up to 0.5 s
  for i in \$(seq 20); do curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8080/ibe/shopping/search & done; wait
  for i in \$(seq 10); do curl -s http://127.0.0.1:8080/ibe/login -o /dev/null -w '%{http_code} ' & done; wait; echo  # per client: 2/s, 5/min
  curl -i http://127.0.0.1:8080/ibe/login                      # a 429 naming its quota once they are used
  curl -s http://127.0.0.1:9901/admin/rules
  curl -s -X PUT -H "Authorization: Bearer $TOLLGATE_ADMIN_TOKEN" -d '{"enabled":false}' http://127.0.0.1:9901/admin/switch
  curl -s http://127.0.0.1:9901/metrics
  curl -s http://127.0.0.1:9000/__stats                        # what reached the upstream

MSG
./build/tollgate --config conf/gateway.json
