#!/usr/bin/env python3
"""Runs examples/torch/train_digits and checks what it claims (Meson suite 'torch').

  check_train_digits.py CASE TRAIN_DIGITS --data DIGITS_CSV_GZ [--source-root DIR]

CASE:
  accuracy  one run with a TensorBoard log directory, seed 1: the last line reads
            `test accuracy: X on the held-out split (359 images)` with X >= 0.9; the batch loss
            and accuracy were logged at every --log-every step and nowhere else; the backend
            converted a tensor (.item()) only for those fetches and the final evaluation; and
            TensorBoard's own reader (tools/read_events.py, with the tensorboard package) finds
            the loss, accuracy and global_step/sec scalars at those steps.

Exits 77 (Meson: skipped) when the digits data is missing, saying how to fetch it; never passes
without running the example.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
MIN_ACCURACY = 0.9


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def run_example(exe, args):
    cmd = [exe] + args
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=240)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        fail(f"train_digits exited with {proc.returncode}")
    return proc.stdout


def test_accuracy(exe, data, source_root):
    steps, every = 1500, 250
    with tempfile.TemporaryDirectory(prefix="runhooks-train-digits-") as logdir:
        out = run_example(exe, ["--data", data, "--steps", str(steps), "--log-every", str(every),
                                "--seed", "1", "--logdir", logdir])

        m = re.search(r"^test accuracy: ([0-9.]+) on the held-out split \((\d+) images\)$", out,
                      re.M)
        if not m:
            fail("no `test accuracy: X on the held-out split (N images)` line")
        accuracy, held_out = float(m.group(1)), int(m.group(2))
        if held_out != 359:
            fail(f"held-out split of {held_out} images, expected 359 (every fifth)")
        if accuracy < MIN_ACCURACY:
            fail(f"test accuracy {accuracy} < {MIN_ACCURACY}")
        print(f"ok: test accuracy {accuracy} >= {MIN_ACCURACY}")

        logged = [int(s) for s in re.findall(r"^step (\d+): batch loss [0-9.]+, batch accuracy "
                                             r"[0-9.]+$", out, re.M)]
        expected = list(range(every, steps + 1, every))
        if logged != expected:
            fail(f"batch metrics logged at steps {logged}, expected {expected}")
        m = re.search(r"^trained to step (\d+) in .* (\d+) tensor conversions \(\.item\(\)\)$",
                      out, re.M)
        if not m or int(m.group(1)) != steps:
            fail(f"no `trained to step {steps} ...` line")
        # Two fetches (loss, accuracy) per logging step; the final evaluation runs after it.
        if int(m.group(2)) != 2 * len(expected):
            fail(f"{m.group(2)} .item() calls during training, expected {2 * len(expected)}")
        print(f"ok: {m.group(2)} .item() calls in {steps} steps, all on logging steps")

        files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
        if len(files) != 1:
            fail(f"expected one event file in the log directory, found {files}")
        try:
            import tensorboard  # noqa: F401  (only whether it is there)
        except ImportError:
            print("note: the tensorboard package is not installed; the event file was not read "
                  "back with TensorBoard's reader")
            return
        reader = os.path.join(source_root, "tools", "read_events.py")
        proc = subprocess.run([sys.executable, reader, files[0]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            fail("TensorBoard's reader failed:\n" + proc.stderr)
        scalars = {}
        for line in proc.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "scalar":
                scalars.setdefault(fields[1], []).append((int(fields[2]), float(fields[4])))
        for tag in ("loss", "accuracy"):
            if [s for s, _ in scalars.get(tag, [])] != expected:
                fail(f"TensorBoard reads {tag} at steps {scalars.get(tag)}, expected {expected}")
        if not all(0.0 <= v <= 1.0 for _, v in scalars["accuracy"]):
            fail(f"batch accuracy out of range: {scalars['accuracy']}")
        # StepCounterHook's first trigger records nothing (TensorFlow's rule).
        if [s for s, _ in scalars.get("global_step/sec", [])] != expected[1:]:
            fail(f"global_step/sec at {scalars.get('global_step/sec')}, expected {expected[1:]}")
        print(f"ok: TensorBoard reads loss, accuracy and global_step/sec at steps {expected}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["accuracy"])
    parser.add_argument("train_digits")
    parser.add_argument("--data", default="")
    parser.add_argument("--source-root", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    args = parser.parse_args()
    if not args.data or not os.path.isfile(args.data):
        print(f"SKIP: no digits data ({args.data or '-Ddigits_csv is empty'}): run "
              "tools/fetch_digits.py PATH and configure with -Ddigits_csv=PATH (./dev test does)")
        return SKIP
    if args.case == "accuracy":
        test_accuracy(args.train_digits, args.data, args.source_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
