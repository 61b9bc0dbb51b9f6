#!/usr/bin/env python3
"""Holds N requests in a gateway's wait window at once and reports the gateway's memory and CPU.

usage: hold.py GATEWAY_PORT GATEWAY_PID N PATH
Opens N connections, sends one request on each (a rule that makes every one of them wait), samples
the gateway's RSS and CPU while they are held, then closes half of the clients, waits for every
remaining answer, and prints one JSON line.
"""
import asyncio, json, os, sys, time

port, pid, n, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
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

async def held_metric():
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path}?probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await w.drain()
    await r.read()
    w.close()

async def main():
    base = rss_kib()
    conns = []
    for i in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append((r, w))
    opened = rss_kib()
    for r, w in conns:
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await asyncio.gather(*(w.drain() for _, w in conns))
    await asyncio.sleep(2.0)  # every request is parsed and waiting on its timer
    held = rss_kib()
    c0, t0 = cpu_s(), time.time()
    await asyncio.sleep(5.0)
    cpu_while_holding = (cpu_s() - c0) / (time.time() - t0)
    # Half the clients leave; every other request must still get exactly one answer.
    for r, w in conns[: n // 2]:
        w.close()
    answered, statuses = 0, {}
    async def one(r):
        line = await asyncio.wait_for(r.readline(), timeout=120)
        return line.split()[1].decode() if line else "closed"
    results = await asyncio.gather(*(one(r) for r, _ in conns[n // 2:]), return_exceptions=True)
    for s in results:
        key = s if isinstance(s, str) else type(s).__name__
        statuses[key] = statuses.get(key, 0) + 1
    for _, w in conns[n // 2:]:
        w.close()
    await asyncio.sleep(2.0)
    after = rss_kib()
    print(json.dumps({
        "held": n, "rss_base_kib": base, "rss_connections_kib": opened, "rss_held_kib": held,
        "rss_after_kib": after, "bytes_per_held_request": (held - opened) * 1024 / n,
        "bytes_per_connection_and_request": (held - base) * 1024 / n,
        "cpu_cores_while_holding": round(cpu_while_holding, 4), "answers": statuses}))

asyncio.run(main())
