#!/usr/bin/env python3
"""Checks the package lists the docs quote against the scripts that install them (ctest `docs_packages`).

    check_packages.py [REPO_ROOT]

The lists are written once in the code: scripts/deps.sh (the build's and the tests' packages) and
the Dockerfile's runtime stage. The pages quote them:
- docs/testing.md's Packages stage names every package deps.sh adds for `test`, and no other;
- docs/deployment.md names every runtime package of the Dockerfile, and no other;
- every package README.md names in backquotes beside the lists is one deps.sh installs.
It fails (exit 1), naming each package and page, when a list is out of step. Standard library only.
"""
import os
import re
import sys

WORD = re.compile(r"[a-z0-9][a-z0-9.+-]*")


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def shell_words(text):
    """The words of a bash array body, comments dropped."""
    return [w for line in text.split("\n") for w in WORD.findall(line.split("#", 1)[0])]


def deps_lists(root):
    text = read(root, "scripts/deps.sh")
    build = re.search(r"^want=\((.*?)\)", text, re.M | re.S)
    test = re.search(r"want\+=\((.*?)\)\s*(?:#[^\n]*)?\nfi", text, re.S)
    compose = re.search(r"^\s+want=\((.*?)\)", text, re.M | re.S)
    if not (build and test and compose):
        sys.exit("scripts/deps.sh: its want=(...) lists were not found; update check_packages.py")
    return set(shell_words(build.group(1))), set(shell_words(test.group(1))), set(shell_words(compose.group(1)))


def quoted_words(block):
    """Every package-like word inside backquotes of a text block (joined across line breaks)."""
    words = set()
    for quoted in re.findall(r"`([^`]*)`", block.replace("\n", " ")):
        words.update(w for w in quoted.split() if WORD.fullmatch(w))
    return words


def section(text, start, end):
    at = text.find(start)
    if at < 0:
        return None
    stop = text.find(end, at + len(start))
    return text[at:stop if stop >= 0 else len(text)]


def main(root):
    build, test, compose = deps_lists(root)
    problems = []

    stage = section(read(root, "docs/testing.md"), "1. **Packages**", "2. **Build**")
    if stage is None:
        problems.append("docs/testing.md: no '1. **Packages**' stage")
    else:
        named = quoted_words(stage) - {"scripts/deps.sh", "test", "apt-get", "sudo"}
        problems += [f"{p}: installed by scripts/deps.sh test, not in docs/testing.md's Packages stage" for p in sorted(test - named)]
        problems += [f"{p}: in docs/testing.md's Packages stage, not installed by scripts/deps.sh test" for p in sorted(named - test)]

    runtime = re.search(r"^FROM debian:12\s*$.*?install -y --no-install-recommends \\\n(.*?)\\", read(root, "Dockerfile"), re.M | re.S)
    image = section(read(root, "docs/deployment.md"), "runtime stage holding", "three stripped binaries")
    if runtime is None or image is None:
        problems.append("Dockerfile's runtime install line or docs/deployment.md's runtime list not found")
    else:
        shipped = set(runtime.group(1).split())
        named = quoted_words(image)
        problems += [f"{p}: in the Dockerfile's runtime stage, not in docs/deployment.md" for p in sorted(shipped - named)]
        problems += [f"{p}: in docs/deployment.md's runtime list, not in the Dockerfile's runtime stage" for p in sorted(named - shipped)]

    lists = section(read(root, "README.md"), "lists are in [scripts/deps.sh]", "\n\n")
    if lists is None:
        problems.append("README.md: the paragraph naming scripts/deps.sh's lists is gone")
    else:
        named = quoted_words(lists) - {"scripts/deps.sh", "compose"}
        problems += [f"{p}: named in README.md's package list, not installed by scripts/deps.sh" for p in sorted(named - build - test - compose)]
        for must in ("libc-ares-dev", "dnsmasq-base"):
            if must not in named:
                problems.append(f"{must}: not named in README.md's package list (the build or the tests need it)")

    for p in problems:
        print(p)
    if not problems:
        print(f"packages: docs agree with scripts/deps.sh ({len(build)} build, {len(test)} test) and the Dockerfile")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
