#!/usr/bin/env python3
"""The docs quote only the figures bench/report.sh measured, as it measured them.

    python3 tests/docs/check_figures.py REPO_ROOT

Checks that docs/BENCHMARKS.md has the report's block (written by bench/report.sh, not empty),
that every `<!-- fig:ID -->TEXT<!-- /fig -->` span in README.md and docs/*.md names a figure of
docs/figures.json and shows its text exactly, and that the block names the commit it measured.
Exits 1 with each difference named.
"""
import glob
import json
import os
import re
import sys

FIG = re.compile(r"<!-- fig:([A-Za-z0-9_.-]+) -->(.*?)<!-- /fig -->", re.S)
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    errors = []
    figures_path = os.path.join(root, "docs", "figures.json")
    try:
        figures = json.load(open(figures_path))
    except (OSError, ValueError) as e:
        print(f"docs figures: {figures_path}: {e}")
        return 1
    bench = open(os.path.join(root, "docs", "BENCHMARKS.md")).read()
    if BEGIN not in bench or END not in bench:
        errors.append("docs/BENCHMARKS.md: no report block (<!-- report:begin --> ... <!-- report:end -->)")
    else:
        block = bench[bench.index(BEGIN) + len(BEGIN): bench.index(END)]
        if not re.search(r"Measured by `bench/report.sh` at \*\*[0-9a-f]{7,}", block):
            errors.append("docs/BENCHMARKS.md: the report block does not name the commit it measured")
        for fid in ("ir.T1", "ir.N1", "mem.held"):
            if fid in figures and figures[fid]["text"] not in block:
                errors.append(f"docs/BENCHMARKS.md: the report block does not show {fid} = {figures[fid]['text']}")
    spans = 0
    for doc in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        rel = os.path.relpath(doc, root)
        for m in FIG.finditer(open(doc).read()):
            spans += 1
            fid, text = m.group(1), m.group(2)
            if fid not in figures:
                errors.append(f"{rel}: fig:{fid} is not a figure bench/report.sh measured")
            elif text != figures[fid]["text"]:
                errors.append(f"{rel}: fig:{fid} says {text!r}, the report measured {figures[fid]['text']!r}")
    if errors:
        print("docs figures: " + str(len(errors)) + " problem(s)\n  " + "\n  ".join(errors))
        return 1
    print(f"docs figures: ok ({spans} quoted figures, {len(figures)} in docs/figures.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
