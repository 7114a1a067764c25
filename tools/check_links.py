#!/usr/bin/env python3
"""Checks that every relative link of the given Markdown files resolves.

Usage: check_links.py FILE.md...

A link `[text](path)` or `[text](path#anchor)` that is not a URL must name a file or directory
that exists, relative to the Markdown file; `#anchor` (alone or after a .md path) must be the
anchor GitHub makes of one of that file's headings (lower case, punctuation dropped, spaces
to '-', a repeated heading numbered '-1', '-2', ...). Code blocks and inline code are skipped.
Every page of a docs/ folder given must be given. Prints each broken link with its file and
line; exits 1 if there is any.
"""

import pathlib
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)          # code keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, result = {}, set()
        fenced = False
        for line in path.read_text().splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            match = None if fenced else HEADING.match(line)
            if match:
                base = slug(match.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                result.add(base if count == 0 else f"{base}-{count}")
        cache[path] = result
    return cache[path]


def main():
    files = [pathlib.Path(arg) for arg in sys.argv[1:]]
    if not files:
        print(__doc__)
        return 2
    broken = checked = 0
    # A page added to docs/ but not to the list the tests pass is a page nobody checks.
    for folder in {md.resolve().parent for md in files if md.resolve().parent.name == "docs"}:
        for page in sorted(set(folder.glob("*.md")) - {md.resolve() for md in files}):
            broken += 1
            print(f"{page}: not checked: add it to doc_files in tests/meson.build")
    for md in files:
        for number, line in prose_lines(md.read_text()):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                checked += 1
                path_part, _, anchor = target.partition("#")
                dest = (md.parent / path_part).resolve() if path_part else md.resolve()
                problem = None
                if not dest.exists():
                    problem = f"{path_part} does not exist"
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problem = f"no heading of {dest.name} has the anchor #{anchor}"
                if problem:
                    broken += 1
                    print(f"{md}:{number}: [{target}]: {problem}")
    print(f"{checked} relative links checked, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
