#!/usr/bin/env python3
"""The adaptive matrix's table (bench/adaptive.sh MATRIX=...): one row per cell.

    python3 bench/adaptive_matrix.py TESTS_LOG > matrix.md

Reads the lines tests/integration/adaptive_e2e_test.cpp prints for each cell of Cells/Matrix:
"[<cell>] by its windows, N a window: received R, refused F (P%), accepted U% of what W windows
allowed" (fixed windows) or "[<cell>] allowance N/s: supplier received R, refused F (P%), accepted
U% ..." (a token bucket; a fixed window's cell prints these too, and they are not read), one per
phase. A cell's figures are its worst phase: the most refused and
the least used. The targets: at most 3% refused, at least 90% used, in every cell.
Standard library only.
"""
import re
import sys

CELL = re.compile(r"^(window|bucket)_(retry_after|bare|ratelimit)_(\d{3})(?:_w(\d+)s_o(\d+))?_(one|fleet)$")
LINE = re.compile(r"^\[([a-z0-9_]+)\] (by its windows, [\d.]+ a window|allowance [\d.]+/s): .*?refused \d+ "
                  r"\(([\d.]+)%\), accepted ([\d.]+)%")
REFUSED, USED = 3.0, 90.0


def main(path):
    cells = {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            cell = m and CELL.match(m.group(1))
            # A fixed window's figures are by its own windows (the test prints calendar seconds too).
            if not cell or (cell.group(1) == "window") != m.group(2).startswith("by its windows"):
                continue
            worst = cells.setdefault(m.group(1), [0.0, 100.0])
            worst[0] = max(worst[0], float(m.group(3)))
            worst[1] = min(worst[1], float(m.group(4)))
    print("| supplier | signal | window | offset | gateways | most refused | least used | targets |")
    print("|---|---|---|---|---|---:|---:|---|")
    met = 0
    for name in sorted(cells, key=lambda n: (CELL.match(n).groups()[5], n)):
        kind, signal, status, window, offset, where = CELL.match(name).groups()
        refused, used = cells[name]
        ok = refused <= REFUSED and used >= USED
        met += ok
        print(f"| {'fixed windows' if kind == 'window' else 'token bucket'} | {signal} {status} | "
              f"{window + ' s' if window else '-'} | {offset + ' ms' if offset else '-'} | "
              f"{'three on Redis' if where == 'fleet' else 'one'} | {refused:.2f}% | {used:.1f}% | "
              f"{'met' if ok else 'missed'} |")
    print(f"\n{met} of {len(cells)} cells met the targets (at most {REFUSED:g}% refused, at least {USED:g}% used).")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
