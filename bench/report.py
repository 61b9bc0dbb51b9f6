#!/usr/bin/env python3
"""The current-figures table from one bench/report.sh run.

    python3 bench/report.py RESULTS_DIR [--apply REPO_ROOT]

Reads the raw results of RESULTS_DIR, writes RESULTS_DIR/report.md (the table) and
RESULTS_DIR/figures.json (each figure by id: its value, its text as the docs print it, its unit).
With --apply it also writes, under REPO_ROOT: the block between `<!-- report:begin -->` and
`<!-- report:end -->` in docs/BENCHMARKS.md, docs/figures.json, and the text of every
`<!-- fig:ID -->...<!-- /fig -->` span in README.md and docs/*.md. A span whose id the run did
not measure is an error: the docs may quote only what the report measured. Standard library only.
"""
import glob
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_adaptive  # noqa: E402  (the adaptive runs' per-phase figures)

FIG = re.compile(r"<!-- fig:([A-Za-z0-9_.-]+) -->(.*?)<!-- /fig -->", re.S)
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


class Figures:
    def __init__(self):
        self.items = {}  # id -> {"value", "text", "unit"}

    def add(self, fid, value, text, unit=""):
        self.items[fid] = {"value": value, "text": text, "unit": unit}
        return text

    def __contains__(self, fid):
        return fid in self.items

    def v(self, fid):
        return self.items[fid]["value"]

    def t(self, fid):
        return self.items[fid]["text"]


def thousands(x):
    return f"{x:,.0f}"


def load_json(path):
    with open(path) as f:
        return json.load(f)


def steps(d):
    try:
        return ", ".join(f"{f[0]} {f[2][-5:]} ({f[3]})" for f in (line.split() for line in open(os.path.join(d, "steps.txt")))
                         if len(f) == 4)
    except OSError:
        return "not recorded"


def read_machine(d):
    out = {}
    for line in open(os.path.join(d, "machine.txt")):
        k, _, v = line.rstrip("\n").partition("=")
        out[k] = v
    return out


# ---- the measurements ----------------------------------------------------------------------------

IR_CASES = {
    "T0": "Tollgate, no rule matches",
    "T1": "Tollgate, a never-binding rule, in-process store",
    "T1R": "Tollgate, a rule that refuses every request but the first: per 429",
    "T1P": "T1 with priority classes (the request a lower class, 30% of the burst kept back)",
    "T1M": "T1 with an srTCM meter in place of the bucket (never red)",
    "T1A": "T1 with a supplier credential (a static `X-Api-Key` field)",
    "T1H": "T1 to a several-host upstream (three addresses, least outstanding)",
    "T1I": "T1 with the client's own `X-Request-Id` on each request (checked, kept)",
    "T2": "Tollgate, a never-binding rule, Redis store, 8 clients on one bucket (the gateway only)",
    "T2C1": "T2 with one client (nothing to coalesce)",
    "T2B": "T2 over 100 never-binding rules, requests spread round-robin",
    "T2K": "T2B on a 3-primary Redis Cluster (the gateway only)",
    "N0": "nginx reverse proxy (keep-alive pool), no limit",
    "N1": "nginx + `limit_req` that never binds",
    "T1s": "T1 to an HTTPS upstream (TLS 1.3, kept alive)",
    "N1s": "N1 to that upstream (nginx's default: TLS 1.2)",
    "N1s3": "N1s offering TLS 1.3",
    "T1sN": "T1s, the upstream closing after each request: a handshake per request",
    "N1sN": "N1s, a handshake per request (TLS 1.2)",
    "N1sN3": "N1sN offering TLS 1.3",
    "RT": "Redis per Tollgate decision, T2's traffic (~4 decisions a call)",
    "RT1": "Redis per decision, T2C1's traffic (one a call)",
    "RTB": "Redis per decision, T2B's traffic (100 buckets)",
    "RK1": "RTB counted on the request path only",
    "RKB": "a 3-primary cluster's request paths summed, per decision (T2B's traffic)",
    "RS": "Redis per call of the general script (channel buckets, quotas, maxShare), one bucket",
    "RL": "Redis per call of the lean script (one bucket, nothing else)",
    "RA": "Redis per call of the general script, an adaptive bucket never throttled",
    "RF": "RL with a fractional remaining count",
    "RM": "Redis per call of a minimal token bucket (`TIME`, `HMGET`, `HSET`, `PEXPIRE`), for reference",
    "RP": "Redis per PING: the fixed cost of a call",
}


# T1 with one newer feature on, each: what that feature costs a request when a rule uses it.
FEATURE_CASES = ("T1P", "T1M", "T1A", "T1H", "T1I")


def instructions(d, F):
    main = load_json(os.path.join(d, "instructions.json"))
    runs = [main] + [load_json(p) for p in sorted(glob.glob(os.path.join(d, "instructions-repeat*.json")))]
    for line in open(os.path.join(d, "script-cost.txt")):
        m = re.match(r"(R[A-Z]+) (\d+) ", line)
        if m:
            main[m.group(1)] = {"ir": float(m.group(2)), "note": ""}
    for case in IR_CASES:
        if case in main:
            F.add(f"ir.{case}", main[case]["ir"], thousands(main[case]["ir"]), "Ir")
            if main[case]["note"]:
                F.add(f"ir.{case}.note", main[case]["note"], main[case]["note"])
    for case in ("T0", "T1", "N1"):
        vals = [r[case]["ir"] for r in runs if case in r]
        if len(vals) > 1:
            F.add(f"ir.{case}.runs", vals, ", ".join(thousands(v) for v in vals), "Ir")
            F.add(f"ir.{case}.spread", 100 * (max(vals) - min(vals)) / min(vals),
                  f"{100 * (max(vals) - min(vals)) / min(vals):.2f}%", "%")
    ratio = lambda a, b: F.add(f"ratio.{a}_{b}", F.v(f"ir.{a}") / F.v(f"ir.{b}"),
                               f"{F.v(f'ir.{a}') / F.v(f'ir.{b}'):.2f}") if f"ir.{a}" in F and f"ir.{b}" in F else None
    features = tuple((case, "T1") for case in FEATURE_CASES)  # each one's cost beside T1's
    for a, b in (("T1", "N1"), ("T0", "N0"), ("T2", "T1"), ("T2", "N1"), ("T1R", "T1")) + features + (("T2K", "T2B"), ("RKB", "RK1"),
                 ("T1s", "N1s"), ("T1s", "N1s3"), ("T1sN", "N1sN"), ("T1sN", "N1sN3"), ("RL", "RM"), ("RT1", "RM"),
                 ("RA", "RS"), ("RT", "RM")):
        ratio(a, b)
    for a, b in (("T1", "T0"), ("N1", "N0"), ("T1s", "T1"), ("N1s", "N1")) + features:
        if f"ir.{a}" in F and f"ir.{b}" in F:
            F.add(f"diff.{a}_{b}", F.v(f"ir.{a}") - F.v(f"ir.{b}"), thousands(F.v(f"ir.{a}") - F.v(f"ir.{b}")), "Ir")


def micro(d, F):
    runs, kb = {}, {}
    for b in load_json(os.path.join(d, "micro.json"))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            runs[b["run_name"]] = b["real_time"] if "real_time" in b["run_name"] else b["cpu_time"]
            if "KB" in b:
                kb[b["run_name"]] = b["KB"]
    for fid, name in (("overview", "BM_AdminOverview20k"), ("history", "BM_AdminHistory20k"),
                      ("history_one", "BM_AdminHistoryOneBucket20k")):
        if name in runs:  # milliseconds (the benchmarks' unit)
            F.add(f"micro.admin_{fid}_ms", runs[name], f"{runs[name]:.1f} ms", "ms")
            F.add(f"micro.admin_{fid}_kb", kb[name], f"{kb[name]:.0f} KB", "KB")
    def ns(fid, name, label):
        if name in runs:
            F.add(fid, runs[name], f"{runs[name]:.0f} ns", "ns")
    ns("micro.arithmetic", "BM_TryAcquireArithmetic", "")
    ns("micro.decision", "BM_LocalStoreDecision/real_time/threads:1", "")
    ns("micro.decision_2t", "BM_LocalStoreDecision/real_time/threads:2", "")
    ns("micro.quotas", "BM_LocalStoreDecisionWithQuotas/real_time/threads:1", "")
    ns("micro.quotas_2t", "BM_LocalStoreDecisionWithQuotas/real_time/threads:2", "")
    for n in (10, 1000, 100000):
        ns(f"micro.suffix_{n}", f"BM_SuffixLookup/{n}", "")
    store = load_json(os.path.join(d, "micro-IdleBucketsMemory.json"))["benchmarks"][0]
    F.add("micro.idle_buckets_store", store["store_MiB"], f"{store['store_MiB']:.1f} MiB", "MiB")
    F.add("micro.idle_bucket_store_bytes", store["bytes_per_bucket"], f"{store['bytes_per_bucket']:.0f} B", "B")
    for cap in (10000, 100000):
        k = load_json(os.path.join(d, f"micro-ClientKeysMemory{cap}.json"))["benchmarks"][0]
        F.add(f"micro.client_keys_{cap}", k["client_keys"], thousands(k["client_keys"]))
        F.add(f"micro.client_keys_{cap}_mib", k["store_MiB"], f"{k['store_MiB']:.1f} MiB", "MiB")


def memory(d, F):
    b = load_json(os.path.join(d, "buckets.json"))
    F.add("mem.keyed_bucket", b["bytes_per_keyed_bucket"], f"{b['bytes_per_keyed_bucket']:,} B", "B")
    F.add("mem.keyed_100k", b["keyed_buckets_mib"], f"{b['keyed_buckets_mib']:.1f} MiB", "MiB")
    F.add("mem.rule_idle", b["bytes_per_rule_loaded"], f"{b['bytes_per_rule_loaded'] / 1024:.1f} KiB", "B")
    F.add("mem.rule_busy", b["bytes_per_rule_touched"], f"{b['bytes_per_rule_touched'] / 1024:.1f} KiB", "B")
    F.add("mem.rules_100k_idle", (b["rss_rules_loaded_kib"] - b["rss_base_kib"]) / 1024,
          f"{(b['rss_rules_loaded_kib'] - b['rss_base_kib']) / 1024:.0f} MiB", "MiB")
    F.add("cpu.idle_100k_rules", b["idle_cpu_cores_with_rules"], f"{b['idle_cpu_cores_with_rules']:.3f} cores", "cores")
    holds = [load_json(p) for p in sorted(glob.glob(os.path.join(d, "hold-[0-9].json")))]
    span = lambda key, fmt: (min(h[key] for h in holds), max(h[key] for h in holds),
                             fmt(min(h[key] for h in holds)) + ("" if min(h[key] for h in holds) == max(h[key] for h in holds)
                                                                 else "-" + fmt(max(h[key] for h in holds))))
    lo, hi, text = span("bytes_per_held_request", lambda x: f"{x:,}")
    F.add("mem.held", hi, text + " B", "B")
    lo, hi, text = span("bytes_per_held_request_with_connection", lambda x: f"{x:,}")
    F.add("mem.held_with_connection", hi, text + " B", "B")
    lo, hi, text = span("held", lambda x: f"{x:,}")
    F.add("mem.held_count", lo, text)
    F.add("mem.hold_sent", holds[0]["requests"], f"{holds[0]['requests']:,}")
    lo, hi, text = span("cpu_cores_while_holding", lambda x: f"{x:.3f}")
    F.add("cpu.holding", hi, text + " cores", "cores")
    pad = load_json(os.path.join(d, "hold-pad.json"))
    F.add("mem.held_pad1500", pad["bytes_per_held_request"], f"{pad['bytes_per_held_request']:,} B", "B")


def tls_resumption(d, F):
    for line in open(os.path.join(d, "tls-resumption.txt")):
        m = re.match(r"(tollgate|nginx-default|nginx-tls1\.3)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)%", line)
        if m:
            who = {"tollgate": "tollgate", "nginx-default": "nginx12", "nginx-tls1.3": "nginx13"}[m.group(1)]
            F.add(f"tls.resumed.{who}.{m.group(2)}", float(m.group(5)), f"{float(m.group(5)):.2f}%", "%")


def warm_pools(d, F):
    for line in open(os.path.join(d, "warm-pools.txt")):
        f = line.split()
        if len(f) == 7 and f[0].isdigit():
            n = f[0]
            for k, v in zip(("p50", "p90", "p99"), f[2:5]):
                F.add(f"warm.{n}.{k}", float(v), f"{float(v):.1f}", "ms")
            F.add(f"warm.{n}.connections", int(f[6]), f[6])


def adaptive(d, F):
    for run, key in (("local-adaptive", "one"), ("redis-fleet-adaptive", "fleet"), ("local-control", "off")):
        p = os.path.join(d, "adaptive", run + ".csv")
        if not os.path.exists(p):
            continue
        rows = plot_adaptive.load(p)
        for ph in plot_adaptive.phase_figures(rows):
            a = int(ph["allowance"])
            F.add(f"adaptive.{key}.{a}.refused", ph["refused_pct"], f"{ph['refused_pct']:.2f}%", "%")
            F.add(f"adaptive.{key}.{a}.used", ph["used_pct"], f"{ph['used_pct']:.1f}%", "%")
        rec = sum(r["received"] for r in rows)
        thr = sum(r["throttled"] for r in rows)
        F.add(f"adaptive.{key}.whole", 100 * thr / rec if rec else 0, f"{thr:.0f} of {rec:,.0f}", "")
    used = [F.v(k) for k in F.items if re.match(r"adaptive\.(one|fleet)\.\d+\.used$", k)]
    if used:
        F.add("adaptive.used_range", [min(used), max(used)], f"{min(used):.1f}-{max(used):.1f}%", "%")
    # The supplier kinds (window-bare-429-fleet, ...): the allowance drops from 20 to 12/s, then rises to 30/s.
    for p in sorted(glob.glob(os.path.join(d, "adaptive", "*.csv"))):
        run = os.path.basename(p)[: -len(".csv")]
        kind = plot_adaptive.supplier_kind(run)
        if not kind or kind["late"]:  # the rise just after a refusal: docs/adaptive-and-deadlines.md
            continue
        for ph in plot_adaptive.phase_figures(plot_adaptive.load(p)):
            a = int(ph["allowance"])
            F.add(f"adaptive.kind.{run}.{a}.refused", ph["refused_pct"], f"{ph['refused_pct']:.2f}%", "%")
            F.add(f"adaptive.kind.{run}.{a}.used", ph["used_pct"], f"{ph['used_pct']:.1f}%", "%")


def wall(d, F):
    s = load_json(os.path.join(d, "wall", "summary.json"))
    cases = s["cases"]
    F.add("wall.rounds", s["rounds"], f"{s['rounds']} rounds of {s['duration_s']:.0f} s, wrk -c{s['conns']}")
    for n, c in cases.items():
        med, lo, hi = c["rps"]
        F.add(f"wall.{n}.rps", med, f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})", "req/s")
        F.add(f"wall.{n}.p99", c["p99"][0], f"{c['p99'][0]:.2f}", "ms")
        F.add(f"wall.{n}.proc_us", c["proc_us"][0], f"{c['proc_us'][0]:.1f}", "µs")
        if "admitted_per_s" in c:
            F.add(f"wall.{n}.admitted", c["admitted_per_s"], f"{c['admitted_per_s']:.1f}/s", "/s")
            F.add(f"wall.{n}.errors", c["errors"][1], f"{c['errors'][2]:.0f}")
    for a, b in (("T1", "N1"), ("T0", "N0"), ("T2", "T1"), ("T2", "N1"), ("T1s", "N1s"), ("T1s", "N1s3"),
                 ("T1sN", "N1sN"), ("T1sN", "N1sN3")):
        if a in cases and b in cases:
            r = cases[a]["rps"][0] / cases[b]["rps"][0]
            F.add(f"wall.ratio.{a}_{b}", r, f"{r:.2f}")
            p = cases[a]["p99"][0] - cases[b]["p99"][0]
            F.add(f"wall.p99diff.{a}_{b}", p, f"{p:+.2f} ms", "ms")
    for k, v in s.get("redis_ceiling", {}).items():
        F.add(f"wall.redis.{k}", v, f"{v:,.0f}", "calls/s")
    if "T2" in cases and "minimal" in s.get("redis_ceiling", {}):
        t2 = cases["T2"]["rps"][0]
        for k in ("minimal", "lean"):
            if k in s["redis_ceiling"]:
                F.add(f"wall.T2_of_{k}", 100 * t2 / s["redis_ceiling"][k], f"{100 * t2 / s['redis_ceiling'][k]:.0f}%", "%")
    for mode, h in s.get("handshakes", {}).items():
        for k in ("wall", "client_cpu", "server_cpu"):
            F.add(f"hs.{mode}.{k}", h[k], f"{h[k]:,.0f}")


# ---- targets -------------------------------------------------------------------------------------

def targets(F):
    """(target, the current figures, status) for each target the benchmarks set."""
    rows = []

    def row(target, ids, current, ok, margin=""):
        if all(i in F for i in ids):
            rows.append((target, current(), ("met" if ok() else "**missed**") + (f" ({margin()})" if margin else "")))
        else:
            rows.append((target, "not measured in this run", "unknown"))

    row("an in-process decision ≤ 100 ns", ["micro.decision"], lambda: F.t("micro.decision"),
        lambda: F.v("micro.decision") <= 100, lambda: f"{100 - F.v('micro.decision'):+.0f} ns to spare")
    row("each held request ≤ 4 KiB of RSS (its connection aside)", ["mem.held"],
        lambda: f"{F.t('mem.held')} at {F.t('mem.held_count')} held; {F.t('mem.held_pad1500')} with 1.5 KiB longer heads",
        lambda: F.v("mem.held") <= 4096, lambda: f"{4096 - F.v('mem.held'):+,.0f} B to spare")
    row("the console's answers at 20,000 rules ≤ 200 KB and ≤ 50 ms", ["micro.admin_overview_ms", "micro.admin_history_ms"],
        lambda: f"/admin/overview {F.t('micro.admin_overview_kb')} in {F.t('micro.admin_overview_ms')}, "
                f"/admin/history {F.t('micro.admin_history_kb')} in {F.t('micro.admin_history_ms')}",
        lambda: max(F.v("micro.admin_overview_kb"), F.v("micro.admin_history_kb")) <= 200
        and max(F.v("micro.admin_overview_ms"), F.v("micro.admin_history_ms")) <= 50)
    row("100,000 idle keyed buckets ≤ 50 MB, in the gateway", ["mem.keyed_100k"],
        lambda: f"{F.t('mem.keyed_100k')} ({F.t('mem.keyed_bucket')} a bucket)",
        lambda: F.v("mem.keyed_100k") * 1.048576 <= 50, lambda: f"{50 - F.v('mem.keyed_100k') * 1.048576:+.1f} MB to spare")
    row("client keys held within the configured cap", ["micro.client_keys_10000"],
        lambda: f"{F.t('micro.client_keys_10000')} entries under a cap of 10,000",
        lambda: F.v("micro.client_keys_10000") <= 10000)
    row("CPU while holding requests ≤ 0.05 cores", ["cpu.holding"], lambda: F.t("cpu.holding"),
        lambda: F.v("cpu.holding") <= 0.05)
    row("a binding limit (1000/s, burst 200) admits burst + rate × T, within 1%, and nothing fails",
        ["wall.T3.admitted", "wall.rounds"], lambda: f"{F.t('wall.T3.admitted')} against "
        f"{1000 + 200 / 5:.0f}/s for 5 s runs; errors {F.t('wall.T3.errors')}",
        lambda: abs(F.v("wall.T3.admitted") / (1000 + 200 / 5) - 1) <= 0.01 and F.v("wall.T3.errors") == 0)
    row("instructions per request: T1 ≤ N1", ["ir.T1", "ir.N1"], lambda: f"{F.t('ir.T1')} against {F.t('ir.N1')} ({F.t('ratio.T1_N1')})",
        lambda: F.v("ir.T1") <= F.v("ir.N1"), lambda: f"{F.v('ir.N1') - F.v('ir.T1'):,.0f} to spare")
    row("off means free: T1 (a rule using none of the newer features) ≤ 18,500", ["ir.T1"], lambda: F.t("ir.T1"),
        lambda: F.v("ir.T1") <= 18500, lambda: f"{18500 - F.v('ir.T1'):,.0f} to spare")
    for case, what in (("T1P", "priority classes"), ("T1M", "a meter")):
        row(f"a decision with {what} within 10% of today's rule step ({case} ≤ 1.1 × T1)", [f"ir.{case}", "ir.T1"],
            lambda case=case: f"{F.t(f'ir.{case}')} against {F.t('ir.T1')} ({F.t(f'ratio.{case}_T1')})",
            lambda case=case: F.v(f"ir.{case}") <= 1.1 * F.v("ir.T1"),
            lambda case=case: f"{1.1 * F.v('ir.T1') - F.v(f'ir.{case}'):,.0f} to spare")
    row("instructions per request: T0 ≤ N0", ["ir.T0", "ir.N0"], lambda: f"{F.t('ir.T0')} against {F.t('ir.N0')} ({F.t('ratio.T0_N0')})",
        lambda: F.v("ir.T0") <= F.v("ir.N0"), lambda: f"{F.v('ir.N0') - F.v('ir.T0'):,.0f} to spare")
    row("a never-binding rule's own cost (T1 - T0) ≤ nginx's limiter's (N1 - N0)", ["diff.T1_T0", "diff.N1_N0"],
        lambda: f"{F.t('diff.T1_T0')} against {F.t('diff.N1_N0')} Ir", lambda: F.v("diff.T1_T0") <= F.v("diff.N1_N0"),
        lambda: f"by {F.v('diff.T1_T0') - F.v('diff.N1_N0'):,.0f}" if F.v("diff.T1_T0") > F.v("diff.N1_N0") else "")
    row("T1/N1 req/s ≥ 1.0", ["wall.ratio.T1_N1"], lambda: f"{F.t('wall.ratio.T1_N1')} (p99 {F.t('wall.p99diff.T1_N1')})",
        lambda: F.v("wall.ratio.T1_N1") >= 1.0)
    row("T0/N0 req/s ≥ 1.0", ["wall.ratio.T0_N0"], lambda: F.t("wall.ratio.T0_N0"), lambda: F.v("wall.ratio.T0_N0") >= 1.0)
    row("proxy CPU per request ≤ nginx's (T1 against N1)", ["wall.T1.proc_us", "wall.N1.proc_us"],
        lambda: f"{F.t('wall.T1.proc_us')} against {F.t('wall.N1.proc_us')} µs",
        lambda: F.v("wall.T1.proc_us") <= F.v("wall.N1.proc_us"))
    row("T2 decisions/s ≥ 100% of the minimal script's EVALSHA rate", ["wall.T2_of_minimal"],
        lambda: f"{F.t('wall.T2_of_minimal')} ({F.t('wall.T2.rps')} against {F.t('wall.redis.minimal')} calls/s)",
        lambda: F.v("wall.T2_of_minimal") >= 100)
    row("Redis per decision, 8 clients on one bucket ≤ half the minimal script's", ["ir.RT", "ir.RM"],
        lambda: f"RT {F.t('ir.RT')} against RM / 2 = {F.v('ir.RM') / 2:,.0f}", lambda: F.v("ir.RT") <= F.v("ir.RM") / 2)
    row("Redis per decision, one client ≤ the minimal script's", ["ir.RL", "ir.RM"],
        lambda: f"RL {F.t('ir.RL')}, RT1 {F.t('ir.RT1')} against RM {F.t('ir.RM')} ({F.t('ratio.RL_RM')}x)",
        lambda: F.v("ir.RL") <= F.v("ir.RM"))
    row("the gateway on Redis ≤ 1.2x in-process, per request (T2/T1)", ["ratio.T2_T1"],
        lambda: f"{F.t('ir.T2')} against {F.t('ir.T1')}: {F.t('ratio.T2_T1')}x", lambda: F.v("ratio.T2_T1") <= 1.2)
    row("T2/T1 req/s ≥ 0.8", ["wall.ratio.T2_T1"], lambda: F.t("wall.ratio.T2_T1"), lambda: F.v("wall.ratio.T2_T1") >= 0.8)
    row("T1s ≤ N1s in instructions per request", ["ir.T1s", "ir.N1s"],
        lambda: f"{F.t('ir.T1s')} against {F.t('ir.N1s')} ({F.t('ratio.T1s_N1s')}); N1s3 {F.t('ir.N1s3')}",
        lambda: F.v("ir.T1s") <= F.v("ir.N1s"))
    row("T1sN ≤ N1sN in instructions per request", ["ir.T1sN", "ir.N1sN"],
        lambda: f"{F.t('ir.T1sN')} against {F.t('ir.N1sN')} (TLS 1.2, {F.t('ratio.T1sN_N1sN')}x); "
                f"against N1sN3 (TLS 1.3) {F.t('ir.N1sN3')} ({F.t('ratio.T1sN_N1sN3')}x)",
        lambda: F.v("ir.T1sN") <= F.v("ir.N1sN"))
    for c in (8, 64):
        row(f"TLS resumption with {c} clients ≥ nginx's", [f"tls.resumed.tollgate.{c}", f"tls.resumed.nginx13.{c}"],
            lambda c=c: f"{F.t(f'tls.resumed.tollgate.{c}')} against {F.t(f'tls.resumed.nginx12.{c}')} (TLS 1.2) and "
                        f"{F.t(f'tls.resumed.nginx13.{c}')} (TLS 1.3)",
            lambda c=c: F.v(f"tls.resumed.tollgate.{c}") >= F.v(f"tls.resumed.nginx13.{c}"))
    ph = [k[: -len(".refused")] for k in F.items if re.match(r"adaptive\.(one|fleet)\.\d+\.refused$", k)]
    if ph:
        row("adaptive: at most 3% refused by the supplier and at least 90% of its allowance used, per phase after 4 s",
            [p + ".refused" for p in ph],
            lambda: f"refused {min(F.v(p + '.refused') for p in ph):.2f}-{max(F.v(p + '.refused') for p in ph):.2f}%, "
                    f"used {min(F.v(p + '.used') for p in ph):.1f}-{max(F.v(p + '.used') for p in ph):.1f}%",
            lambda: all(F.v(p + ".refused") <= 3 and F.v(p + ".used") >= 90 for p in ph))
    kp = [k[: -len(".refused")] for k in F.items if re.match(r"adaptive\.kind\.[^.]+\.\d+\.refused$", k)]
    if kp:
        bad = [p for p in kp if not (F.v(p + ".refused") <= 3 and F.v(p + ".used") >= 90)]
        row("adaptive, supplier kinds (windows or bucket; Retry-After, RateLimit or bare; 429 or 503; one gateway or "
            "three), allowance 20 → 12 → 30/s: at most 3% refused and at least 90% of the allowance used, per phase "
            "after 4 s",
            [p + ".refused" for p in kp],
            lambda: f"refused {min(F.v(p + '.refused') for p in kp):.2f}-{max(F.v(p + '.refused') for p in kp):.2f}%, "
                    f"used {min(F.v(p + '.used') for p in kp):.1f}-{max(F.v(p + '.used') for p in kp):.1f}%"
                    + ("; outside: " + "; ".join(
                        run + " at " + ", ".join(p.split(".")[3] for p in bad if p.split(".")[2] == run) + "/s"
                        for run in dict.fromkeys(p.split(".")[2] for p in bad)) if bad else ""),
            lambda: not bad)
    return rows


# ---- the table -----------------------------------------------------------------------------------

def table(F, m, d):
    c = m.get("commit", "?") + (f" (work tree differs: {m['dirty'].strip()})" if m.get("dirty", "").strip() else "")
    L = [BEGIN,
         f"Measured by `bench/report.sh` at **{c}**, {m.get('started', '?')} to {m.get('finished', '?')}, on "
         f"{m.get('cores', '?')} cores ({m.get('cpu', '?')}), {m.get('memory', '?')}, {m.get('os', '?')}, "
         f"{m.get('compiler', '?')}. Each step's start (UTC) and the 1-minute load average then: {steps(d)}. "
         f"Results folder: `bench/results/{os.path.basename(d)}` (not kept in the repository). Nothing below is from "
         "another run; docs/figures.json holds the same figures for the docs check.",
         "", "### Instructions per request (callgrind)", "",
         "`bench/instructions.sh` (one nginx `return 200` upstream, `ab -k -c 8`, the slope between 2,000 and 6,000 "
         "requests, each in a fresh process; Redis cases: redis-server under callgrind). The script-cost cases RA and RF "
         "come from `bench/redis_script_cost.sh`.", "",
         "| case | what | Ir |", "|---|---|---|"]
    for case, what in IR_CASES.items():
        if f"ir.{case}" in F:
            note = f" [{F.t(f'ir.{case}.note')}]" if f"ir.{case}.note" in F and case in ("T1sN", "N1sN", "N1sN3") else ""
            L.append(f"| {case} | {what}{note} | **{F.t(f'ir.{case}')}** |")
    L += ["", "| ratio or difference | value |", "|---|---|"]
    for k in [k for k in F.items if k.startswith(("ratio.", "diff."))]:  # in the order measured
        a, b = k.split(".", 1)[1].split("_")
        L.append(f"| {a} {'/' if k.startswith('ratio') else '-'} {b} | {F.t(k)} |")
    spreads = [c for c in ("T0", "T1", "N1") if f"ir.{c}.spread" in F]
    if spreads:
        L += ["", "How much the counts repeat: " + "; ".join(
            f"{c} {F.t(f'ir.{c}.runs')} over {len(F.v(f'ir.{c}.runs'))} runs (spread {F.t(f'ir.{c}.spread')})" for c in spreads)
              + ". Differences smaller than the spread are noise."]
    L += ["", "### In-process decisions and memory", "",
          "Micro benchmarks (`tollgate-micro-bench`, pinned to core 1, medians of 3); the gateway's own memory by "
          "`bench/idle_buckets.sh` and `bench/hold.sh` (RSS growth of a fresh gateway, jemalloc).", "",
          "| figure | value |", "|---|---|"]
    rows = [("one decision through the in-process store, 1 thread (2 threads on one bucket)",
             lambda: f"{F.t('micro.decision')} ({F.t('micro.decision_2t')})"),
            ("the bucket arithmetic alone", lambda: F.t("micro.arithmetic")),
            ("a decision with a keyed client, two quotas and maxShare over 10,000 clients, 1 thread (2 threads)",
             lambda: f"{F.t('micro.quotas')} ({F.t('micro.quotas_2t')})"),
            ("suffix lookup with 10, 1,000, 100,000 rules",
             lambda: f"{F.t('micro.suffix_10')}, {F.t('micro.suffix_1000')}, {F.t('micro.suffix_100000')}"),
            ("100,000 idle keyed buckets in the gateway (one rule, `keyBy` a header)",
             lambda: f"{F.t('mem.keyed_100k')}: {F.t('mem.keyed_bucket')} a bucket"),
            ("the same in the store alone (`BM_IdleBucketsMemory`, no jemalloc arenas, no gateway)",
             lambda: f"{F.t('micro.idle_buckets_store')}: {F.t('micro.idle_bucket_store_bytes')} a bucket"),
            ("a rule, idle (loaded, no request for five minutes); 100,000 of them",
             lambda: f"{F.t('mem.rule_idle')}; {F.t('mem.rules_100k_idle')}"),
            ("a rule whose bucket saw a request in the last five minutes (its console history, wait window and "
             "upstream latency estimate)", lambda: F.t("mem.rule_busy")),
            ("CPU of an idle gateway with 100,000 rules", lambda: F.t("cpu.idle_100k_rules")),
            ("client keys under a cap of 10,000 (of 100,000)",
             lambda: f"{F.t('micro.client_keys_10000')} in {F.t('micro.client_keys_10000_mib')}; "
                     f"{F.t('micro.client_keys_100000')} in {F.t('micro.client_keys_100000_mib')} under a cap of 100,000"),
            ("memory per held request (its connection aside), over three runs",
             lambda: f"**{F.t('mem.held')}** at {F.t('mem.held_count')} held of {F.t('mem.hold_sent')} sent; "
                     f"{F.t('mem.held_with_connection')} with its connection; {F.t('mem.held_pad1500')} with 1.5 KiB longer heads"),
            ("CPU while those requests are held", lambda: F.t("cpu.holding"))]
    for label, f in rows:
        try:
            L.append(f"| {label} | {f()} |")
        except KeyError:
            L.append(f"| {label} | not measured in this run |")
    L += ["", "### Wall clock (noisy: read ratios near 1.0 as \"as fast\")", "",
          f"`bench/run.sh`, {F.t('wall.rounds') if 'wall.rounds' in F else '?'}, interleaved; wrk on core 0, every "
          "server on core 1; medians (min-max). Proxy µs: the proxy process's CPU time per request.", "",
          "| case | req/s | p99 ms | proxy µs/req |", "|---|---|---|---|"]
    for n in ("N0", "N1", "T0", "T1", "T2", "N1s", "N1s3", "T1s", "N1sN", "N1sN3", "T1sN"):
        if f"wall.{n}.rps" in F:
            L.append(f"| {n} | {F.t(f'wall.{n}.rps')} | {F.t(f'wall.{n}.p99')} | {F.t(f'wall.{n}.proc_us')} |")
    L += ["", "| ratio | req/s | p99 difference |", "|---|---|---|"]
    for k in sorted(k for k in F.items if k.startswith("wall.ratio.")):
        pair = k.split(".", 2)[2]
        L.append(f"| {pair.replace('_', '/')} | {F.t(k)} | {F.t('wall.p99diff.' + pair)} |")
    extra = []
    if "wall.T3.admitted" in F:
        extra.append(f"a binding limit (1000/s, burst 200, 5 s runs): Tollgate admitted {F.t('wall.T3.admitted')}, "
                     f"nginx (`limit_req`, which queues) {F.t('wall.N2.admitted') if 'wall.N2.admitted' in F else '?'}")
    if "wall.redis.minimal" in F:
        extra.append("Redis alone, `redis-benchmark -c 64` on the server core: EVALSHA of the minimal token bucket "
                     f"{F.t('wall.redis.minimal')} calls/s, of the lean script {F.t('wall.redis.lean')}, of the general "
                     f"script {F.t('wall.redis.general')}, PING {F.t('wall.redis.ping')}; T2's decisions/s are "
                     f"{F.t('wall.T2_of_minimal')} of the minimal script's rate")
    if "hs.new.wall" in F:
        extra.append("TLS handshakes a second per core (`openssl s_time` against nginx; client per CPU-second / "
                     "server per CPU-second): " + "; ".join(
                         f"{label} {F.t(f'hs.{m}.client_cpu')} / {F.t(f'hs.{m}.server_cpu')}"
                         for m, label in (("new", "TLS 1.3 full"), ("reuse", "TLS 1.3 resumed"),
                                          ("new12", "TLS 1.2 full"), ("reuse12", "TLS 1.2 resumed")) if f"hs.{m}.wall" in F))
    L += [""] + [f"- {e}." for e in extra]
    L += ["", "### TLS resumption, warm pools, the adaptive rate", "",
          "Share of new upstream connections resumed, a new connection per request (`bench/tls_resumption.sh`, "
          "2,000 requests per client count):", "",
          "| clients | 1 | 8 | 16 | 32 | 64 |", "|---|---|---|---|---|---|"]
    for who, label in (("tollgate", "Tollgate (TLS 1.3)"), ("nginx12", "nginx, default (TLS 1.2)"), ("nginx13", "nginx, TLS 1.3")):
        L.append(f"| {label} | " + " | ".join(F.t(f"tls.resumed.{who}.{c}") if f"tls.resumed.{who}.{c}" in F else "?"
                                             for c in (1, 8, 16, 32, 64)) + " |")
    L += ["", "Warm pools (`bench/warm_pools.sh`): time from permit to answer, less the supplier's 50 ms, in ms:", "",
          "| min_idle_conns | p50 | p90 | p99 | connections |", "|---|---|---|---|---|"]
    for n in sorted({k.split(".")[1] for k in F.items if k.startswith("warm.")}, key=int):
        L.append(f"| {n} | {F.t(f'warm.{n}.p50')} | {F.t(f'warm.{n}.p90')} | {F.t(f'warm.{n}.p99')} | {F.t(f'warm.{n}.connections')} |")
    L += ["", "The adaptive rate (`bench/adaptive.sh`; a 50/s rule, 60/s offered, a supplier allowing 20, 35, then "
          "50/s; each phase after its first 4 s): share the supplier refused, and accepted against allowed:", "",
          "| run | 20/s | 35/s | 50/s | whole run refused |", "|---|---|---|---|---|"]
    for key, label in (("one", "one gateway"), ("fleet", "three gateways on one Redis"), ("off", "adaptive off")):
        if f"adaptive.{key}.whole" in F:
            cells = [f"{F.t(f'adaptive.{key}.{a}.refused')}, {F.t(f'adaptive.{key}.{a}.used')}"
                     if f"adaptive.{key}.{a}.refused" in F else "?" for a in (20, 35, 50)]
            L.append(f"| {label} | " + " | ".join(cells) + f" | {F.t(f'adaptive.{key}.whole')} |")
    kinds = sorted({k.split(".")[2] for k in F.items if k.startswith("adaptive.kind.")})
    if kinds:
        L += ["", "The supplier kinds (`SupplierKinds`, same rule and traffic: a supplier counting in fixed one-second "
              "windows or in a token bucket, its refusals carrying Retry-After, RateLimit fields or nothing, with 429 "
              "or 503; its allowance 20/s, then 12/s, then 30/s, 12 s each): per phase after its first 4 s, share "
              "refused and accepted against allowed:", "",
              "| supplier kind | signal | status | gateways | 20/s | 12/s | 30/s |", "|---|---|---|---|---|---|---|"]
        for run in kinds:
            k = plot_adaptive.supplier_kind(run)
            cells = [f"{F.t(f'adaptive.kind.{run}.{a}.refused')}, {F.t(f'adaptive.kind.{run}.{a}.used')}"
                     if f"adaptive.kind.{run}.{a}.refused" in F else "?" for a in (20, 12, 30)]
            L.append(f"| {k['kind']} | {k['signal']} | {k['status']} | {k['gateways']} | " + " | ".join(cells) + " |")
        L += ["", "Target: ≤ 3% refused and ≥ 90% used per phase after 4 s (the end-to-end tests guard ≤ 10% and "
              "≥ 75% on every run, which a loaded machine holds)."]
    L += ["", "### Targets", "", "| target | current figure | status |", "|---|---|---|"]
    for t, cur, st in targets(F):
        L.append(f"| {t} | {cur} | {st} |")
    L.append(END)
    return "\n".join(L) + "\n"


def apply(root, block, F, d):
    path = os.path.join(root, "docs", "BENCHMARKS.md")
    text = open(path).read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"report: {path} has no {BEGIN} ... {END} block")
    text = text[: text.index(BEGIN)] + block.rstrip("\n") + text[text.index(END) + len(END):]
    open(path, "w").write(text)
    missing = []
    for doc in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        text = open(doc).read()
        def sub(m):
            if m.group(1) not in F:
                missing.append(f"{os.path.relpath(doc, root)}: fig:{m.group(1)}")
                return m.group(0)
            return f"<!-- fig:{m.group(1)} -->{F.t(m.group(1))}<!-- /fig -->"
        new = FIG.sub(sub, text)
        if new != text:
            open(doc, "w").write(new)
    svg = os.path.join(d, "adaptive.svg")  # the adaptive run's plot goes with its figures
    if os.path.exists(svg):
        shutil.copyfile(svg, os.path.join(root, "docs", "adaptive.svg"))
    with open(os.path.join(root, "docs", "figures.json"), "w") as f:
        json.dump({k: {"text": v["text"], "unit": v["unit"]} for k, v in sorted(F.items.items())}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")
    if missing:
        raise SystemExit("report: the docs quote figures this run did not measure:\n  " + "\n  ".join(missing))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    F = Figures()
    for step in (instructions, micro, memory, tls_resumption, warm_pools, adaptive, wall):
        try:
            step(d, F)
        except FileNotFoundError as e:
            print(f"report: {step.__name__}: {e.filename} is missing; its figures are left out", file=sys.stderr)
    block = table(F, read_machine(d), d)
    open(os.path.join(d, "report.md"), "w").write(block)
    with open(os.path.join(d, "figures.json"), "w") as f:
        json.dump(F.items, f, indent=1, ensure_ascii=False)
    if len(sys.argv) > 3 and sys.argv[2] == "--apply":
        apply(sys.argv[3], block, F, d)
    print(block)


if __name__ == "__main__":
    main()
