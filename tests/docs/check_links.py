#!/usr/bin/env python3
"""Checks every relative link of README.md and docs/ (ctest `docs_links`).

    check_links.py [REPO_ROOT]

Walks README.md and every docs/**/*.md, finds their links and images (inline `[text](target)`,
`![alt](target)`, reference definitions `[label]: target`, and HTML `href`/`src`), and resolves
each relative target against the folder of the file it is in. It fails (exit 1), listing
`file:line: target: reason` for each, when a target

  - names a file or folder that does not exist,
  - names an anchor (`page.md#section`, `#section`) that no heading of that page produces,
  - leaves the repository (resolves outside REPO_ROOT, or is an absolute path or a file: URL).

Anchors follow GitHub's rules: the heading's text, lower-cased, with every character other than
letters, digits, spaces, '-' and '_' dropped and spaces turned into '-'; a heading whose anchor
already exists in the page gets -1, -2, ... Links to other sites (http:, https:, mailto:) are not
followed. Code blocks and code spans are skipped: what they hold is not a link. Standard library
only.
"""
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"""\b(?:href|src)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
HTML_ID = re.compile(r"""<[a-z][^>]*\b(?:id|name)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def strip_code_spans(line):
    """The line with each code span blanked out (same length, so columns stay)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def markdown_lines(text):
    """Yields (line number, line) for the lines outside fenced code blocks and HTML comments."""
    fence = None
    in_comment = False
    for number, line in enumerate(text.split("\n"), 1):
        if fence:
            m = FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        m = FENCE.match(line)
        if m:
            fence = m.group(1)
            continue
        if in_comment:
            if "-->" in line:
                in_comment = False
                line = line.split("-->", 1)[1]
            else:
                continue
        line = re.sub(r"<!--.*?-->", "", line)
        if "<!--" in line:
            line, in_comment = line.split("<!--", 1)[0], True
        yield number, line


def heading_text_to_slug(text):
    """GitHub's anchor for a heading's Markdown text (before de-duplication)."""
    # Code spans keep their content verbatim (underscores included).
    parts = []
    pos = 0
    for m in CODE_SPAN.finditer(text):
        parts.append(("md", text[pos:m.start()]))
        parts.append(("code", m.group(2)))
        pos = m.end()
    parts.append(("md", text[pos:]))
    out = []
    for kind, chunk in parts:
        if kind == "md":
            chunk = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", chunk)   # links and images: their text
            chunk = re.sub(r"<[^>]+>", "", chunk)                       # HTML tags
            chunk = re.sub(r"(?<![\w])[*_]+|[*_]+(?![\w])", "", chunk)  # emphasis markers
        out.append(chunk)
    text = "".join(out).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    anchors = set()
    seen = {}

    def add(slug):
        if slug in seen:
            seen[slug] += 1
            unique = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
            unique = slug
        anchors.add(unique)

    previous = None
    for _, line in markdown_lines(text):
        m = ATX.match(line)
        if m:
            add(heading_text_to_slug(m.group(2) or ""))
            previous = None
        elif previous is not None and previous.strip() and SETEXT.match(line) and not previous.startswith((" " * 4, "\t")):
            add(heading_text_to_slug(previous.strip()))
            previous = None
            continue
        for m in HTML_ID.finditer(line):
            anchors.add(m.group(1) if m.group(1) is not None else m.group(2))
        previous = line
    cache[path] = anchors
    return anchors


def inline_targets(line):
    """(column, target) of each inline link or image `[...](target ...)` on a line."""
    found = []
    i = 0
    while True:
        i = line.find("](", i)
        if i < 0:
            return found
        j = i + 2
        while j < len(line) and line[j] in " \t":
            j += 1
        if j < len(line) and line[j] == "<":
            end = line.find(">", j)
            if end < 0:
                i += 2
                continue
            found.append((i, line[j + 1:end]))
            i = end
            continue
        depth = 0
        k = j
        while k < len(line):
            c = line[k]
            if c == "\\":
                k += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c in " \t":
                break
            k += 1
        found.append((i, line[j:k]))
        i = k


def targets_of(text):
    for number, line in markdown_lines(text):
        m = REF_DEF.match(line)
        if m:
            target = m.group(2)
            yield number, target[1:-1] if target.startswith("<") else target
            continue
        plain = strip_code_spans(line)
        for _, target in inline_targets(plain):
            yield number, target
        for m in HTML_ATTR.finditer(plain):
            yield number, m.group(1) if m.group(1) is not None else m.group(2)


def within(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root + os.sep)


def check_file(root, md):
    problems = []
    count = 0
    with open(md, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(md, root)
    for number, target in targets_of(text):
        count += 1

        def bad(reason):
            problems.append(f"{rel}:{number}: {target}: {reason}")

        if not target:
            bad("empty link")
            continue
        if target.startswith("//"):
            continue  # another site, scheme-relative
        if SCHEME.match(target):
            if target.lower().startswith("file:"):
                bad("a file: URL leaves the repository")
            continue  # another site: not followed
        path_part, _, fragment = target.partition("#")
        path_part = urllib.parse.unquote(path_part.split("?", 1)[0])
        fragment = urllib.parse.unquote(fragment)
        if path_part.startswith("/"):
            bad("absolute path: links must be relative and stay in the repository")
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(md), path_part)) if path_part else md
        if not within(root, resolved):
            bad("leaves the repository")
            continue
        if not os.path.exists(resolved):
            bad("no such file or folder")
            continue
        if fragment and resolved.endswith(".md") and os.path.isfile(resolved):
            if fragment not in anchors_of(resolved):
                bad(f"no heading in {os.path.relpath(resolved, root)} has the anchor #{fragment}")
    return count, problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    files = [os.path.join(root, "README.md")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    problems = []
    links = 0
    for md in files:
        if not os.path.isfile(md):
            problems.append(f"{os.path.relpath(md, root)}: missing")
            continue
        count, found = check_file(root, md)
        links += count
        problems += found
    if problems:
        print("\n".join(problems))
        print(f"docs links: {len(problems)} broken of {links} in {len(files)} files")
        return 1
    print(f"docs links: ok ({links} links in {len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
