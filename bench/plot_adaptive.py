#!/usr/bin/env python3
"""Per-phase figures and an SVG plot of the adaptive rate's runs (bench/adaptive.sh).

Reads <dir>/<run>.csv (second, allowance, received, throttled, gateway_429, effective_rate,
supplier_tokens_end: the permits the supplier's bucket held at the end of the second) for the
runs local-adaptive, local-control and redis-fleet-adaptive; prints, per run and phase, what the
supplier received and refused after the phase's first 4 s; draws <svg>: the supplier's allowance,
the adaptive gateway's effective rate, what the supplier accepted per second, and its 429s per
second with and without adaptive. Standard library only.
"""
import csv
import os
import sys

SETTLE = 4


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


def summary(name, rows):
    print(f"{name}:")
    print(f"  allowance  received  refused  refused%  accepted/allowed   (seconds {SETTLE}.. of each phase)")
    for f in phase_figures(rows):
        print(f"  {f['allowance']:9.0f}  {f['received']:8.0f}  {f['refused']:7.0f}  {f['refused_pct']:7.2f}%  {f['used_pct']:15.1f}%")
    total_r = sum(r["received"] for r in rows)
    total_t = sum(r["throttled"] for r in rows)
    print(f"  whole run: received {total_r:.0f}, refused {total_t:.0f} ({100 * total_t / max(total_r, 1):.2f}%)")


def plot(runs, path):
    W, H, L, R, T, B = 960, 420, 60, 230, 30, 50
    pw, ph = W - L - R, H - T - B
    a = runs.get("local-adaptive") or next(iter(runs.values()))
    n = len(a)
    ymax = 65.0
    x = lambda i: L + pw * i / max(n, 1)
    y = lambda v: T + ph * (1 - min(v, ymax) / ymax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">50/s rule, 60/s offered; supplier allows 20 → 35 → 50/s (one gateway, in-process store)</text>']
    for v in range(0, 70, 10):
        out.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{L + pw}" y2="{y(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for i in range(0, n + 1, 6):
        out.append(f'<text x="{x(i):.1f}" y="{T + ph + 18}" text-anchor="middle">{i}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 12}" text-anchor="middle">seconds</text>')
    out.append(f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" text-anchor="middle">requests / s</text>')
    c = runs.get("local-control")
    if c:  # the control run's 429s as bars behind
        for i, r in enumerate(c):
            out.append(f'<rect x="{x(i) + 1:.1f}" y="{y(r["throttled"]):.1f}" width="{pw / n - 2:.1f}" '
                       f'height="{y(0) - y(r["throttled"]):.1f}" fill="#f6c28b"/>')
    for i, r in enumerate(a):  # the adaptive run's 429s as bars in front
        out.append(f'<rect x="{x(i) + 3:.1f}" y="{y(r["throttled"]):.1f}" width="{pw / n - 6:.1f}" '
                   f'height="{y(0) - y(r["throttled"]):.1f}" fill="#d62728"/>')

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
    legend = [("#555", "supplier allowance", "6,4"), ("#1f77b4", "effective rate (adaptive)", ""),
              ("#2ca02c", "accepted by supplier /s (adaptive)", ""), ("#d62728", "supplier 429s /s (adaptive)", "bar"),
              ("#f6c28b", "supplier 429s /s (control)", "bar")]
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


def main():
    d, svg = sys.argv[1], sys.argv[2]
    runs = {}
    for name in ("local-adaptive", "local-control", "local-shadow", "redis-fleet-adaptive"):
        p = os.path.join(d, name + ".csv")
        if os.path.exists(p):
            runs[name] = load(p)
            summary(name, runs[name])
    if runs:
        plot(runs, svg)


if __name__ == "__main__":
    main()
