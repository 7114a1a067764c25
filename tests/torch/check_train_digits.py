#!/usr/bin/env python3
"""Runs examples/torch/train_digits and checks what it claims (Meson suite 'torch').

  check_train_digits.py CASE TRAIN_DIGITS --data DIGITS_CSV_GZ [--source-root DIR]

CASE:
  args      (needs no data) an unknown argument, a missing value, and --steps 0, x, -3 and 5x
            each exit 2 with one line on stderr naming the argument and the value, before any
            directory is made; --help exits 0 with the usage on stdout.
  default   a copy of train_digits in a temporary directory, run with --data and --steps alone,
            keeps its checkpoints and its one event file in a new directory next to itself,
            train_digits-runs/run-YYYYMMDD-HHMMSS[-N], and its last line is
            `tensorboard --logdir DIR`, DIR relative to the current directory (below which it
            is); a second run gets a directory of its own and starts from step 0.
  accuracy  one run with a TensorBoard log directory, seed 1: it prints
            `test accuracy: X on the held-out split (359 images)` with X >= 0.9 and ends with
            `tensorboard --logdir DIR`, DIR the --model-dir; the batch loss
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
import shlex
import shutil
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
        words = shlex.split(out.splitlines()[-1])
        if len(words) != 3 or words[:2] != ["tensorboard", "--logdir"] or \
                os.path.realpath(words[2]) != os.path.realpath(model_dir):
            fail(f"the last line is {out.splitlines()[-1]!r}, expected "
                 f"`tensorboard --logdir {model_dir}`")

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


def test_args(exe):
    with tempfile.TemporaryDirectory(prefix="runhooks-train-digits-") as tmp:
        copy = os.path.join(tmp, "train_digits")
        shutil.copy2(exe, copy)
        hint = "; see train_digits --help"
        refused = [
            (["--bogus"], "train_digits: unknown argument '--bogus'" + hint),
            (["--data", "x.csv.gz", "extra"], "train_digits: unknown argument 'extra'" + hint),
            (["--steps"], "train_digits: --steps needs a value" + hint),
            (["--model-dir"], "train_digits: --model-dir needs a value" + hint),
            (["--steps", "10"],
             "train_digits: --data is required (tools/fetch_digits.py fetches it)" + hint),
        ] + [([flag, value],
              f"train_digits: {flag} must be a positive integer, got '{value}'" + hint)
             for flag in ["--steps", "--save-steps", "--log-every", "--seed"]
             for value in ["0", "x", "-3", "5x"]]
        for args, message in refused:
            proc = subprocess.run([copy] + args, cwd=tmp, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
            if proc.returncode != 2 or proc.stderr != message + "\n" or proc.stdout:
                fail(f"train_digits {shlex.join(args)}: exit {proc.returncode}, stdout "
                     f"{proc.stdout!r}, stderr {proc.stderr!r}; expected exit 2 and {message!r}")
            print(f"ok: train_digits {shlex.join(args)}: exit 2, {message!r}")
        if os.listdir(tmp) != ["train_digits"]:
            fail(f"a refused command line made {os.listdir(tmp)}")
        proc = subprocess.run([copy, "--help"], cwd=tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        usage = proc.stdout.startswith("usage: train_digits ")
        if (proc.returncode != 0 or proc.stderr or not usage
                or not all(f in proc.stdout for f in ["--data", "--model-dir", "--steps",
                                                      "--save-steps", "--log-every", "--seed"])):
            fail(f"train_digits --help: exit {proc.returncode}, stdout {proc.stdout!r}, stderr "
                 f"{proc.stderr!r}; expected exit 0 and the usage")
        print("ok: train_digits --help: exit 0 and the usage")


def test_default(exe, data):
    steps = 300
    with tempfile.TemporaryDirectory(prefix="runhooks-train-digits-") as tmp:
        copy = os.path.join(tmp, "bin", "train_digits")
        os.makedirs(os.path.dirname(copy))
        shutil.copy2(exe, copy)
        runs = os.path.join("bin", "train_digits-runs")
        dirs = []
        for attempt in (1, 2):
            cmd = [copy, "--data", data, "--steps", str(steps), "--save-steps", "100"]
            print("+ " + " ".join(cmd), flush=True)
            proc = subprocess.run(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=240)
            print(proc.stdout, end="", flush=True)
            if proc.returncode != 0:
                fail(f"train_digits exited with {proc.returncode}")
            lines = proc.stdout.splitlines()
            words = shlex.split(lines[-1]) if lines else []
            if len(words) != 3 or words[:2] != ["tensorboard", "--logdir"]:
                fail(f"the last line is {lines[-1:]!r}, expected `tensorboard --logdir DIR`")
            printed = words[2]
            if (os.path.dirname(printed) != runs or
                    not re.fullmatch(r"run-\d{8}-\d{6}(-\d+)?", os.path.basename(printed))):
                fail(f"DIR is {printed!r}, expected {runs}/run-YYYYMMDD-HHMMSS[-N]")
            if f"model directory (checkpoints, TensorBoard files): {printed}" not in lines:
                fail("no `model directory (checkpoints, TensorBoard files): DIR` line")
            if last_lines(proc.stdout)[0] != steps or "restored checkpoint" in proc.stdout:
                fail(f"expected a fresh run to step {steps}")
            model_dir = os.path.join(tmp, printed)
            files = glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))
            if len(files) != 1 or saved_steps(model_dir)[-1:] != [steps]:
                fail(f"{model_dir} holds {sorted(os.listdir(model_dir))}, expected one event file "
                     f"and a checkpoint of step {steps}")
            dirs.append(printed)
            print(f"ok: run {attempt}: last line `tensorboard --logdir {printed}`, the directory "
                  f"kept with one event file and the checkpoint of step {steps}")
        if dirs[0] == dirs[1] or sorted(os.listdir(os.path.join(tmp, runs))) != sorted(
                os.path.basename(d) for d in dirs):
            fail(f"the two runs' directories: {dirs}; {runs} holds "
                 f"{os.listdir(os.path.join(tmp, runs))}")
        print("ok: each run has a directory of its own, both kept")


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
    parser.add_argument("case", choices=["args", "default", "accuracy", "resume", "sigterm"])
    parser.add_argument("train_digits")
    parser.add_argument("--data", default="")
    parser.add_argument("--source-root", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    args = parser.parse_args()
    if args.case == "args":
        test_args(args.train_digits)
        return 0
    if not args.data or not os.path.isfile(args.data):
        print(f"SKIP: no digits data ({args.data or '-Ddigits_csv is empty'}): run "
              "tools/fetch_digits.py PATH and configure with -Ddigits_csv=PATH (./dev test does)")
        return SKIP
    if args.case == "default":
        test_default(args.train_digits, args.data)
    elif args.case == "accuracy":
        test_accuracy(args.train_digits, args.data, args.source_root)
    elif args.case == "resume":
        test_resume(args.train_digits, args.data, signal.SIGKILL)
    else:
        test_resume(args.train_digits, args.data, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
