#!/usr/bin/env python3
"""Compile time of runhooks' headers, as ratios to a floor translation unit measured in the same
run.

The floor TU includes only what a session that reads a clock, checks a flag and walks a Hana
tuple cannot avoid: <vector>, <chrono>, <atomic>, <boost/hana/tuple.hpp> and
<boost/hana/for_each.hpp>. Every other TU is timed against it, interleaved (one round compiles
every TU once, in order; several rounds), keeping each TU's best CPU time (user + system of the
compiler), so a load that comes and goes on a shared machine inflates all TUs alike or none.

The target (issue 10): the README's quick start, compiled with <runhooks/core.hpp>, at most 1.25x
the floor TU with `g++ -std=c++20 -O0 -fsyntax-only`. --check exits 1 when it is missed.
--instructions also counts the compiler's instructions with callgrind for the floor and the
quick start: slower, but the same on a busy machine as on an idle one.

  tools/compile_time.py [--cxx g++] [--rounds 7] [--check] [--instructions] [--json out.json]
"""

import argparse
import glob
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["-std=c++20", "-O0", "-fsyntax-only"]
TARGET_RATIO = 1.25

FLOOR = """#include <vector>
#include <chrono>
#include <atomic>
#include <boost/hana/tuple.hpp>
#include <boost/hana/for_each.hpp>
int main() { return 0; }
"""

# The README's quick start, with the core header.
QUICK_START = """#include <runhooks/core.hpp>
#include <cstdint>

struct Trainer {
  std::int64_t step = 0;
  float loss = 1.0f;
  void run() { loss *= 0.999f; ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::StopAtStepHook({.num_steps = 1000}),
                                     runhooks::StepCounterHook({.every_n_steps = 100})};
  while (!session.should_stop()) session.run();
}
"""

FLOOR_LABEL = "floor TU (vector, chrono, atomic, hana tuple, for_each)"
QUICK_START_LABEL = "quick start with <runhooks/core.hpp>"


def public_headers(include):
    """Every public header that compiles with the base dependencies (Boost, the standard library):
    the folders that need MPI, libtorch or Google Benchmark are left out."""
    needs = ("runhooks/mpi/", "runhooks/torch/", "runhooks/benchmark.hpp", "runhooks/detail/")
    headers = []
    for path in sorted(glob.glob(os.path.join(include, "runhooks", "**", "*.hpp"), recursive=True)):
        rel = os.path.relpath(path, include)
        if not rel.startswith(needs):
            headers.append(rel)
    return headers


def cpu_secs(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"compile_time.py: {shlex.join(cmd)} failed:\n{result.stderr}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def instructions(cmd, tmp):
    """Instructions the compiler (driver and cc1plus) executes, counted by callgrind."""
    out = os.path.join(tmp, "callgrind.%p")
    for f in glob.glob(os.path.join(tmp, "callgrind.*")):
        os.remove(f)
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                    f"--callgrind-out-file={out}", *cmd], capture_output=True, check=True)
    total = 0
    for f in glob.glob(os.path.join(tmp, "callgrind.*")):
        with open(f) as data:
            for line in data:
                if line.startswith("summary:") or line.startswith("totals:"):
                    total += int(line.split()[1])
                    break
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cxx", action="append", help="compiler (repeatable); default g++")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cxxflags", default="", help="extra flags, e.g. -isystem for Hana")
    parser.add_argument("--headers", action="store_true",
                        help="also time each public header on its own")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions with callgrind (floor and quick start)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the quick start exceeds the target ratio (g++)")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()

    compilers = args.cxx or ["g++"]
    include = os.path.join(ROOT, "include")
    flags = shlex.split(args.cxxflags)
    results = []
    with tempfile.TemporaryDirectory(prefix="runhooks-compile-time-") as tmp:
        sources = {FLOOR_LABEL: FLOOR, QUICK_START_LABEL: QUICK_START,
                   "#include <runhooks/core.hpp>, no session":
                       "#include <runhooks/core.hpp>\nint main() { return 0; }\n",
                   "#include <runhooks/runhooks.hpp> (everything)":
                       "#include <runhooks/runhooks.hpp>\nint main() { return 0; }\n"}
        if args.headers:
            for h in public_headers(include):
                sources[f"#include <{h}>"] = f"#include <{h}>\nint main() {{ return 0; }}\n"
        paths = {}
        for i, (label, text) in enumerate(sources.items()):
            paths[label] = os.path.join(tmp, f"tu{i}.cpp")
            with open(paths[label], "w") as f:
                f.write(text)
        for cxx in compilers:
            if not shutil.which(shlex.split(cxx)[0]):
                sys.exit(f"compile_time.py: compiler not found: {cxx}")
            version = subprocess.run(shlex.split(cxx) + ["--version"], capture_output=True,
                                     text=True).stdout.splitlines()[0]
            cmds = {label: shlex.split(cxx) + FLAGS + ["-I", include, *flags, path]
                    for label, path in paths.items()}
            best = {label: float("inf") for label in cmds}
            for _ in range(args.rounds):
                for label, cmd in cmds.items():
                    best[label] = min(best[label], cpu_secs(cmd))
            floor = best[FLOOR_LABEL]
            rows = [{"source": label, "secs": secs, "ratio": secs / floor}
                    for label, secs in best.items()]
            entry = {"compiler": os.path.basename(shlex.split(cxx)[0]), "version": version,
                     "flags": " ".join(FLAGS + flags), "rounds": args.rounds, "rows": rows}
            if args.instructions:
                floor_i = instructions(cmds[FLOOR_LABEL], tmp)
                quick_i = instructions(cmds[QUICK_START_LABEL], tmp)
                entry["instructions"] = {"floor": floor_i, "quick_start": quick_i,
                                         "ratio": quick_i / floor_i}
            results.append(entry)

    missed = False
    for r in results:
        print(f"\n{r['version']}  ({r['flags']}, best of {r['rounds']} interleaved rounds)")
        print(f"  {'translation unit':<62} {'CPU s':>7} {'x floor':>8}")
        for row in r["rows"]:
            print(f"  {row['source']:<62} {row['secs']:7.3f} {row['ratio']:8.2f}")
        quick = next(x for x in r["rows"] if x["source"] == QUICK_START_LABEL)
        ok = quick["ratio"] <= TARGET_RATIO
        print(f"  quick start: {quick['ratio']:.2f}x the floor, target <= {TARGET_RATIO}x: "
              f"{'met' if ok else 'NOT met'}")
        if "instructions" in r:
            i = r["instructions"]
            print(f"  instructions (callgrind): floor {i['floor']:,}, quick start "
                  f"{i['quick_start']:,}: {i['ratio']:.3f}x")
        if r["compiler"] == "g++" and not ok:
            missed = True
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target_ratio": TARGET_RATIO, "results": results}, f, indent=1)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
