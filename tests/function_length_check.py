#!/usr/bin/env python3
"""Keeps the functions of src/ short enough to hold in one's head (ctest `function_length`).

    function_length_check.py [REPO_ROOT]

Every C++ function in src/ of more than 80 lines (its signature to its closing brace, as Universal
Ctags measures it) must say why beside it: a comment in the lines just above it that begins
"Longer than a function should be", and gives the reason. It fails (exit 1), naming each function,
its file, its line and its length, when one does not. Needs `ctags` (Debian's universal-ctags).
"""
import os
import shutil
import subprocess
import sys

MOST_LINES = 80
REASON = "Longer than a function should be"
LOOK_ABOVE = 12  # lines above the signature searched for the reason


def ctags():
    """Universal Ctags: Debian's universal-ctags installs ctags-universal (and ctags, as an alternative)."""
    return shutil.which("ctags-universal") or shutil.which("ctags")


def functions(root):
    """(file, first line, last line, name) of every function definition in src/."""
    out = subprocess.run(
        [ctags(), "--languages=C++", "--c++-kinds=f", "--fields=+ne", "-R", "-o", "-", "src"],
        cwd=root, check=True, capture_output=True, text=True).stdout
    for row in out.splitlines():
        cols = row.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" in fields and "end" in fields:
            yield cols[1], int(fields["line"]), int(fields["end"]), cols[0]


def main(root):
    if ctags() is None:
        print("function_length: ctags not found (install universal-ctags: scripts/deps.sh test)")
        return 1
    problems, long_with_reason = [], 0
    lines_of = {}
    for path, first, last, name in functions(root):
        length = last - first + 1
        if length <= MOST_LINES:
            continue
        if path not in lines_of:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines_of[path] = f.read().split("\n")
        above = lines_of[path][max(0, first - 1 - LOOK_ABOVE):first - 1]
        if any(REASON in line for line in above):
            long_with_reason += 1
            continue
        problems.append(f"{path}:{first}: {name} is {length} lines (at most {MOST_LINES}, or say why above it: "
                        f"'// {REASON} (...): <the reason>')")
    for p in problems:
        print(p)
    if not problems:
        print(f"function_length: every function in src/ is at most {MOST_LINES} lines, "
              f"or says why ({long_with_reason} do)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
