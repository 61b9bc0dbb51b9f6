#!/usr/bin/env python3
"""Per-phase figures and SVG plots of the adaptive rate's runs (bench/adaptive.sh).

    python3 bench/plot_adaptive.py DIR SVG

Reads each <DIR>/<run>.csv (second, allowance, received, throttled, gateway_429, effective_rate,
supplier_tokens_end: the permits the supplier's bucket held at the end of the second, 0 for a
fixed window, which holds nothing over; the seconds are calendar seconds, a fixed window's) that
tests/integration/adaptive_e2e_test.cpp wrote; prints, per
run and phase, what the supplier received and refused after the phase's first 4 s, and how many
seconds after each change of allowance the gateways followed it (a drop: at most 3% refused from
then on; a rise: 90% of it accepted in a second) (local-adaptive,
local-control, local-shadow, redis-fleet-adaptive first, then the others by name). Draws SVG: the
supplier's allowance, the adaptive gateway's effective rate, what the supplier accepted per
second, and its 429s per second with and without adaptive; and, next to it, adaptive-<run>.svg
for each supplier-kind run (<kind>-<signal>-<status>-<one|fleet>, as window-bare-429-fleet): the
same lines and that run's refusals per second. Runs named ...-late (the rise just after a
refusal) are printed, not drawn. Standard library only.
"""
import csv
import os
import re
import sys

SETTLE = 4
RULE, OFFERED = 50, 60  # the tests' rule (requests a second) and the traffic they offer
FIRST = ("local-adaptive", "local-control", "local-shadow", "redis-fleet-adaptive")
KIND = re.compile(r"^(window|bucket)-(retry_after|ratelimit|bare)-(\d{3})-(one|fleet)(-late)?$")
KINDS = {"window": "fixed 1 s windows", "bucket": "token bucket"}
SIGNALS = {"retry_after": "Retry-After", "ratelimit": "RateLimit fields", "bare": "none"}
GATEWAYS = {"one": "one gateway", "fleet": "three gateways on Redis"}


def load(path):
    with open(path) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def phases(rows):
    out, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i]["allowance"] != rows[start]["allowance"]:
            out.append(rows[start:i])
            start = i
    return out


def phase_figures(rows):
    """Per phase, after its first SETTLE seconds: the allowance, what the supplier received and
    refused, the share refused (%) and what was accepted against what it allowed (%)."""
    out = []
    for ph in phases(rows):
        s = ph[SETTLE:]
        rec = sum(r["received"] for r in s)
        thr = sum(r["throttled"] for r in s)
        # What it allowed: its rate over the window, plus the permits held at the start, less those
        # still held at the end (as in adaptive_e2e_test.cpp).
        allowed = ph[0]["allowance"] * len(s) + ph[SETTLE - 1]["supplier_tokens_end"] - s[-1]["supplier_tokens_end"]
        out.append({"allowance": ph[0]["allowance"], "received": rec, "refused": thr,
                    "refused_pct": 100 * thr / rec if rec else 0,
                    "used_pct": 100 * (rec - thr) / allowed if allowed > 0 else 0})
    return out


def followed_in(rows):
    """Per change of allowance: the seconds until the gateways followed it (None: not within the
    phase). A drop is followed from the first second k after which the supplier refused at most 3%
    of what it received for the rest of the phase (k s); a rise is used by the end of the first
    second in which the supplier accepted at least 90% of it."""
    out = []
    ph = phases(rows)
    for before, now in zip(ph, ph[1:]):
        a = now[0]["allowance"]
        if a < before[0]["allowance"]:
            hit = [k for k in range(len(now)) if sum(r["throttled"] for r in now[k:]) <= 0.03 * sum(r["received"] for r in now[k:])]
            got = hit[0] if hit else None
        else:
            hit = [i for i, r in enumerate(now) if r["received"] - r["throttled"] >= 0.9 * a]
            got = hit[0] + 1 if hit else None
        out.append((before[0]["allowance"], a, got))
    return out


def summary(name, rows):
    print(f"{name} ({describe(name, rows)}):" if supplier_kind(name) and rows else f"{name}:")
    print(f"  allowance  received  refused  refused%  accepted/allowed   (seconds {SETTLE}.. of each phase)")
    for f in phase_figures(rows):
        print(f"  {f['allowance']:9.0f}  {f['received']:8.0f}  {f['refused']:7.0f}  {f['refused_pct']:7.2f}%  {f['used_pct']:15.1f}%")
    for old, new, s in followed_in(rows):
        what = "followed" if new < old else "used"
        print(f"  {old:.0f} -> {new:.0f}/s: {what} in {s} s" if s is not None else f"  {old:.0f} -> {new:.0f}/s: not {what} in the phase")
    total_r = sum(r["received"] for r in rows)
    total_t = sum(r["throttled"] for r in rows)
    print(f"  whole run: received {total_r:.0f}, refused {total_t:.0f} ({100 * total_t / max(total_r, 1):.2f}%)")


def supplier_kind(name):
    """What a supplier-kind run's name says (None for the other runs): kind, signal, status and
    gateways, in words."""
    m = KIND.match(name)
    if not m:
        return None
    return {"kind": KINDS[m.group(1)], "signal": SIGNALS[m.group(2)], "status": int(m.group(3)),
            "gateways": GATEWAYS[m.group(4)], "late": bool(m.group(5))}


def describe(name, rows):
    """A supplier-kind run in words, as its plot's title."""
    k = supplier_kind(name)
    refusal = f"bare {k['status']}" if k["signal"] == "none" else f"{k['status']} with {k['signal']}"
    allowances = " → ".join(f"{ph[0]['allowance']:.0f}" for ph in phases(rows))
    late = ", the rise just after a refusal" if k["late"] else ""
    return (f"{k['kind']}, {refusal}, {k['gateways']}; allowance {allowances}/s{late}, {OFFERED}/s offered, "
            f"{RULE}/s rule")


def run_names(d):
    """The runs of <d>: the first four in their order, then the others by name."""
    names = sorted(f[: -len(".csv")] for f in os.listdir(d) if f.endswith(".csv"))
    return [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]


def draw(path, title, a, bars, labels):
    """One plot: run a's allowance (dashed step), effective rate and what the supplier accepted
    per second, over bars (rows, colour, inset, legend text) of refusals per second, drawn in
    order (the first behind); labels: the legend of the effective rate and of the accepted line."""
    W, H, L, R, T, B = 960, 420, 60, 230, 30, 50
    pw, ph = W - L - R, H - T - B
    n = len(a)
    ymax = 65.0
    x = lambda i: L + pw * i / max(n, 1)
    y = lambda v: T + ph * (1 - min(v, ymax) / ymax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">{title}</text>']
    for v in range(0, 70, 10):
        out.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{L + pw}" y2="{y(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for i in range(0, n + 1, 6):
        out.append(f'<text x="{x(i):.1f}" y="{T + ph + 18}" text-anchor="middle">{i}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 12}" text-anchor="middle">seconds</text>')
    out.append(f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" text-anchor="middle">requests / s</text>')
    for rows, color, inset, _ in bars:
        for i, r in enumerate(rows):
            out.append(f'<rect x="{x(i) + inset:.1f}" y="{y(r["throttled"]):.1f}" width="{pw / n - 2 * inset:.1f}" '
                       f'height="{y(0) - y(r["throttled"]):.1f}" fill="{color}"/>')

    def line(rows, key, color, dash="", step=False):
        pts = []
        for i, r in enumerate(rows):
            if r[key] < 0:
                continue
            if step:
                pts += [f"{x(i):.1f},{y(r[key]):.1f}", f"{x(i + 1):.1f},{y(r[key]):.1f}"]
            else:
                pts.append(f"{x(i + 1):.1f},{y(r[key]):.1f}")
        d = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{color}" stroke-width="2"{d}/>')

    line(a, "allowance", "#555", "6,4", step=True)
    line(a, "effective_rate", "#1f77b4")
    accepted = [dict(r, accepted=r["received"] - r["throttled"]) for r in a]
    line(accepted, "accepted", "#2ca02c", step=True)
    legend = [("#555", "supplier allowance", "6,4"), ("#1f77b4", labels[0], ""), ("#2ca02c", labels[1], "")]
    legend += [(color, text, "bar") for _, color, _, text in reversed(bars)]  # the front bars first
    for k, (color, text, kind) in enumerate(legend):
        yy = T + 20 + 22 * k
        if kind == "bar":
            out.append(f'<rect x="{L + pw + 12}" y="{yy - 8}" width="18" height="10" fill="{color}"/>')
        else:
            d = f' stroke-dasharray="{kind}"' if kind else ""
            out.append(f'<line x1="{L + pw + 12}" y1="{yy - 3}" x2="{L + pw + 30}" y2="{yy - 3}" stroke="{color}" stroke-width="2"{d}/>')
        out.append(f'<text x="{L + pw + 36}" y="{yy}" font-size="11">{text}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def plot(runs, path):
    """The adaptive runs at one gateway: the adaptive run against the control run's 429s."""
    a = runs.get("local-adaptive") or next(iter(runs.values()))
    bars = []
    if runs.get("local-control"):  # the control run's 429s as bars behind
        bars.append((runs["local-control"], "#f6c28b", 1, "supplier 429s /s (control)"))
    bars.append((a, "#d62728", 3, "supplier 429s /s (adaptive)"))  # the adaptive run's in front
    draw(path, "50/s rule, 60/s offered; supplier allows 20 → 35 → 50/s (one gateway, in-process store)", a, bars,
         ("effective rate (adaptive)", "accepted by supplier /s (adaptive)"))


def plot_kind(name, rows, path):
    """A supplier-kind run: its lines and its refusals per second (429s or 503s)."""
    k = supplier_kind(name)
    rate = "effective rate (first gateway)" if k["gateways"] != GATEWAYS["one"] else "effective rate"
    draw(path, describe(name, rows), rows, [(rows, "#d62728", 3, f"supplier {k['status']}s /s")],
         (rate, "accepted by supplier /s"))


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    d, svg = sys.argv[1], sys.argv[2]
    runs = {}
    for name in run_names(d):
        runs[name] = load(os.path.join(d, name + ".csv"))
        summary(name, runs[name])
    first = {n: r for n, r in runs.items() if n in FIRST}
    if first:
        plot(first, svg)
    for name, rows in runs.items():
        if supplier_kind(name) and not supplier_kind(name)["late"] and rows:
            plot_kind(name, rows, os.path.join(os.path.dirname(svg), f"adaptive-{name}.svg"))


if __name__ == "__main__":
    main()
