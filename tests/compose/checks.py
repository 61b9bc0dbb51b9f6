#!/usr/bin/env python3
"""The compose fleet's end-to-end checks, run by tests/compose/run.sh against the running fleet.

Both gateways are reached through the ports the compose file publishes on the host; the database
is edited through `docker-compose exec mysql`. Each check prints one line; the first failure ends
the run with exit 1. Timings are measured, with the bounds the issue sets (2 s), and printed.
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

TOKEN = os.environ["TOLLGATE_ADMIN_TOKEN"]
GATEWAYS = {
    "gateway-a": (int(os.environ["TOLLGATE_A_PORT"]), int(os.environ["TOLLGATE_A_ADMIN_PORT"])),
    "gateway-b": (int(os.environ["TOLLGATE_B_PORT"]), int(os.environ["TOLLGATE_B_ADMIN_PORT"])),
}
COMPOSE = os.environ["COMPOSE"].split()  # docker-compose -p ... -f ... -f ...
FLEET_BOUND_S = 2.0


def fail(msg):
    print(f"compose: FAIL: {msg}", flush=True)
    sys.exit(1)


def ok(msg):
    print(f"compose: ok: {msg}", flush=True)


def http(method, port, path, body=None, token=None, timeout=5):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def admin(name, method, path, body=None, token=None):
    return http(method, GATEWAYS[name][1], path, body, token)


def admin_json(name, path):
    status, body, _ = admin(name, "GET", path)
    if status != 200:
        fail(f"{name} GET {path}: {status} {body[:200]!r}")
    return json.loads(body)


def sql(statement):
    subprocess.run(COMPOSE + ["exec", "-T", "mysql", "mysql", "-utollgate",
                              f"-p{os.environ.get('TOLLGATE_MYSQL_PASSWORD', 'tollgate')}",
                              "tollgate", "-e", statement], check=True)


def wait_all(what, predicate, bound_s):
    """Polls every gateway until predicate(name) holds on all; returns the seconds it took."""
    start = time.monotonic()
    pending = set(GATEWAYS)
    while pending:
        pending = {g for g in pending if not predicate(g)}
        elapsed = time.monotonic() - start
        if pending and elapsed > bound_s:
            fail(f"{what}: not seen on {sorted(pending)} within {bound_s} s")
        if pending:
            time.sleep(0.02)
    return time.monotonic() - start


def rule(name, config_id):
    for r in admin_json(name, "/admin/rules")["rules"]:
        if r["configId"] == config_id:
            return r
    return None


def metric(name, series):
    status, body, _ = admin(name, "GET", "/metrics")
    if status != 200:
        fail(f"{name} /metrics: {status}")
    for line in body.decode().splitlines():
        if line.startswith(series + " ") or line.startswith(series + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def check_ready():
    for name in GATEWAYS:
        status, body, _ = admin(name, "GET", "/readyz")
        if status != 200:
            fail(f"{name} /readyz: {status} {body[:200]!r}")
        source = json.loads(body).get("config_source", {})
        if not source.get("healthy"):
            fail(f"{name}: config source not healthy: {source}")
        rules = admin_json(name, "/admin/rules")
        if not rules["source"].startswith("mysql") or not rules["rules"]:
            fail(f"{name} serves {len(rules['rules'])} rules from {rules['source']!r}, not MySQL's rows")
        store_up = metric(name, "tollgate_store_up")
        if store_up != 1:
            fail(f"{name}: tollgate_store_up is {store_up}, Redis not reached")
    ok("/readyz 200 on both gateways, rules from MySQL, Redis up")


def check_admin_needs_token():
    for token in (None, "wrong-token"):
        status, _, _ = admin("gateway-a", "PUT", "/admin/switch", {"enabled": False}, token)
        if status != 401:
            fail(f"PUT /admin/switch with token {token!r}: {status}, want 401")
    if not admin_json("gateway-a", "/admin/switch")["enabled"]:
        fail("an unauthenticated PUT changed the switch")
    ok("admin mutations without the token: 401, nothing changed")


def check_row_edit():
    # A burst of 10 refilled at 1/s, no waiting: two gateways that did not share buckets would
    # admit 20 of a quick burst, a shared bucket 10 plus what refills meanwhile.
    sql("UPDATE t_ratelimite_conf SET rateLimit = 1, burst = 10, cache = 0 WHERE configId = 1")
    took = wait_all("the edited row (configId 1: rateLimit 1, burst 10, cache 0)",
                    lambda g: (r := rule(g, 1)) is not None and r["rateLimit"] == 1 and r["burst"] == 10
                    and r["cache"] == 0, FLEET_BOUND_S)
    ok(f"row edited in MySQL in force on both gateways after {took:.2f} s (bound {FLEET_BOUND_S} s)")


def check_shared_limit():
    counts = {name: {} for name in GATEWAYS}
    start = time.monotonic()
    for i in range(40):
        name = "gateway-a" if i % 2 == 0 else "gateway-b"
        status, body, headers = http("GET", GATEWAYS[name][0], "/shopping/search?from=PEK&to=SHA")
        if status == 429 and headers.get("X-Tollgate-Origin") != "gateway":
            fail(f"a 429 from {name} not marked as the gateway's own")
        counts[name][status] = counts[name].get(status, 0) + 1
    elapsed = time.monotonic() - start
    admitted = sum(c.get(200, 0) for c in counts.values())
    refused = sum(c.get(429, 0) for c in counts.values())
    bound = 10 + 1 * elapsed + 1  # burst + rate * T, plus the one slot a boundary can add
    print(f"compose: 40 requests over {elapsed:.2f} s, alternating: {counts}", flush=True)
    if admitted + refused != 40:
        fail(f"answers other than 200 and 429: {counts}")
    if admitted < 10:
        fail(f"{admitted} admitted, fewer than the burst of 10")
    if admitted > bound:
        fail(f"{admitted} admitted, more than burst + rate * T = {bound:.1f}: the buckets are not shared")
    if any(c.get(429, 0) == 0 for c in counts.values()):
        fail(f"a gateway refused nothing: {counts}")
    ok(f"one limit across both gateways: {admitted} admitted (bound {bound:.1f}, unshared would be 20)")


def flip_switch(name, enabled):
    """Turns the switch on or off through one gateway; returns how long until both showed it."""
    status, body, _ = admin(name, "PUT", "/admin/switch", {"enabled": enabled}, TOKEN)
    if status != 200:
        fail(f"PUT /admin/switch on {name}: {status} {body[:200]!r}")
    return wait_all(f"the switch turned {'on' if enabled else 'off'} on {name}",
                    lambda g: admin_json(g, "/admin/switch")["enabled"] == enabled, FLEET_BOUND_S)


def check_switch():
    took = flip_switch("gateway-a", False)
    ok(f"switch off on gateway-a, seen on both after {took:.2f} s")
    statuses = [http("GET", GATEWAYS["gateway-b"][0], "/shopping/search")[0] for _ in range(30)]
    if set(statuses) != {200}:
        fail(f"limiting off, but gateway-b answered {sorted(set(statuses))}")
    ok("limiting off: 30 requests past an empty bucket on gateway-b, all 200")
    took = flip_switch("gateway-b", True)
    ok(f"switch on again from gateway-b, seen on both after {took:.2f} s")
    statuses = [http("GET", GATEWAYS["gateway-a"][0], "/shopping/search")[0] for _ in range(30)]
    if 429 not in statuses:
        fail("limiting on again, but gateway-a refused none of 30 quick requests to a 1/s row")
    ok("limiting on again: gateway-a refuses past the shared bucket")


if __name__ == "__main__":
    checks = {"ready": check_ready, "token": check_admin_needs_token, "row": check_row_edit,
              "shared": check_shared_limit, "switch": check_switch}
    for name in sys.argv[1:] or list(checks):
        checks[name]()
