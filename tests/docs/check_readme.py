#!/usr/bin/env python3
"""Keeps the README a front door (ctest `docs_readme`).

    check_readme.py [REPO_ROOT]

Fails (exit 1), saying which, when README.md has 250 lines or more, or when its "## Quick start"
heading is not within its first 40 lines (the first screen: a newcomer sees how to start before
anything else). Standard library only.
"""
import os
import sys

MOST_LINES, FIRST_SCREEN = 249, 40


def main(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    problems = []
    if len(lines) > MOST_LINES:
        problems.append(f"README.md has {len(lines)} lines: at most {MOST_LINES}; move detail into docs/")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("## Quick start")), None)
    if at is None:
        problems.append("README.md has no '## Quick start' heading")
    elif at > FIRST_SCREEN:
        problems.append(f"README.md's Quick start is at line {at}: within the first {FIRST_SCREEN}")
    for p in problems:
        print(p)
    if not problems:
        print(f"README.md: {len(lines)} lines, Quick start at line {at}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
