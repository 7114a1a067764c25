#!/usr/bin/env python3
"""Measures what runhooks adds to compile times: an empty translation unit, one that includes
<runhooks/runhooks.hpp>, and the quick start, compiled to an object file with each compiler at
-O2: the median, over several runs, of the compiler's CPU time (user + system; on a busy
machine wall time mostly measures the other jobs), with the median wall time beside it. A
fourth TU includes only the standard headers that runhooks' headers include, to tell what the
standard library costs from what runhooks itself adds. The target is < 0.5 s added.

  tools/compile_time.py [--cxx g++ --cxx clang++] [--runs 5] [--quick-start FILE] [--json out]

The quick start is examples/quick_start.cpp when it exists, else the program below.
"""

import argparse
import json
import glob
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["-std=c++20", "-O2"]
TARGET_ADDED_SECS = 0.5

QUICK_START = r"""
#include <runhooks/runhooks.hpp>

#include <cstdint>

struct Backend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::MonitoredSession session{
      Backend{}, runhooks::StopAtStepHook({.last_step = 1000}),
      runhooks::StepCounterHook({.every_n_steps = 100})};
  runhooks::run_loop(session);
  return session.raw_session().step == 1000 ? 0 : 1;
}
"""

SOURCES = {
    "empty TU": "int main() { return 0; }\n",
    "#include <runhooks/runhooks.hpp>": "#include <runhooks/runhooks.hpp>\nint main() { return 0; }\n",
}


def std_headers(include):
    """The standard headers runhooks' own headers include."""
    names = set()
    for path in glob.glob(os.path.join(include, "runhooks", "**", "*.hpp"), recursive=True):
        if path.endswith("benchmark.hpp"):
            continue  # needs Google Benchmark; not part of runhooks.hpp
        with open(path) as f:
            names |= set(re.findall(r"^#include <([a-z_]+)>", f.read(), re.M))
    return sorted(names)


def time_compile(cxx, source, include, runs, flags):
    """Median CPU seconds and median wall seconds of compiling source."""
    cmd = shlex.split(cxx) + FLAGS + ["-I", include, *flags, "-c", source, "-o", os.devnull]
    cpu, wall = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            sys.exit(f"compile_time.py: {shlex.join(cmd)} failed:\n{result.stderr}")
    return statistics.median(cpu), statistics.median(wall)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cxx", action="append", help="compiler (repeatable); default g++, clang++")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick-start", help="the quick start source to time")
    parser.add_argument("--cxxflags", default="", help="extra flags, e.g. -isystem for Hana")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()

    compilers = args.cxx or ["g++", "clang++"]
    flags = shlex.split(args.cxxflags)
    include = os.path.join(ROOT, "include")
    quick_start = args.quick_start or os.path.join(ROOT, "examples", "quick_start.cpp")
    results = []
    with tempfile.TemporaryDirectory(prefix="runhooks-compile-time-") as tmp:
        sources = {}
        all_sources = dict(SOURCES)
        all_sources["standard headers runhooks uses (no runhooks)"] = "".join(
            f"#include <{h}>\n" for h in std_headers(include)) + "int main() { return 0; }\n"
        for label, text in all_sources.items():
            path = os.path.join(tmp, f"tu{len(sources)}.cpp")
            with open(path, "w") as f:
                f.write(text)
            sources[label] = path
        if os.path.exists(quick_start):
            sources[f"quick start ({os.path.relpath(quick_start, ROOT)})"] = quick_start
        else:
            path = os.path.join(tmp, "quick_start.cpp")
            with open(path, "w") as f:
                f.write(QUICK_START)
            sources["quick start (tools/compile_time.py)"] = path
        for cxx in compilers:
            if not shutil.which(shlex.split(cxx)[0]):
                sys.exit(f"compile_time.py: compiler not found: {cxx}")
            version = subprocess.run(shlex.split(cxx) + ["--version"], capture_output=True,
                                     text=True).stdout.splitlines()[0]
            times = {label: time_compile(cxx, path, include, args.runs, flags)
                     for label, path in sources.items()}
            base = times["empty TU"][0]
            results.append({"compiler": os.path.basename(shlex.split(cxx)[0]), "version": version,
                            "flags": " ".join(FLAGS + flags) + " -c",
                            "runs": args.runs,
                            "rows": [{"source": label, "secs": t[0], "added_secs": t[0] - base,
                                      "wall_secs": t[1]}
                                     for label, t in times.items()]})

    for r in results:
        print(f"\n{r['version']}  ({r['flags']}, median of {r['runs']})")
        print(f"  {'translation unit':<48} {'CPU s':>8} {'added':>8} {'wall s':>8}")
        for row in r["rows"]:
            print(f"  {row['source']:<48} {row['secs']:8.3f} {row['added_secs']:+8.3f} "
                  f"{row['wall_secs']:8.3f}")
        added = next(x["added_secs"] for x in r["rows"] if x["source"].startswith("#include"))
        print(f"  include adds {added:.3f} s: target < {TARGET_ADDED_SECS} s "
              f"{'met' if added < TARGET_ADDED_SECS else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target_added_secs": TARGET_ADDED_SECS, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
