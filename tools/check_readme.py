#!/usr/bin/env python3
"""Compiles and runs every C++ block of README.md that is a whole program (has `int main`).

Usage: check_readme.py README.md -- <compiler and flags...>
The README's code cannot rot: each program must compile with the given flags and exit 0.
"""
import pathlib
import re
import subprocess
import sys
import tempfile


def main() -> int:
    if "--" not in sys.argv:
        print(__doc__)
        return 2
    split = sys.argv.index("--")
    readme = pathlib.Path(sys.argv[1])
    compiler = sys.argv[split + 1:]
    blocks = re.findall(r"```cpp\n(.*?)```", readme.read_text(), flags=re.S)
    programs = [b for b in blocks if "int main" in b]
    if not programs:
        print(f"no C++ programs found in {readme}")
        return 1
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, code in enumerate(programs, 1):
            src = pathlib.Path(tmp) / f"readme_{i}.cpp"
            exe = pathlib.Path(tmp) / f"readme_{i}"
            src.write_text(code)
            first = code.strip().splitlines()[0]
            build = subprocess.run(compiler + [str(src), "-o", str(exe)], capture_output=True, text=True)
            if build.returncode != 0:
                print(f"README program {i} ({first}) does not compile:\n{build.stdout}{build.stderr}")
                failed += 1
                continue
            run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
            if run.returncode != 0:
                print(f"README program {i} exited {run.returncode}:\n{run.stdout}{run.stderr}")
                failed += 1
                continue
            print(f"README program {i}: ok")
    print(f"{len(programs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
