#!/usr/bin/env python3
"""Check that a C++ file fails to compile with the diagnostic it announces.

Usage: run_compile_fail.py CASE.cpp -- COMPILER [ARG...]

CASE.cpp must start with one or more lines of the form

    // expect: <text>

The runner compiles CASE.cpp with `COMPILER ARG... CASE.cpp` and passes only if compilation
fails and the compiler's output (stdout and stderr) contains every expected <text> verbatim.
A bare `meson test ... should_fail: true` would also pass on a typo or a wrong include path;
this is why the message is checked. On any failure the compiler output is printed.

Two more kinds of line may follow the first, in the same leading block of comments:

    // flags: <arg...>         compiler arguments for this case (split like a shell would);
                               a -std= among them replaces the command's -std=
    // first-error: <text>     the first error the compiler reports must contain <text>:
                               the case fails if another error comes before it
    // max-lines: <n>          the compiler's output is at most <n> lines: the diagnostic is
                               the whole message, not the first of many
"""

import re
import shlex
import subprocess
import sys

EXPECT_PREFIX = "// expect:"
FLAGS_PREFIX = "// flags:"
FIRST_ERROR_PREFIX = "// first-error:"
MAX_LINES_PREFIX = "// max-lines:"

# A diagnostic line of GCC or Clang that reports an error: `file:line:col: error: ...`,
# `fatal error: ...`, or `error: ...` at the start of a line (e.g. from the driver).
ERROR_LINE = re.compile(r"(^|: )(fatal )?error: ")


def directives(path):
    """The leading `// expect:`, `// flags:`, `// first-error:` and `// max-lines:` lines.

    Returns (expected texts, extra compiler arguments, first-error texts, the line limit or
    None). Reading stops at the first line that is none of these; the first line must be
    `// expect:` (checked by main). A limit that is not a positive integer raises ValueError.
    """
    expected, flags, first_errors, max_lines = [], [], [], None
    with open(path, encoding="utf-8") as source:
        for line in source:
            line = line.strip()
            for prefix, into in ((EXPECT_PREFIX, expected), (FIRST_ERROR_PREFIX, first_errors)):
                if line.startswith(prefix):
                    text = line[len(prefix):].strip()
                    if text:
                        into.append(text)
                    break
            else:
                if line.startswith(MAX_LINES_PREFIX):
                    text = line[len(MAX_LINES_PREFIX):].strip()
                    if not text.isdigit() or int(text) < 1:
                        raise ValueError(f"{path}: `{MAX_LINES_PREFIX}` needs a positive "
                                         f"integer, got {text!r}")
                    max_lines = int(text)
                elif line.startswith(FLAGS_PREFIX):
                    flags += shlex.split(line[len(FLAGS_PREFIX):])
                else:
                    break
    return expected, flags, first_errors, max_lines


def with_flags(command, flags):
    """The command with a case's flags appended; a -std= flag replaces the command's own."""
    if any(flag.startswith("-std=") for flag in flags):
        command = [arg for arg in command if not arg.startswith("-std=")]
    return command + flags


def first_error_line(output):
    """The first line of compiler output that reports an error, or None."""
    return next((line for line in output.splitlines() if ERROR_LINE.search(line)), None)


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    case = argv[1]
    with open(case, encoding="utf-8") as source:
        first_line = source.readline().strip()
    try:
        expected, flags, first_errors, max_lines = directives(case)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    if not first_line.startswith(EXPECT_PREFIX) or not expected:
        print(f"{case}: the first line must be `{EXPECT_PREFIX} <text>`", file=sys.stderr)
        return 1
    command = with_flags(argv[3:], flags) + [case]

    try:
        result = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as error:
        print(f"FAIL {case}: cannot run the compiler: {error}", file=sys.stderr)
        return 1
    output = result.stdout

    def fail(reason):
        print(f"FAIL {case}: {reason}")
        print("command: " + " ".join(command))
        print("---- compiler output ----")
        print(output, end="" if output.endswith("\n") else "\n")
        print("-------------------------")
        return 1

    if result.returncode == 0:
        return fail("it compiled, but it must not")
    missing = [text for text in expected if text not in output]
    if missing:
        return fail("compilation failed without the expected text: "
                    + "; ".join(repr(text) for text in missing))
    first_error = first_error_line(output)
    for text in first_errors:
        if first_error is None or text not in first_error:
            return fail(f"the first error is not the one with {text!r}: {first_error!r}")
    if max_lines is not None and len(output.splitlines()) > max_lines:
        return fail(f"the compiler printed {len(output.splitlines())} lines, more than the "
                    f"{max_lines} of `{MAX_LINES_PREFIX} {max_lines}`: it went on after the "
                    "expected error")
    print(f"ok {case}: fails to compile with " + "; ".join(repr(t) for t in expected))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
