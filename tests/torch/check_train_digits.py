#!/usr/bin/env python3
"""Runs examples/torch/train_digits and checks what it claims (Meson suite 'torch').

  check_train_digits.py CASE TRAIN_DIGITS --data DIGITS_CSV_GZ [--source-root DIR]

CASE:
  accuracy  one run with a TensorBoard log directory, seed 1: the last line reads
            `test accuracy: X on the held-out split (359 images)` with X >= 0.9; the batch loss
            and accuracy were logged at every --log-every step and nowhere else; the backend
            converted a tensor (.item()) only for those fetches and the final evaluation; and
            the model directory holds one event file, and TensorBoard reading the directory
            (tools/read_summaries.py, with the tensorboard package) finds one SessionLog START
            and the loss, accuracy and global_step/sec scalars at those steps.
  resume    a run with a model directory killed with SIGKILL at a random instant after its first
            checkpoint past step 0, then run again: the second run restores a checkpoint from
            the middle of training, ends at the same step as an uninterrupted run and with the
            same weights (checksum) and test accuracy, bit for bit.
  sigterm   the same, stopped by SIGTERM instead (SignalStopHook): the first run ends cleanly
            before the last step, saving its final checkpoint at the step it stopped at; the
            second run restores exactly that step and ends as the uninterrupted run.

Exits 77 (Meson: skipped) when the digits data is missing, saying how to fetch it; never passes
without running the example.
"""

import argparse
import glob
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

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
    with tempfile.TemporaryDirectory(prefix="runhooks-train-digits-") as model_dir:
        out = run_example(exe, ["--data", data, "--model-dir", model_dir, "--steps", str(steps),
                                "--log-every", str(every), "--save-steps", "500", "--seed", "1"])

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

        # LoggingTensorHook: on the first run and every `every` runs after it.
        logged = re.findall(r"^loss = [0-9.e+-]+, accuracy = [0-9.]+( \([0-9.]+ sec\))?$", out,
                            re.M)
        written = list(range(1, steps + 1, every))  # global steps 1, 251, ..., 1251
        if len(logged) != len(written):
            fail(f"{len(logged)} LoggingTensorHook lines, expected {len(written)}")
        m = re.search(r"^trained to step (\d+) in .* (\d+) tensor conversions \(\.item\(\)\)$",
                      out, re.M)
        if not m or int(m.group(1)) != steps:
            fail(f"no `trained to step {steps} ...` line")
        # The loss on every step (NanTensorHook fetches it every step, as TensorFlow's does), the
        # accuracy only on the steps that log or write it: LoggingTensorHook and SummarySaverHook
        # fetch it on the same steps, and a key fetched by several hooks is converted once. The
        # progress bar's loss is the one NanTensorHook fetches anyway, but its final line, drawn
        # in end(), reads the loss from the backend once more.
        conversions, expected_conversions = int(m.group(2)), steps + len(written) + 1
        if conversions != expected_conversions:
            fail(f"{conversions} .item() calls, expected {expected_conversions} ({steps} losses + "
                 f"{len(written)} accuracies + the progress bar's final loss)")
        print(f"ok: {conversions} .item() calls in {steps} steps: the accuracy only on the "
              f"{len(written)} steps that log it")

        files = sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents.*")))
        if len(files) != 1:
            fail(f"{len(files)} event files in the model directory, expected one shared by every "
                 f"hook: {files}")
        try:
            import tensorboard  # noqa: F401  (only whether it is there)
        except ImportError:
            print("note: the tensorboard package is not installed; the run directory was not read "
                  "back with TensorBoard's reader")
            return
        # The run directory as `tensorboard --logdir` loads it (one EventAccumulator over every
        # file), with TensorBoard's own record reader, not TensorFlow's (whose import takes ~20 s).
        reader = os.path.join(source_root, "tools", "read_summaries.py")
        proc = subprocess.run([sys.executable, reader, model_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            fail(f"TensorBoard's reader failed on {model_dir}:\n" + proc.stderr)
        scalars, starts = {}, []
        for line in proc.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "scalar":
                scalars.setdefault(fields[1], []).append((int(fields[2]), float(fields[3])))
            elif fields[0] == "session_log" and fields[2] == "START":
                starts.append(int(fields[1]))
        if len(starts) != 1:
            fail(f"SessionLog START at steps {starts}, expected one for the one session")
        # SummarySaverHook: the first run, then every `every` steps (TensorFlow's rule).
        for tag in ("loss", "accuracy"):
            if [s for s, _ in scalars.get(tag, [])] != written:
                fail(f"TensorBoard reads {tag} at steps {scalars.get(tag)}, expected {written}")
        if not all(0.0 <= v <= 1.0 for _, v in scalars["accuracy"]):
            fail(f"batch accuracy out of range: {scalars['accuracy']}")
        if not scalars["loss"][-1][1] < 0.5 * scalars["loss"][0][1]:
            fail(f"the loss did not fall: {scalars['loss']}")
        # StepCounterHook triggers on the first step and records nothing there (TensorFlow's
        # rule), then every `every` steps after it: 251, 501, ...
        rate_steps = list(range(every + 1, steps + 1, every))
        rates = scalars.get("global_step/sec", [])
        if [s for s, _ in rates] != rate_steps or not all(v > 0 for _, v in rates):
            fail(f"global_step/sec at {rates}, expected positive rates at {rate_steps}")
        print(f"ok: TensorBoard reads loss and accuracy at steps {written} and global_step/sec "
              f"at {rate_steps}")


STEPS, SAVE_STEPS = 1500, 100


def last_lines(out):
    """The run's final step, weights checksum and test accuracy, as printed."""
    step = re.search(r"^trained to step (\d+) in ", out, re.M)
    checksum = re.search(r"^weights checksum: (\S+)$", out, re.M)
    accuracy = re.search(r"^test accuracy: (\S+) on the held-out split", out, re.M)
    if not (step and checksum and accuracy):
        fail("missing the `trained to step`, `weights checksum` or `test accuracy` line")
    return int(step.group(1)), checksum.group(1), accuracy.group(1)


def saved_steps(ckpt_dir):
    """Steps of the checkpoints the state file names (the committed ones)."""
    try:
        with open(os.path.join(ckpt_dir, "checkpoint")) as f:
            return [int(s) for s in re.findall(r'^all_model_checkpoint_paths: "model\.ckpt-(\d+)"',
                                               f.read(), re.M)]
    except FileNotFoundError:
        return []


def interrupted_run(exe, args, ckpt_dir, sig, rng):
    """Starts a run, waits for a committed checkpoint past step 0, waits a random while more,
    sends `sig`. Returns the run's output, or None when it finished before the signal."""
    cmd = [exe] + args
    print(f"+ {' '.join(cmd)}   (to receive {signal.Signals(sig).name})", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not any(s > 0 for s in saved_steps(ckpt_dir)):
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.communicate()[0]
            print(out, end="")
            fail("the run ended, or took over 120 s, before its first checkpoint past step 0")
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.1))  # a whole run takes about 0.2 s
    if proc.poll() is not None:
        print(proc.communicate()[0], end="")
        return None
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    print(out, end="", flush=True)
    print(f"(exit status {proc.returncode})")
    if (sig == signal.SIGTERM and proc.returncode == -signal.SIGTERM and
            re.search(rf"saved checkpoint .*/model\.ckpt-{STEPS}$", out, re.M)):
        # The signal came after the session had ended (its last checkpoint is written), where
        # SignalStopHook has put the default handler back: the run had finished before it.
        return None
    if (sig == signal.SIGTERM and proc.returncode == 0 and
            re.search(rf"^trained to step {STEPS} in ", out, re.M)):
        return None  # the signal came during the last step: nothing was left to interrupt
    if sig == signal.SIGKILL and proc.returncode != -signal.SIGKILL:
        fail(f"expected death by SIGKILL, got exit status {proc.returncode}")
    if sig == signal.SIGTERM and proc.returncode != 0:
        fail(f"SIGTERM should end the run cleanly (SignalStopHook), got exit status "
             f"{proc.returncode}")
    return out


def test_resume(exe, data, sig):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"random seed for the kill instant: {seed}")
    rng.seed(seed)
    with tempfile.TemporaryDirectory(prefix="runhooks-train-digits-") as tmp:
        common = ["--data", data, "--steps", str(STEPS), "--save-steps", str(SAVE_STEPS),
                  "--log-every", "500", "--seed", "1"]
        whole = last_lines(run_example(exe, common + ["--model-dir", os.path.join(tmp, "whole")]))
        if whole[0] != STEPS:
            fail(f"the uninterrupted run ended at step {whole[0]}, expected {STEPS}")

        for attempt in range(1, 6):
            ckpt = os.path.join(tmp, f"interrupted-{attempt}")
            args = common + ["--model-dir", ckpt]
            first = interrupted_run(exe, args, ckpt, sig, rng)
            if first is not None:
                break
            print(f"the run finished before the signal (attempt {attempt}); again")
        else:
            fail("every run finished before the signal")
        stopped_at = None
        if sig == signal.SIGTERM:
            if "SignalStopHook" not in first and "SIGTERM" not in first:
                fail("no log line of SignalStopHook about SIGTERM")
            stopped_at = last_lines(first)[0]
            if not 0 < stopped_at < STEPS:
                fail(f"SIGTERM: the first run ended at step {stopped_at}")
            if stopped_at not in saved_steps(ckpt):
                fail(f"no final checkpoint at step {stopped_at}: {saved_steps(ckpt)}")

        second = run_example(exe, args)
        m = re.search(r"^runhooks: restored checkpoint (\S+)-(\d+) \(global step (\d+)\)$",
                      second, re.M)
        if not m:
            fail("the second run restored no checkpoint")
        restored = int(m.group(3))
        if not 0 < restored < STEPS:
            fail(f"restored step {restored}: not from the middle of training")
        if stopped_at is not None and restored != stopped_at:
            fail(f"restored step {restored}, but the first run stopped at {stopped_at}")
        resumed = last_lines(second)
        print(f"uninterrupted: step {whole[0]}, checksum {whole[1]}, accuracy {whole[2]}")
        print(f"resumed from step {restored}: step {resumed[0]}, checksum {resumed[1]}, "
              f"accuracy {resumed[2]}")
        if resumed != whole:
            fail("the resumed run did not end as the uninterrupted one")
        print("ok: the resumed run ends as the uninterrupted one, bit for bit")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["accuracy", "resume", "sigterm"])
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
    elif args.case == "resume":
        test_resume(args.train_digits, args.data, signal.SIGKILL)
    else:
        test_resume(args.train_digits, args.data, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
