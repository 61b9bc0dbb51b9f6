#!/usr/bin/env python3
"""Holds N requests in a gateway's wait window at once and reports the gateway's memory and CPU.

usage: hold.py GATEWAY_PORT GATEWAY_PID N PATH --admin ADMIN_PORT [--no-answers] [--pad BYTES]
Opens N connections and waits until the gateway has accepted them all (its `tollgate_connections`
gauge), sends one request on each (a rule that makes them wait), and waits until the number held
(its `tollgate_held_requests` gauge) stops growing. The RSS growth from "connections open" to
"requests held" divided by the number held then is the cost of a held request; with its
connection, plus the growth from before the connections to "connections open" divided by N. The
gateway's `proxy.max_held_per_bucket` and `proxy.max_held` must be above N (a request over a cap
gets an immediate 429 and is not held), and its rule's rate low enough that few are released
meanwhile: the figures divide by what the gauge says, never by N. Then it samples the CPU for 5 s, closes
half of the clients and waits for every remaining answer (skipped with --no-answers), and prints
one JSON line.
"""
import argparse, asyncio, json, os, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("pid", type=int)
ap.add_argument("n", type=int)
ap.add_argument("path")
ap.add_argument("--admin", type=int, required=True, help="the gateway's admin port (its /metrics)")
ap.add_argument("--no-answers", action="store_true", help="stop after the memory and CPU samples")
ap.add_argument("--pad", type=int, default=0, help="add a field of this many bytes to each request's head")
args = ap.parse_args()
port, pid, n, path = args.port, args.pid, args.n, args.path
TICK = os.sysconf("SC_CLK_TCK")

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def cpu_s():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def gauge(name):
    with urllib.request.urlopen(f"http://127.0.0.1:{args.admin}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{}"):
                return int(float(line.split()[-1]))
    raise SystemExit(f"hold.py: no {name} on the admin port's /metrics")

async def wait_until(pred, what, timeout=60.0):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise SystemExit(f"hold.py: {what} not reached in {timeout:.0f} s")
        await asyncio.sleep(0.1)

async def main():
    connections0 = gauge("tollgate_connections")
    base = rss_kib()
    conns = []
    for i in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append((r, w))
    # The kernel completes a connection before the gateway accepts it: wait for the gateway.
    await wait_until(lambda: gauge("tollgate_connections") >= connections0 + n, f"{n} connections accepted")
    await asyncio.sleep(0.5)
    opened = rss_kib()
    pad = f"X-Pad: {'p' * args.pad}\r\n" if args.pad > 0 else ""
    for r, w in conns:
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{pad}\r\n".encode())
    await asyncio.gather(*(w.drain() for _, w in conns))
    # Held: the gauge has stopped growing (every request parsed and decided; a few may already
    # have been released by then, which is why the figures divide by the gauge).
    last, still = -1, 0
    while still < 3:
        await asyncio.sleep(0.2)
        now = gauge("tollgate_held_requests")
        still = still + 1 if now <= last else 0
        last = max(last, now)
    held_before = gauge("tollgate_held_requests")
    held_rss = rss_kib()
    held = gauge("tollgate_held_requests")
    held = (held_before + held) / 2
    if held <= 0:
        raise SystemExit("hold.py: no request was held (is the rule binding, the cap above N?)")
    c0, t0 = cpu_s(), time.time()
    await asyncio.sleep(5.0)
    cpu_while_holding = (cpu_s() - c0) / (time.time() - t0)
    held_after_cpu = gauge("tollgate_held_requests")
    out = {
        "requests": n, "pad_bytes": args.pad, "held": round(held), "held_after_cpu_sample": held_after_cpu,
        "rss_base_kib": base, "rss_connections_kib": opened, "rss_held_kib": held_rss,
        "bytes_per_held_request": round((held_rss - opened) * 1024 / held),
        "bytes_per_connection": round((opened - base) * 1024 / n),
        "bytes_per_held_request_with_connection": round((held_rss - opened) * 1024 / held + (opened - base) * 1024 / n),
        "cpu_cores_while_holding": round(cpu_while_holding, 4)}
    if not args.no_answers:
        # Half the clients leave; every other request must still get exactly one answer.
        for r, w in conns[: n // 2]:
            w.close()
        statuses = {}
        async def one(r):
            line = await asyncio.wait_for(r.readline(), timeout=120)
            return line.split()[1].decode() if line else "closed"
        results = await asyncio.gather(*(one(r) for r, _ in conns[n // 2:]), return_exceptions=True)
        for s in results:
            key = s if isinstance(s, str) else type(s).__name__
            statuses[key] = statuses.get(key, 0) + 1
        out["answers"] = statuses
    for _, w in conns:
        w.close()
    await asyncio.sleep(2.0)
    out["rss_after_kib"] = rss_kib()
    print(json.dumps(out))

asyncio.run(main())
