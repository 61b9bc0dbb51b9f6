#!/usr/bin/env bash
# How often Tollgate and nginx resume their TLS sessions with an upstream that closes every
# connection after one request (keepalive_requests 1), natively (no callgrind), at several client
# concurrencies. The upstream is nginx `listen ssl` (TLSv1.2 TLSv1.3) whose access log records
# $connection and $ssl_session_reused; the clients are Tollgate (one thread, never-binding rule),
# nginx proxying with its default upstream protocols (TLS 1.2 at most in nginx 1.22) and nginx
# proxying with `proxy_ssl_protocols TLSv1.2 TLSv1.3`, all three verifying the upstream's
# certificate against a private CA made here (tests/support/tls_pki.sh, in a temporary folder).
#
#   bench/tls_resumption.sh                                 # -c 1, 8, 64; the upstream's session cache on
#   CONCS="8" UPSTREAM_SESSION_CACHE=off bench/tls_resumption.sh
#   TOLLGATE_BIN=/path/to/tollgate REQUESTS=5000 bench/tls_resumption.sh
#
# Prints, per client and concurrency, the requests, the full handshakes the upstream saw and the
# share of handshakes resumed after the first. About 20 s for the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TOLLGATE_BIN=${TOLLGATE_BIN:-$ROOT/build-bench/tollgate}
CONCS=${CONCS:-"1 8 64"}
REQUESTS=${REQUESTS:-2000}
UPSTREAM_SESSION_CACHE=${UPSTREAM_SESSION_CACHE:-"shared:S:1m"}  # or "off": stateless tickets only
[[ -x $TOLLGATE_BIN ]] || { echo "tls_resumption: no $TOLLGATE_BIN (build it, or set TOLLGATE_BIN)" >&2; exit 1; }
for t in nginx ab openssl python3; do
  command -v "$t" >/dev/null || { echo "tls_resumption: $t is missing (nginx-light, apache2-utils, openssl, python3)" >&2; exit 1; }
done

source bench/common.sh
bench_workdir tlsres

bash tests/support/tls_pki.sh "$W/pki"
UP=$(free_port) G=$(free_port) N12=$(free_port) N13=$(free_port)
mkdir -p "$W/tmp"
cat >"$W/upstream.conf" <<NGX
worker_processes 1; master_process off; daemon off; error_log $W/upstream.err warn; pid $W/upstream.pid;
events { worker_connections 4096; }
http { log_format tls '\$connection \$ssl_session_reused \$ssl_protocol'; access_log $W/upstream.access tls;
  keepalive_requests 1; client_body_temp_path $W/tmp/ub; proxy_temp_path $W/tmp/up;
  server { listen 127.0.0.1:$UP ssl; ssl_certificate $W/pki/server.pem; ssl_certificate_key $W/pki/server.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache $UPSTREAM_SESSION_CACHE;
    location / { default_type text/plain; return 200 "ok"; } } }
NGX
tls_proxy() { # PORT UPSTREAM_BLOCK [PROTOCOLS]
  cat <<NGX
  upstream $2 { server 127.0.0.1:$UP; keepalive 32; }
  server { listen 127.0.0.1:$1; location / { proxy_http_version 1.1; proxy_set_header Connection "";
    proxy_ssl_verify on; proxy_ssl_trusted_certificate $W/pki/ca.pem; proxy_ssl_server_name on;
    proxy_ssl_name localhost; proxy_ssl_session_reuse on; ${3:+proxy_ssl_protocols $3;} proxy_pass https://$2; } }
NGX
}
{
  cat <<NGX
worker_processes 1; master_process off; daemon off; error_log $W/proxy.err warn; pid $W/proxy.pid;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $W/tmp/pb; proxy_temp_path $W/tmp/pp;
NGX
  tls_proxy "$N12" up12
  tls_proxy "$N13" up13 "TLSv1.2 TLSv1.3"
  echo "}"
} >"$W/proxy.conf"
cat >"$W/tollgate.json" <<JSON
{"listen": "127.0.0.1:$G", "threads": 1, "access_log": "off", "admin": {"listen": "127.0.0.1:0"},
 "upstreams": {"up": {"url": "https://localhost:$UP", "tls": {"ca_file": "$W/pki/ca.pem"}}},
 "routes": [{"prefix": "/", "upstream": "up"}],
 "limits": {"source": "file", "store": "local",
   "rules": [{"configId": 1, "interfaceUrl": "/nobind", "rateLimit": 1000000, "cache": 0, "status": 1}]}}
JSON
nginx -c "$W/upstream.conf" -p "$W" >"$W/upstream.log" 2>&1 & PIDS+=($!)
nginx -c "$W/proxy.conf" -p "$W" >"$W/proxy.log" 2>&1 & PIDS+=($!)
"$TOLLGATE_BIN" --config "$W/tollgate.json" >"$W/tollgate.log" 2>&1 & PIDS+=($!)
wait_port "$UP"; wait_port "$N12"; wait_port "$N13"; wait_port "$G"

echo "tls_resumption: $TOLLGATE_BIN; upstream keepalive_requests 1, ssl_session_cache $UPSTREAM_SESSION_CACHE; ab -k -n $REQUESTS"
printf '%-22s %5s %9s %6s %10s  %s\n' client "-c" requests full resumed protocols
for c in $CONCS; do
  for client in "tollgate $G" "nginx-default $N12" "nginx-tls1.3 $N13"; do
    read -r name port <<<"$client"
    l0=$(wc -l <"$W/upstream.access")
    ab -k -q -n "$REQUESTS" -c "$c" "http://127.0.0.1:$port/ibe/nobind" >"$W/ab.out" 2>&1 ||
      { cat "$W/ab.out" >&2; exit 1; }
    failed=$(awk '/^Failed requests:/ {print $3}' "$W/ab.out")
    non2xx=$(awk '/^Non-2xx responses:/ {print $3}' "$W/ab.out")
    [[ $failed == 0 && -z $non2xx ]] || { cat "$W/ab.out" >&2; echo "tls_resumption: $name -c $c: failures" >&2; exit 1; }
    sleep 0.3  # the upstream writes its log line as each request ends
    sed -n "$((l0 + 1)),\$p" "$W/upstream.access" |
      awk -v n="$name" -v c="$c" '
        !($1 in seen) {seen[$1] = 1; k++; if ($2 != "r") full++; else if (k > 1) r++; p[$3]++}
        END {printf "%-22s %5s %9d %6d %9.2f%% ", n, c, k, full, (k > 1 ? 100 * r / (k - 1) : 0)
             for (x in p) printf " %s:%d", x, p[x]; print ""}'
  done
done
