#!/usr/bin/env python3
"""Checks the metrics table of docs/operations.md against the code (ctest `docs_metrics`).

    check_metrics.py [REPO_ROOT]

Every metric name the gateway registers is a string literal "tollgate_..." in src/; every row of
the table starts "| `tollgate_...`". It fails (exit 1), naming each, when a name is in the code
and not in the table (an operator would not find it) or in the table and not in the code (a
metric renamed or removed, the page not). Standard library only.
"""
import os
import re
import sys

CODE = re.compile(r'"(tollgate_[a-z0-9_]+)')
ROW = re.compile(r"^\| `(tollgate_[a-z0-9_]+)`")


def main(root):
    code = set()
    for folder, _, files in os.walk(os.path.join(root, "src")):
        for name in files:
            if name.endswith((".cpp", ".hpp", ".h")):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    code.update(CODE.findall(f.read()))
    with open(os.path.join(root, "docs", "operations.md"), encoding="utf-8") as f:
        table = {m.group(1) for m in map(ROW.match, f) if m}
    problems = [f"{n}: registered in src/, not in docs/operations.md's metrics table" for n in sorted(code - table)]
    problems += [f"{n}: in docs/operations.md's metrics table, not in src/" for n in sorted(table - code)]
    for p in problems:
        print(p)
    if not code:
        print("no metric names found in src/")
        return 1
    print(f"{len(code)} metrics, {len(table)} rows" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
