#!/usr/bin/env python3
"""Checks that every relative link of the given Markdown files resolves.

Usage: check_links.py FILE.md...

A link `[text](path)` or `[text](path#anchor)` that is not a URL must name a file or directory
that exists, relative to the Markdown file; `#anchor` (alone or after a .md path) must be the
anchor GitHub makes of one of that file's headings (lower case, punctuation dropped, spaces
to '-', a repeated heading numbered '-1', '-2', ...). Code blocks and inline code are skipped.
Every page of a docs/ folder given must be given. A path `build/DIR/.../NAME` in a page's commands (shell
blocks, inline code) must be one that a `./dev` command builds: DIR is the build directory of a
command in tools/dev/ (`DEMO_DIR=build/demo`, `suite gcc build/gcc ...`), and NAME a target
that command compiles (all of the project's, unless it names its targets). Prints each problem
with its file and line; exits 1 if there is any.
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


ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD_PATH = re.compile(r"\bbuild/([\w.-]+)/([\w./-]*[\w-])")


def dev_build_dirs():
    """{build directory: the targets its ./dev command compiles, or None for all of them}."""
    dirs = {}
    for script in sorted((ROOT / "tools" / "dev").glob("*.sh")):
        text = re.sub(r"\\\n\s*", " ", script.read_text())  # continued lines joined
        for name in re.findall(r"^\s*suite \w+ build/([\w-]+)", text, flags=re.M):
            dirs[name] = None
        for var, name in re.findall(r"^(\w+)=build/([\w-]+)\s*$", text, flags=re.M):
            targets = None
            for line in re.findall(r'compile -C "\$\{?' + var + r'\}?"([^;|&}\n]*)', text):
                words = [w for w in line.split() if not w.startswith(("-", "$", ">", "2>"))]
                targets = (targets or set()) | {w.rsplit("/", 1)[-1] for w in words} if words else None
            dirs[name] = targets
    return dirs


def project_targets():
    """Every name an executable() of the project's meson.build files can take (a quoted word)."""
    names = set()
    for build_file in ROOT.glob("**/meson.build"):
        if "build" not in build_file.relative_to(ROOT).parts[:1]:
            names |= set(re.findall(r"'([\w-]+)'", build_file.read_text()))
    return names


def command_lines(text):
    """(line number, text) of what a reader may run: shell blocks, and inline code in prose."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if opening:
            fence = None if fence is not None else line.strip()[3:]
            continue
        if fence is None:
            yield number, " ".join(re.findall(r"`([^`]*)`", line))
        elif fence in ("sh", "console", "bash", ""):
            yield number, line


def target_of(rest):
    """The target a path under a build directory comes from: its last part, or NAME for what a
    run of NAME wrote in NAME-runs/."""
    for part in rest.split("/"):
        if part.endswith("-runs"):
            return part[:-len("-runs")]
    return rest.rsplit("/", 1)[-1]


def check_build_paths(md, dirs, targets):
    problems = []
    for number, line in command_lines(md.read_text()):
        for directory, rest in BUILD_PATH.findall(line):
            name = target_of(rest)
            if directory == "data":  # where ./dev keeps fetched data, not a build directory
                continue
            if directory not in dirs:
                problems.append(f"{md}:{number}: build/{directory}/{rest}: no ./dev command builds in build/{directory}")
            elif dirs[directory] is not None and name not in dirs[directory]:
                problems.append(f"{md}:{number}: build/{directory}/{rest}: the ./dev command of build/{directory} compiles only {sorted(dirs[directory])}")
            elif dirs[directory] is None and not any(  # executable('test_' + name, ...) and the like
                    name.removeprefix(prefix) in targets for prefix in ("", "test_", "test_mpi_", "bench_")):
                problems.append(f"{md}:{number}: build/{directory}/{rest}: no target named {name} in any meson.build")
    return problems


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
    dirs, targets = dev_build_dirs(), project_targets()
    for md in files:
        for problem in check_build_paths(md, dirs, targets):
            broken += 1
            print(problem)
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
