#!/usr/bin/env python3
"""Turns a bench/run.sh result folder into summary.md (medians with min-max) and latency.png."""
import collections, json, os, re, statistics, subprocess, sys

out, duration, conns, cores = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")
ORDER = ["U", "N0", "N1", "T0", "T1", "T2", "T2B", "T2K", "N2", "T3", "N3", "T4", "T5", "Um", "N0m", "N1m", "T1m", "N1s", "N1s3", "T1s", "N1sN", "N1sN3", "T1sN"]
DESC = {
    "U": "nginx upstream, direct (ceiling)", "N0": "nginx proxy, no limit", "N1": "nginx proxy, limit_req never binds",
    "T0": "Tollgate, no matching rule", "T1": "Tollgate, never-binding rule, in-process",
    "T2": "Tollgate, never-binding rule, Redis",
    "T2B": "Tollgate, 100 never-binding rules round-robin, one Redis",
    "T2K": "T2B on a 3-primary Redis Cluster (the rules' slots spread over the primaries)", "N2": "nginx limit_req 1000r/s burst=200 (delay)",
    "T3": "Tollgate 1000/s, burst 200, cache 0.2 s",
    "N3": "nginx limit_req per $binary_remote_addr, never binds",
    "T4": "Tollgate bucket keyed by client_ip + a per-IP quota, never bind, in-process",
    "T5": "T4's rule with Redis (one EVALSHA: bucket + quota)",
    "Um": "mock upstream, direct", "N0m": "nginx proxy to mock", "N1m": "nginx limit_req to mock",
    "T1m": "Tollgate never-binding rule to mock",
    "N1s": "N1 to an https upstream (verified, session reuse, keep-alive pool)",
    "T1s": "T1 to an https upstream (verified, keep-alive)",
    "N1sN": "N1s, upstream keepalive_requests 1 (a handshake per request)",
    "N1s3": "N1s offering TLS 1.3 (proxy_ssl_protocols TLSv1.2 TLSv1.3)",
    "N1sN3": "N1sN offering TLS 1.3 (proxy_ssl_protocols TLSv1.2 TLSv1.3)",
    "T1sN": "T1s, upstream keepalive_requests 1 (a handshake per request)"}

def to_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    x = float(m.group(1))
    return {"us": x / 1000, "ms": x, "s": x * 1000}[m.group(2)]

runs = {}
for name in os.listdir(os.path.join(out, "raw")):
    m = re.match(r"(\w+)-round(\d+)\.txt", name)
    if not m:
        continue
    text = open(os.path.join(out, "raw", name)).read()
    r = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
         "requests": int(re.search(r"(\d+) requests in", text).group(1))}
    for p in ("50", "90", "99"):
        r["p" + p] = to_ms(re.search(rf"\s{p}%\s+([\d.]+\w+)", text).group(1))
    n2 = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    r["non2xx"] = int(n2.group(1)) if n2 else 0
    r["errors"] = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    runs.setdefault(m.group(1), {})[int(m.group(2))] = r
for line in open(os.path.join(out, "cpu.tsv")):
    name, rnd, core, proc, secs = line.split()
    r = runs[name][int(rnd)]
    r["core_us"] = int(core) * TICK_US / r["requests"]
    r["proc_us"] = int(proc) * TICK_US / r["requests"]

def agg(name, key):
    vals = [r[key] for r in runs[name].values()]
    return statistics.median(vals), min(vals), max(vals)

def cell(name, key, fmt="{:.0f}"):
    med, lo, hi = agg(name, key)
    return f"{fmt.format(med)} ({fmt.format(lo)}-{fmt.format(hi)})"

lines = [f"# Benchmark run {os.path.basename(out)}", "",
         f"wrk -t1 -c{conns} -d{duration:.0f}s --latency, rounds interleaved; load on core 0, servers on core 1 "
         f"({cores} cores). Medians (min-max) over {len(next(iter(runs.values())))} rounds.", "",
         "| case | what | req/s | p50 ms | p90 ms | p99 ms | server core µs/req | proxy process µs/req | non-2xx |",
         "|---|---|---|---|---|---|---|---|---|"]
for n in ORDER:
    if n not in runs:
        continue
    lines.append(f"| {n} | {DESC[n]} | {cell(n, 'rps')} | {cell(n, 'p50', '{:.2f}')} | {cell(n, 'p90', '{:.2f}')} | "
                 f"{cell(n, 'p99', '{:.2f}')} | {cell(n, 'core_us', '{:.1f}')} | {cell(n, 'proc_us', '{:.1f}')} | "
                 f"{cell(n, 'non2xx')} |")
med = lambda n, k: agg(n, k)[0]
lines += ["", "| pair | req/s ratio | p99 difference (ms) | proxy µs/req (Tollgate vs nginx) |", "|---|---|---|---|"]
for a, b in (("T1", "N1"), ("T2", "N1"), ("T0", "N0"), ("T4", "N3"), ("T5", "N3"), ("T1m", "N1m"), ("T2K", "T2B"),
             ("T1s", "N1s"), ("T1s", "N1s3"), ("T1sN", "N1sN"), ("T1sN", "N1sN3"), ("T1s", "T1"), ("N1s", "N1")):
    if a in runs and b in runs:
        lines.append(f"| {a}/{b} | {med(a, 'rps') / med(b, 'rps'):.3f} | {med(a, 'p99') - med(b, 'p99'):+.2f} | "
                     f"{med(a, 'proc_us'):.1f} vs {med(b, 'proc_us'):.1f} |")
# Upstream TLS connections per case (each one handshake), from the TLS upstreams' access logs.
resumed = {}
for name in os.listdir(os.path.join(out, "raw")):
    m = re.match(r"(\w+)-round(\d+)\.resumed$", name)
    if m:
        f = open(os.path.join(out, "raw", name)).read().split()
        resumed.setdefault(m.group(1), []).append((int(f[0]), int(f[1]), f[2:]))
if resumed:
    lines += ["", "Upstream TLS connections (each one handshake; with keepalive_requests 1 one per request) as the upstream's",
              "access log shows them ($connection, $ssl_session_reused): resumed ones counted after each round's first,",
              "summed over the rounds:", "",
              "| case | requests | upstream connections | per request | resumed | ratio | protocols |", "|---|---|---|---|---|---|---|"]
    for n in ("N1s", "N1s3", "T1s", "N1sN", "N1sN3", "T1sN"):
        if n in resumed:
            hs = sum(x[0] for x in resumed[n]); rs = sum(x[1] for x in resumed[n]); rest = sum(x[0] - 1 for x in resumed[n])
            reqs = sum(r["requests"] for r in runs[n].values())
            protos = collections.Counter()
            for x in resumed[n]:
                for p in x[2]:
                    k, v = p.rsplit(":", 1)
                    protos[k] += int(v)
            lines.append(f"| {n} | {reqs} | {hs} | {hs / max(reqs, 1):.3f} | {rs} | {100 * rs / max(rest, 1):.2f}% | "
                         f"{' '.join(f'{k} {v}' for k, v in sorted(protos.items()))} |")
hs_runs = {}
for name in os.listdir(os.path.join(out, "raw")):
    m = re.match(r"hs-(new|reuse|new12|reuse12)-round(\d+)\.tsv$", name)
    if m:
        f = open(os.path.join(out, "raw", name)).read().split()
        hs_runs.setdefault(m.group(1), []).append(
            {"n": int(f[0]), "r": int(f[1]), "wall": float(f[2]), "server_s": int(f[3]) * TICK_US / 1e6,
             "client_s": int(f[4]) * TICK_US / 1e6, "protos": f[5:]})
if hs_runs:
    def stat(vals, fmt="{:.0f}"):
        return f"{fmt.format(statistics.median(vals))} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"
    lines += ["", "TLS handshakes (openssl s_time -www / against the nginx TLS upstream, keepalive_requests 1; s_time on",
              "the load core, nginx on the server core; per core = handshakes / that side's CPU seconds, user + system,",
              "TCP included). Medians (min-max) over the rounds:", "",
              "| mode | handshakes/s (wall) | client handshakes per CPU-second | server (nginx) handshakes per CPU-second | resumed | protocols |",
              "|---|---|---|---|---|---|"]
    label = {"new": "full (-new), TLS 1.3", "reuse": "resumed (-reuse), TLS 1.3",
             "new12": "full (-new -tls1_2)", "reuse12": "resumed (-reuse -tls1_2)"}
    for mode in ("new", "reuse", "new12", "reuse12"):
        if mode not in hs_runs:
            continue
        rs = hs_runs[mode]
        lines.append(f"| {label[mode]} | {stat([r['n'] / r['wall'] for r in rs])} | "
                     f"{stat([r['n'] / r['client_s'] for r in rs if r['client_s'] > 0])} | "
                     f"{stat([r['n'] / r['server_s'] for r in rs if r['server_s'] > 0])} | "
                     f"{sum(r['r'] for r in rs)}/{sum(r['n'] for r in rs)} | {' '.join(sorted({p.rsplit(':', 1)[0] for r in rs for p in r['protos']}))} |")
lines += ["", "Binding limit (1000/s): admitted = 2xx responses / duration.", "",
          "| case | admitted/s | 2xx | 429 or 503 | errors | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
for n in ("N2", "T3"):
    if n in runs:
        adm = [(r["requests"] - r["non2xx"]) / duration for r in runs[n].values()]
        lines.append(f"| {n} | {statistics.median(adm):.1f} ({min(adm):.1f}-{max(adm):.1f}) | "
                     f"{statistics.median([r['requests'] - r['non2xx'] for r in runs[n].values()]):.0f} | "
                     f"{cell(n, 'non2xx')} | {cell(n, 'errors')} | {cell(n, 'p50', '{:.2f}')} | {cell(n, 'p99', '{:.2f}')} |")

def redis_rates(name):
    path = os.path.join(out, "raw", name)
    if not os.path.exists(path):
        return []
    return [float(x) for x in re.findall(r"([\d.]+) requests per second", open(path).read())]
ev, evp, ping = redis_rates("redis-evalsha.txt"), redis_rates("redis-evalsha-p16.txt"), redis_rates("redis-ping.txt")
ev_min, ev_lean = redis_rates("redis-evalsha-minimal.txt"), redis_rates("redis-evalsha-lean.txt")
if ev:
    t2 = med("T2", "rps") if "T2" in runs else 0
    lines += ["", "| Redis ceiling (redis-benchmark, same server, -c " + conns + ") | ops/s (median) |", "|---|---|"]
    if ev_min:
        lines.append(f"| EVALSHA of a minimal token bucket (bench/minimal_bucket.lua) | {statistics.median(ev_min):.0f} |")
    if ev_lean:
        lines.append(f"| EVALSHA Tollgate's lean script, one decision a call | {statistics.median(ev_lean):.0f} |")
    lines += [f"| EVALSHA Tollgate's general acquire script | {statistics.median(ev):.0f} |",
              f"| EVALSHA general script, 16-deep pipelining | {statistics.median(evp):.0f} |",
              f"| PING | {statistics.median(ping):.0f} |",
              f"| Tollgate T2 decisions/s (coalesced lean calls) | {t2:.0f} ("
              + (f"{100 * t2 / statistics.median(ev_min):.0f}% of the minimal script's EVALSHA, " if ev_min else "")
              + f"{100 * t2 / statistics.median(ev):.0f}% of the general script's) |"]
    if "T1" in runs and "T2" in runs:
        lines.append(f"| T2/T1 (Redis store against in-process, req/s) | {t2 / med('T1', 'rps'):.3f} |")
hold = os.path.join(out, "raw", "hold.json")
if os.path.exists(hold):
    h = json.load(open(hold))
    answers = f"after half the clients left, the rest were answered {h['answers']}; " if "answers" in h else ""
    lines += ["", f"Holding requests on one bucket (bench/hold.sh: rule 200/s, cache 60 s): {h['requests']} sent, "
              f"{h['held']} held at the sample (tollgate_held_requests); RSS base {h['rss_base_kib']} KiB, "
              f"with the connections open {h['rss_connections_kib']} KiB, with the requests held {h['rss_held_kib']} KiB "
              f"-> {h['bytes_per_held_request']} bytes per held request ({h['bytes_per_held_request_with_connection']} "
              f"with its connection); CPU while holding {h['cpu_cores_while_holding']:.3f} cores; {answers}"
              f"RSS afterwards {h['rss_after_kib']} KiB."]
micro = os.path.join(out, "raw", "micro.txt")
if os.path.exists(micro):
    lines += ["", "```", *[l for l in open(micro).read().splitlines()
                           if l.startswith("BM_") and ("_median" in l or "IdleBuckets" in l or "ClientKeys" in l)], "```"]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
# The same medians (min, max) for bench/report.py.
figures = {"cases": {n: {k: list(agg(n, k)) for k in ("rps", "p50", "p99", "proc_us", "core_us", "non2xx", "errors")}
                     for n in runs},
           "rounds": len(next(iter(runs.values()))), "duration_s": duration, "conns": int(conns),
           "redis_ceiling": {k: statistics.median(v) for k, v in (("minimal", ev_min), ("lean", ev_lean), ("general", ev),
                                                                  ("ping", ping)) if v}}
for mode, rs in hs_runs.items():
    figures.setdefault("handshakes", {})[mode] = {
        "wall": statistics.median([r["n"] / r["wall"] for r in rs]),
        "client_cpu": statistics.median([r["n"] / r["client_s"] for r in rs if r["client_s"] > 0] or [0]),
        "server_cpu": statistics.median([r["n"] / r["server_s"] for r in rs if r["server_s"] > 0] or [0])}
for n in ("N2", "T3"):
    if n in runs:
        figures["cases"][n]["admitted_per_s"] = statistics.median(
            [(r["requests"] - r["non2xx"]) / duration for r in runs[n].values()])
json.dump(figures, open(os.path.join(out, "summary.json"), "w"), indent=1)

# Latency percentiles per case (medians), one PNG.
dat = os.path.join(out, "latency.dat")
with open(dat, "w") as f:
    for n in ORDER:
        if n in runs:
            f.write(f"{n} {med(n, 'p50'):.3f} {med(n, 'p90'):.3f} {med(n, 'p99'):.3f}\n")
subprocess.run(["gnuplot", "-e", f"""
set terminal png size 1000,500; set output '{out}/latency.png';
set title 'Latency percentiles per case (median of rounds), wrk -c{conns}'; set ylabel 'ms (log scale)';
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1;
set key top left; set grid ytics; set xtics rotate by -30; set logscale y; set yrange [0.1:*];
plot '{dat}' using 2:xtic(1) title 'p50', '' using 3 title 'p90', '' using 4 title 'p99'"""], check=False)
print("\n".join(lines))
