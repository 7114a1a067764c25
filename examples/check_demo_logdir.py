#!/usr/bin/env python3
"""Runs examples/demo with --logdir and reads the directory as TensorBoard does (issue 17).

Usage: check_demo_logdir.py DEMO_EXECUTABLE SOURCE_ROOT

The demo's log directory must hold one event file, and TensorBoard's EventAccumulator on the
directory (tools/read_summaries.py) must return one SessionLog START and the `Loss` scalar and
the `weights` histogram at every step SummarySaverHook writes (its first run, then every 500
global steps up to the last step the demo reports). An unknown argument is refused with exit 2.
Exits 77 (Meson's SKIP) without the tensorboard package.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile


def fail(what):
    print("FAIL " + what)
    sys.exit(1)


def main():
    demo, source_root = sys.argv[1], sys.argv[2]
    bogus = subprocess.run([demo, "--bogus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if bogus.returncode != 2 or "unknown argument '--bogus'" not in bogus.stderr:
        fail(f"demo --bogus: exit {bogus.returncode}, stderr {bogus.stderr!r}")
    print("ok   demo --bogus is refused")
    try:
        import tensorboard  # noqa: F401  (only whether it is there)
    except ImportError:
        print("SKIP: the tensorboard package is not installed")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "logs")
        run = subprocess.run([demo, "--logdir", logdir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        if run.returncode != 0:
            fail(f"demo exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
        m = re.search(r"^after (\d+) steps:", run.stdout, re.M)
        if not m:
            fail("no `after N steps:` line")
        last = int(m.group(1))
        files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
        if len(files) != 1:
            fail(f"{len(files)} event files in {logdir}, expected one")
        proc = subprocess.run([sys.executable, os.path.join(source_root, "tools", "read_summaries.py"), logdir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            fail("TensorBoard's reader failed:\n" + proc.stderr)
        loss, weights, starts = [], [], []
        for line in proc.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "scalar" and fields[1] == "Loss":
                loss.append(int(fields[2]))
            elif fields[0] == "histogram" and fields[1] == "weights":
                weights.append(int(fields[2]))
            elif fields[0] == "session_log" and fields[2] == "START":
                starts.append(int(fields[1]))
        expected = list(range(1, last + 1, 500))
        if starts != [1]:
            fail(f"SessionLog START at {starts}, expected [1]")
        if loss != expected or weights != expected:
            fail(f"loss at {loss}, weights at {weights}, expected both at {expected}")
        print(f"ok   TensorBoard reads the demo's directory: loss and weights at {expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
