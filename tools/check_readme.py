#!/usr/bin/env python3
"""Compiles and runs every C++ block of the given Markdown files that is a whole program.

Usage: check_readme.py [--update | --syntax-only] FILE.md... -- <compiler and flags...>
       check_readme.py [--update] --sample NAME FILE.md [--unordered PREFIX]... -- <command...>
       check_readme.py --project NAME FILE.md SOURCE_ROOT [PYTHON]

The documentation's code cannot rot: each ```cpp block with `int main` must compile with the
given flags and exit 0. A program may be followed by its output: a ```text block whose opening
fence is preceded by the line `<!-- output -->`. The program's stdout and stderr (merged, in
order) must then be that block, line for line, where every number of the block stands for any
number (rates and timings vary between runs; the words, the lines and their order may not).
With --update the output blocks are rewritten from this run instead of being checked. With
--syntax-only each program is only compiled with -fsyntax-only (a second compiler's check: the
first compiler's build runs the programs and compares their outputs).

With --sample, the ```text block after the line `<!-- sample: NAME -->` must be what the command
prints (a demo's output shown in the docs; `{tmpdir}` in the command is replaced by a fresh
temporary directory): numbers aside, any word with a '/' standing for any
word (the directories a run writes), and `progress:` lines left out; lines starting with an
--unordered PREFIX (another thread's) may come in any order.

With --project, the blocks of FILE.md marked `<!-- project NAME: FILENAME -->` are the files of a
user's project (a program, its CMakeLists.txt) and those marked `<!-- project NAME: run -->` are
shell scripts that build and run it, as a user would type them: each script runs with `bash -e`
in a fresh directory holding the files and `runhooks`, a link to SOURCE_ROOT (the docs' "clone it
into runhooks/"), with `python3` on PATH being PYTHON when given (the Python whose packages the
scripts ask for, as torch's). Every script must exit 0. A script whose command is not installed
(cmake) is skipped, and the check then exits 77 (SKIP) after running the others. The cpp blocks
of a project are left out of the compiled programs above: they need what the project's scripts
add (libtorch).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

BLOCK = re.compile(r"```cpp\n(.*?)```\n(?:\n<!-- output -->\n```text\n(.*?)```\n)?", flags=re.S)
# A number, with tqdm's k, M, G, ... suffix when it has one (a rate of 916k on one machine is
# 2.76M on another).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?[kMGTPEZY]?"


def token_pattern(token, paths):
    if paths and "/" in token:  # a path: where a run wrote stands for wherever this one did
        return r"\S+"
    return "".join(NUMBER if re.fullmatch(NUMBER, part) else re.escape(part)
                   for part in re.split(f"({NUMBER})", token))


def matches(expected, actual, paths=False):
    """Whether the actual output is the expected block, any number standing for any number (and,
    with paths, any word with a '/' for any word)."""
    want, got = expected.rstrip("\n").split("\n"), actual.rstrip("\n").split("\n")
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        pattern = "".join(part if part.isspace() or not part else token_pattern(part, paths)
                          for part in re.split(r"(\s+)", w))
        if not re.fullmatch(pattern, g):
            return False
    return True


SAMPLE = "<!-- sample: {} -->\n```text\n(.*?)```\n"


def check_sample(name, md, command, update, unordered):
    """The block after `<!-- sample: NAME -->` in md is what command prints (stdout and stderr
    merged), numbers and paths aside; `progress:` lines, whose number depends on the machine's
    speed, are left out of both; lines starting with one of `unordered` (written by another
    thread, as a background checkpoint's) must all be there, in any order. With update, the block
    is rewritten from this run."""
    # stdbuf works by LD_PRELOAD, which an ASan build refuses unless told that the order of its
    # runtime does not matter here.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    with tempfile.TemporaryDirectory() as tmp:  # {tmpdir} in the command: a fresh directory
        command = [word.replace("{tmpdir}", tmp) for word in command]
        run = subprocess.run(["stdbuf", "-oL"] + command if shutil.which("stdbuf") else command,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=600, env=env)
    if run.returncode != 0:
        print(f"{' '.join(command)} exited {run.returncode}:\n{run.stdout}")
        return 1
    text = md.read_text()
    match = re.search(SAMPLE.format(re.escape(name)), text, flags=re.S)
    if not match:
        print(f"{md} has no `<!-- sample: {name} -->` followed by a ```text block")
        return 1
    if update:
        md.write_text(text[:match.start(1)] + run.stdout + text[match.end(1):])
        print(f"{md}: sample {name} rewritten from a run of {' '.join(command)}")
        return 0
    def split(out):
        """(the lines in order, the lines of another thread, masked and sorted)."""
        lines = [l for l in out.splitlines(True) if not l.startswith("progress:")]
        ordered = "".join(l for l in lines if not l.startswith(tuple(unordered)))
        masked = sorted(re.sub(r"\S*/\S*", "PATH", re.sub(NUMBER, "N", l)).rstrip("\n")
                        for l in lines if l.startswith(tuple(unordered)))
        return ordered, masked
    (want, want_unordered), (got, got_unordered) = split(match.group(1)), split(run.stdout)
    if not matches(want, got, paths=True) or want_unordered != got_unordered:
        print(f"{md}, sample {name}: not what `{' '.join(command)}` prints (numbers, paths and "
              f"progress lines aside).\n--- the block:\n{match.group(1)}--- the output:\n"
              f"{run.stdout}(`tools/check_readme.py --update --sample {name} {md} -- COMMAND` "
              f"rewrites it)")
        return 1
    print(f"{md}, sample {name}: as `{' '.join(command)}` prints it")
    return 0


PROJECT = re.compile(r"<!-- project (\S+): (\S+) -->\n```[\w+-]*\n(.*?)```\n", flags=re.S)


def in_project(text, start):
    """Whether the block opening at `start` is marked as a project's file."""
    before = text[:start].rstrip("\n").rsplit("\n", 1)[-1]
    return before.startswith("<!-- project ")


def commands_of(script):
    """The programs a script calls by name: each line's first word (continuation lines joined),
    leaving out assignments and paths."""
    names = []
    for line in script.replace("\\\n", " ").splitlines():
        words = line.split()
        if words and re.fullmatch(r"[A-Za-z][\w+.-]*", words[0]):
            names.append(words[0])
    return names


def check_project(name, md, source_root, python):
    files, scripts = {}, []
    for match in PROJECT.finditer(md.read_text()):
        if match.group(1) != name:
            continue
        if match.group(2) == "run":
            scripts.append(match.group(3))
        else:
            files[match.group(2)] = match.group(3)
    if not scripts:
        print(f"{md} has no `<!-- project {name}: run -->` block")
        return 1
    failed, skipped = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if python:
            bin_dir = pathlib.Path(tmp) / "bin"
            bin_dir.mkdir()
            (bin_dir / "python3").symlink_to(shutil.which(python) or python)
            env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        for number, script in enumerate(scripts, 1):
            title = f"{md.name}, project {name}, script {number} ({script.splitlines()[0]})"
            missing = [c for c in commands_of(script) if shutil.which(c, path=env["PATH"]) is None]
            if missing:
                print(f"SKIP {title}: {', '.join(missing)} not found")
                skipped.append(title)
                continue
            directory = pathlib.Path(tmp) / f"script_{number}"
            directory.mkdir()
            (directory / "runhooks").symlink_to(pathlib.Path(source_root).resolve())
            for filename, content in files.items():
                (directory / filename).write_text(content)
            run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=directory,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=900, env=env)
            if run.returncode != 0:
                print(f"FAIL {title}: exit {run.returncode}\n--- the script:\n{script}--- its "
                      f"output:\n{run.stdout}")
                failed += 1
                continue
            print(f"ok   {title}: exit 0; its last lines:")
            print("\n".join("       " + line for line in run.stdout.splitlines()[-3:]))
    if failed:
        return 1
    return 77 if skipped else 0


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--project":
        if len(args) not in (4, 5):
            print(__doc__)
            return 2
        return check_project(args[1], pathlib.Path(args[2]), args[3],
                             args[4] if len(args) == 5 else None)
    update = "--update" in args
    syntax_only = "--syntax-only" in args
    args = [a for a in args if a not in ("--update", "--syntax-only")]
    if "--" not in args:
        print(__doc__)
        return 2
    split = args.index("--")
    if args[0] == "--sample":
        unordered = [args[i + 1] for i in range(3, split) if args[i] == "--unordered"]
        return check_sample(args[1], pathlib.Path(args[2]), args[split + 1:], update, unordered)
    files, compiler = [pathlib.Path(a) for a in args[:split]], args[split + 1:]
    failed = total = 0
    # stdout line-buffered, as on a terminal, so that the order of its lines and stderr's is the
    # order a reader of the docs sees.
    line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    with tempfile.TemporaryDirectory() as tmp:
        for md in files:
            text = md.read_text()
            replacements = []
            for match in BLOCK.finditer(text):
                code, expected = match.group(1), match.group(2)
                if "int main" not in code or in_project(text, match.start()):
                    continue
                total += 1
                name = f"{md.name} program {total} ({code.strip().splitlines()[0]})"
                src = pathlib.Path(tmp) / f"program_{total}.cpp"
                exe = pathlib.Path(tmp) / f"program_{total}"
                src.write_text(code)
                output = ["-fsyntax-only"] if syntax_only else ["-o", str(exe)]
                build = subprocess.run(compiler + [str(src)] + output, capture_output=True,
                                       text=True)
                if build.returncode != 0:
                    print(f"{name} does not compile:\n{build.stdout}{build.stderr}")
                    failed += 1
                    continue
                if syntax_only:
                    print(f"{name}: compiles")
                    continue
                run = subprocess.run(line_buffered + [str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, timeout=60, cwd=tmp)
                if run.returncode != 0:
                    print(f"{name} exited {run.returncode}:\n{run.stdout}")
                    failed += 1
                    continue
                if expected is not None:
                    if update:
                        replacements.append((match.start(2), match.end(2), run.stdout))
                    elif not matches(expected, run.stdout):
                        print(f"{name}: its output is not the block after it (numbers aside).\n"
                              f"--- the block:\n{expected}--- the output:\n{run.stdout}"
                              f"(`tools/check_readme.py --update` rewrites the block from a run)")
                        failed += 1
                        continue
                print(f"{name}: ok" + ("" if expected is None else ", output as shown"))
            for start, end, output in reversed(replacements):
                text = text[:start] + output + text[end:]
            if replacements:
                md.write_text(text)
    if total == 0:
        print("no C++ programs found")
        return 1
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
