#!/usr/bin/env python3
"""Runs examples/demo and checks what its command line and its TensorBoard directory promise.

Usage: check_demo_logdir.py CASE DEMO_EXECUTABLE SOURCE_ROOT

CASE:
  default  (test `demo`) A copy of the demo in a temporary directory, run without arguments,
           exits 0 (the demo checks what it learned) and keeps its TensorBoard files in a new
           directory next to itself, demo-runs/run-YYYYMMDD-HHMMSS[-N], holding one event file;
           its first line is `TensorBoard files in DIR` and its last `tensorboard --logdir DIR`,
           DIR relative to the current directory when below it. A second run, with --steps 1200
           and from another directory, stops after step 1200, prints an absolute DIR, and gets a
           directory of its own, leaving the first run's file as it was.
  args     (test `demo_args`) An unknown argument, a missing value, and --steps 0, x, -3, 5x,
           =5 and a number past int64 each exit 2 with one line on stderr naming the argument
           and the value, before any directory is made; --help exits 0 with the usage on stdout.
  logdir   (test `demo_logdir`) With --logdir DIR, DIR holds one event file and TensorBoard's
           EventAccumulator on it (tools/read_summaries.py) returns one SessionLog START and the
           `Loss` scalar and the `weights` histogram at every step SummarySaverHook writes (its
           first run, then every 500 global steps up to the last step the demo reports), and the
           `global_step/sec` scalar StepCounterHook charts every 1000 steps from step 1001. Exits
           77 (Meson's SKIP) without the tensorboard package.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
RUN_NAME = re.compile(r"run-\d{8}-\d{6}(-\d+)?")


def fail(what):
    print("FAIL " + what)
    sys.exit(1)


def run(cmd, cwd=None):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                          timeout=120)


def copy_of(demo, directory):
    """The demo copied into `directory`: its default run directories then go there, not into
    the build directory."""
    os.makedirs(directory)
    copy = os.path.join(directory, "demo")
    shutil.copy2(demo, copy)
    return copy


def event_files(directory):
    return sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))


def successful_run(cmd, cwd):
    """Runs the demo, which must exit 0 and end with `tensorboard --logdir DIR`. Returns (stdout,
    DIR as printed, DIR as a path)."""
    proc = run(cmd, cwd)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    lines = proc.stdout.splitlines()
    words = shlex.split(lines[-1]) if lines else []
    if len(words) != 3 or words[:2] != ["tensorboard", "--logdir"]:
        fail(f"the last line is {lines[-1:]!r}, expected `tensorboard --logdir DIR`")
    printed = words[2]
    if lines[0] != f"TensorBoard files in {printed}":
        fail(f"the first line is {lines[0]!r}, expected `TensorBoard files in {printed}`")
    return proc.stdout, printed, os.path.join(cwd, printed)


def check_default(demo):
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_of(demo, os.path.join(tmp, "bin"))
        runs = os.path.join(tmp, "bin", "demo-runs")

        out, printed, first = successful_run([copy], cwd=tmp)
        if os.path.isabs(printed) or os.path.dirname(printed) != os.path.join("bin", "demo-runs"):
            fail(f"run from {tmp}: DIR {printed!r}, expected bin/demo-runs/run-... (relative)")
        if not RUN_NAME.fullmatch(os.path.basename(printed)):
            fail(f"run directory {printed!r} is not named run-YYYYMMDD-HHMMSS[-N]")
        if not re.search(r"^after \d+ steps:$", out, re.M):
            fail("no `after N steps:` line")
        files = event_files(first)
        if len(files) != 1 or os.listdir(first) != [os.path.basename(files[0])]:
            fail(f"{first} holds {os.listdir(first)}, expected one event file")
        kept = (files[0], os.path.getsize(files[0]))
        print(f"ok   demo: exit 0, last line `tensorboard --logdir {printed}`, one event file kept "
              f"there")

        elsewhere = os.path.join(tmp, "elsewhere")
        os.makedirs(elsewhere)
        out, printed, second = successful_run([copy, "--steps", "1200"], cwd=elsewhere)
        if not re.search(r"^after 1200 steps:$", out, re.M):
            fail("demo --steps 1200: no `after 1200 steps:` line")
        if not os.path.isabs(printed) or os.path.dirname(printed) != os.path.realpath(runs):
            fail(f"run from {elsewhere}: DIR {printed!r}, expected an absolute path in {runs}")
        if os.path.realpath(second) == os.path.realpath(first) or len(event_files(second)) != 1:
            fail(f"the second run wrote {event_files(second)} into {second}, expected one event "
                 f"file in a new directory")
        if sorted(os.listdir(runs)) != sorted([os.path.basename(first), os.path.basename(second)]):
            fail(f"{runs} holds {os.listdir(runs)}, expected the two runs' directories")
        if event_files(first) != [kept[0]] or os.path.getsize(kept[0]) != kept[1]:
            fail(f"the second run changed the first run's directory {first}")
        print(f"ok   demo --steps 1200 from another directory: after 1200 steps, "
              f"`tensorboard --logdir {printed}` (absolute), the first run's file untouched")
    return 0


def check_args(demo):
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_of(demo, os.path.join(tmp, "bin"))
        refused = [
            (["--bogus"], "demo: unknown argument '--bogus'; see demo --help"),
            (["--steps", "10", "extra"], "demo: unknown argument 'extra'; see demo --help"),
            (["--steps=5"], "demo: unknown argument '--steps=5'; see demo --help"),
            (["--steps"], "demo: --steps needs a value; see demo --help"),
            (["--logdir"], "demo: --logdir needs a value; see demo --help"),
            (["--logdir", ""], "demo: --logdir must be a directory, got ''"),
        ] + [(["--steps", value], f"demo: --steps must be a positive integer, got '{value}'")
             for value in ["0", "x", "-3", "5x", "", " 5", "99999999999999999999"]]
        for args, message in refused:
            proc = run([copy] + args, cwd=tmp)
            if proc.returncode != 2 or proc.stderr != message + "\n" or proc.stdout:
                fail(f"demo {shlex.join(args)}: exit {proc.returncode}, stdout {proc.stdout!r}, "
                     f"stderr {proc.stderr!r}; expected exit 2 and {message!r}")
            print(f"ok   demo {shlex.join(args)}: exit 2, {message!r}")
        made = [p for p in os.listdir(os.path.join(tmp, "bin")) if p != "demo"] + \
            [p for p in os.listdir(tmp) if p != "bin"]
        if made:
            fail(f"a refused command line made {made}")
        for flag in ["--help", "-h"]:
            proc = run([copy, flag], cwd=tmp)
            if (proc.returncode != 0 or proc.stderr or not proc.stdout.startswith("usage: demo ")
                    or "--steps N" not in proc.stdout or "--logdir DIR" not in proc.stdout):
                fail(f"demo {flag}: exit {proc.returncode}, stdout {proc.stdout!r}, stderr "
                     f"{proc.stderr!r}; expected exit 0 and the usage")
            print(f"ok   demo {flag}: exit 0 and the usage")
        if os.listdir(tmp) != ["bin"] or os.listdir(os.path.join(tmp, "bin")) != ["demo"]:
            fail("--help made a directory")
    return 0


def check_logdir(demo, source_root):
    try:
        import tensorboard  # noqa: F401  (only whether it is there)
    except ImportError:
        print("SKIP: the tensorboard package is not installed")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "logs")
        out, printed, _ = successful_run([demo, "--logdir", logdir], cwd=tmp)
        if os.path.realpath(os.path.join(tmp, printed)) != os.path.realpath(logdir):
            fail(f"--logdir {logdir}: the last line names {printed!r}")
        m = re.search(r"^after (\d+) steps:", out, re.M)
        if not m:
            fail("no `after N steps:` line")
        last = int(m.group(1))
        files = event_files(logdir)
        if len(files) != 1:
            fail(f"{len(files)} event files in {logdir}, expected one")
        reader = os.path.join(source_root, "tools", "read_summaries.py")
        proc = run([sys.executable, reader, logdir])
        if proc.returncode != 0:
            fail("TensorBoard's reader failed:\n" + proc.stderr)
        loss, weights, starts, rates = [], [], [], []
        for line in proc.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "scalar" and fields[1] == "Loss":
                loss.append(int(fields[2]))
            elif fields[0] == "scalar" and fields[1] == "global_step/sec":
                rates.append(int(fields[2]))
            elif fields[0] == "histogram" and fields[1] == "weights":
                weights.append(int(fields[2]))
            elif fields[0] == "session_log" and fields[2] == "START":
                starts.append(int(fields[1]))
        expected = list(range(1, last + 1, 500))
        if starts != [1]:
            fail(f"SessionLog START at {starts}, expected [1]")
        if loss != expected or weights != expected:
            fail(f"loss at {loss}, weights at {weights}, expected both at {expected}")
        # The rate's first trigger (step 1) only starts the clock, as in TensorFlow.
        expected_rates = list(range(1001, last + 1, 1000))
        if not expected_rates or rates != expected_rates:
            fail(f"global_step/sec at {rates}, expected {expected_rates}")
        print(f"ok   TensorBoard reads the demo's directory: loss and weights at {expected}, "
              f"global_step/sec at {expected_rates}")
    return 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("default", "args", "logdir"):
        sys.exit("usage: check_demo_logdir.py default|args|logdir DEMO_EXECUTABLE SOURCE_ROOT")
    case, demo, source_root = sys.argv[1:]
    demo = os.path.abspath(demo)
    if case == "default":
        return check_default(demo)
    if case == "args":
        return check_args(demo)
    return check_logdir(demo, source_root)


if __name__ == "__main__":
    sys.exit(main())
