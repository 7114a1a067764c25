#!/usr/bin/env python3
"""Check that a C++ file fails to compile with the diagnostic it announces.

Usage: run_compile_fail.py CASE.cpp -- COMPILER [ARG...]

CASE.cpp must start with one or more lines of the form

    // expect: <text>

The runner compiles CASE.cpp with `COMPILER ARG... CASE.cpp` and passes only if compilation
fails and the compiler's output (stdout and stderr) contains every expected <text> verbatim.
A bare `meson test ... should_fail: true` would also pass on a typo or a wrong include path;
this is why the message is checked. On any failure the compiler output is printed.
"""

import subprocess
import sys

EXPECT_PREFIX = "// expect:"


def expectations(path):
    """The texts of the leading `// expect:` lines; the first line must be one."""
    texts = []
    with open(path, encoding="utf-8") as source:
        for line in source:
            line = line.strip()
            if not line.startswith(EXPECT_PREFIX):
                break
            text = line[len(EXPECT_PREFIX):].strip()
            if text:
                texts.append(text)
    return texts


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    case, command = argv[1], argv[3:] + [argv[1]]

    expected = expectations(case)
    if not expected:
        print(f"{case}: the first line must be `{EXPECT_PREFIX} <text>`", file=sys.stderr)
        return 1

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
    print(f"ok {case}: fails to compile with " + "; ".join(repr(t) for t in expected))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
