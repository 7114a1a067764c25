#!/usr/bin/env python3
"""Runs examples/torch/train_gpt and checks what it claims (Meson suite 'torch', gcc's build).

  check_train_gpt.py CASE TRAIN_GPT --data TINYSHAKESPEARE_TXT [--python PYTHON]

PYTHON runs torchrun for 'ddp' (`PYTHON -m torch.distributed.run`).

CASE:
  args    (needs no data) an unknown argument, a missing value and a bad value of each option
          each exit 2 with one line on stderr naming the option and the value, before any
          directory is made; --help exits 0 with the usage; a --data that is not tiny
          Shakespeare is refused naming the file and where the text comes from.
  train   a short run of a smaller model (2 layers, 64 embedding, block 32, 600 steps at lr 5e-3)
          whose validation loss on 50 batches must be below LOSS_BOUND; then the same run
          SIGKILLed at a random instant after its first checkpoint past step 0 and run again: the
          second run restores a checkpoint from the middle of training and ends with the
          parameters, the AdamW state (hashes of their bytes), the final validation loss, the
          sample and the evaluation losses (the float32 scalars of DIR/eval's event files, read
          here from the records) of the uninterrupted run, byte for byte.

  ddp     the resume of 'train' on two ranks under torchrun (--engine c10d, 200 steps, the
          global batch of 12 split): torchrun and its workers SIGKILLed at a random instant after
          the first checkpoint past step 0, the job started again: both ranks end with the hashes
          of the uninterrupted two-rank job, which are the same on both ranks, and the chief
          with its validation loss, sample and evaluation losses.

LOSS_BOUND is the cross-entropy on the validation split of the best model that sees one
character of context: character bigram counts of the training split (add-one smoothed), computed
here from the data (2.4819 nats; a uniform guess costs ln 65 = 4.17, character frequencies
alone 3.35). Below it, the transformer has learnt to use more than the last character. The
model reaches 2.21 to 2.23 (seeds 1 to 5: LOSS_SEEN), so a bound 0.25 above them is no coin toss.

Exits 77 (Meson: skipped) when the text is missing, saying where it comes from; never passes
without running the example.
"""

import argparse
import collections
import glob
import math
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
STEPS = 600
SMALL = ["--layers", "2", "--heads", "4", "--embd", "64", "--block", "32", "--steps", str(STEPS),
         "--lr", "5e-3", "--min-lr", "5e-4", "--warmup-steps", "50", "--lr-decay-steps",
         str(STEPS), "--eval-every", "100", "--eval-batches", "10", "--final-eval-batches", "50",
         "--save-steps", "100", "--log-every", "100", "--sample-chars", "100", "--seed", "1"]
# The validation losses of SMALL with --seed 1..5 (train_gpt at 2f45bc2, g++ 12, one thread), for
# the record: the check is against the bound, not these.
LOSS_SEEN = [2.2122, 2.2113, 2.2349, 2.2142, 2.2205]


def fail(message):
    print("FAILED: " + message, flush=True)
    sys.exit(1)


def bigram_cross_entropy(path):
    """The validation split's cross-entropy under add-one-smoothed character bigrams of the
    training split (nanoGPT's split: the first 90 % of the characters)."""
    with open(path, encoding="ascii") as f:
        text = f.read()
    n = int(len(text) * 0.9)
    train, val = text[:n], text[n:]
    vocabulary = len(set(text))
    first = collections.Counter(train[:-1])
    pairs = collections.Counter(zip(train, train[1:]))
    total = sum(math.log((pairs[(a, b)] + 1) / (first[a] + vocabulary)) for a, b in zip(val, val[1:]))
    return -total / (len(val) - 1)


def run_example(exe, args, timeout=240):
    cmd = [exe] + args
    print("+ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        fail(f"train_gpt exited with {proc.returncode}")
    return proc.stdout


# ---- TensorBoard event files, read here (no tensorboard package needed) ----------------------

def varint(data, pos):
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(data):
    """(number, wire type, value) of a protobuf message: ints for varints, bytes otherwise."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            fail(f"an event record with protobuf wire type {wire}")
        yield number, wire, value


def event_scalars(directory):
    """{(tag, step): float32 bytes} of every event file in `directory` (TFRecords of Event
    protos: step is field 2, summary field 5, its values field 1 with tag 1 and simple_value 2).
    A step written twice (an evaluation repeated after a resume) must hold the same bytes."""
    scalars = {}
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if not files:
        fail(f"no event file in {directory}")
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            if pos + 12 > len(data):
                break  # a torn last record: the writer was killed mid-write
            (length,) = struct.unpack_from("<Q", data, pos)
            if pos + 12 + length + 4 > len(data):
                break
            record = data[pos + 12:pos + 12 + length]
            pos += 12 + length + 4
            step, values = 0, []
            for number, _, value in fields(record):
                if number == 2:
                    step = value
                elif number == 5:
                    for n, _, v in fields(value):
                        if n == 1:
                            tag = simple = None
                            for vn, _, vv in fields(v):
                                if vn == 1:
                                    tag = vv.decode()
                                elif vn == 2:
                                    simple = vv
                            if tag is not None and simple is not None:
                                values.append((tag, simple))
            for tag, simple in values:
                if scalars.setdefault((tag, step), simple) != simple:
                    fail(f"{directory}: {tag} at step {step} written twice with different values")
    return scalars


def summary(out):
    """What a resumed run must repeat: the hashes, the validation loss and the sample."""
    m = re.search(r"^(parameters hash: \d+, optimizer state hash: \d+)$", out, re.M)
    v = re.search(r"^(validation loss: [0-9.]+ \(.*\))$", out, re.M)
    s = re.search(r"^sample \(\d+ characters\):\n(.*)\nTensorBoard shows", out, re.M | re.S)
    if not (m and v and s):
        fail("missing the hashes, the validation loss or the sample")
    return m.group(1), v.group(1), s.group(1)


def saved_steps(ckpt_dir):
    """Steps of the checkpoints the state file names (the committed ones)."""
    try:
        with open(os.path.join(ckpt_dir, "checkpoint")) as f:
            return [int(s) for s in re.findall(r'^all_model_checkpoint_paths: "model\.ckpt-(\d+)"',
                                               f.read(), re.M)]
    except FileNotFoundError:
        return []


def killed_run(exe, args, ckpt_dir, rng):
    """Starts a run, waits for a committed checkpoint past step 0, then a random while more,
    and SIGKILLs it. Returns False when it finished first."""
    cmd = [exe] + args
    print(f"+ {shlex.join(cmd)}   (to be killed)", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not any(s > 0 for s in saved_steps(ckpt_dir)):
        if proc.poll() is not None or time.monotonic() > deadline:
            print(proc.communicate()[0], end="")
            fail("the run ended, or took over 120 s, before its first checkpoint past step 0")
        time.sleep(0.005)
    # The rest of the run takes about 2 s on a quiet machine (500 steps of 4.5 ms), more when
    # loaded; a kill after its last checkpoint is tried again.
    time.sleep(rng.uniform(0.0, 1.5))
    if proc.poll() is not None:
        print(proc.communicate()[0], end="")
        return False
    proc.send_signal(signal.SIGKILL)
    print(proc.communicate(timeout=120)[0], end="", flush=True)
    if proc.returncode != -signal.SIGKILL:
        fail(f"expected death by SIGKILL, got exit status {proc.returncode}")
    # Killed while it was exiting, its training done: nothing to resume from the middle.
    return max(saved_steps(ckpt_dir)) < STEPS


def test_train(exe, data):
    bound = bigram_cross_entropy(data)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"random seed for the kill instant: {seed}")
    rng.seed(seed)
    with tempfile.TemporaryDirectory(prefix="runhooks-train-gpt-") as tmp:
        whole_dir = os.path.join(tmp, "whole")
        out = run_example(exe, ["--data", data, "--checkpoint-dir", whole_dir] + SMALL)
        last = out.splitlines()[-1]
        if shlex.split(last) != ["tensorboard", "--logdir", whole_dir]:
            fail(f"the last line is {last!r}, expected `tensorboard --logdir {whole_dir}`")
        m = re.search(r"^validation loss: ([0-9.]+) \(50 batches of 12 x 32 at step (\d+)\)$",
                      out, re.M)
        if not m or int(m.group(2)) != STEPS:
            fail(f"no `validation loss: X (50 batches of 12 x 32 at step {STEPS})` line")
        loss = float(m.group(1))
        if not loss < bound:
            fail(f"validation loss {loss} is not below {bound:.4f}, a character bigram model's")
        print(f"ok: validation loss {loss} < {bound:.4f} (a character bigram model's)")
        evaluated = sorted(s for (tag, s) in event_scalars(os.path.join(whole_dir, "eval"))
                           if tag == "loss")
        if evaluated != list(range(0, STEPS + 1, 100)):
            fail(f"validation losses in {whole_dir}/eval at steps {evaluated}, expected every "
                 "100 from 0")
        # BestCheckpointHook<ValLoss> (--keep-best 1): the state file scores the checkpoint of the
        # lowest validation loss among the evaluations of steps 100 to 600 (the one at the start
        # produces nothing for the hooks).
        val = event_scalars(os.path.join(whole_dir, "eval"))
        losses = {step: struct.unpack("<f", val[("loss", step)])[0] for step in evaluated if step}
        best = min(losses, key=lambda step: (losses[step], step))
        with open(os.path.join(whole_dir, "checkpoint")) as f:
            scores = re.findall(r'^# runhooks-score: "model\.ckpt-(\d+)", "loss", (\S+)$', f.read(),
                                re.M)
        if [(int(step), float(score)) for step, score in scores] != [(best, losses[best])]:
            fail(f"best checkpoints scored {scores}, expected model.ckpt-{best} with "
                 f"{losses[best]!r} (validation losses {losses})")
        print(f"ok: the best checkpoint kept is model.ckpt-{best}, validation loss {losses[best]}")
        train_tags = {tag for (tag, _) in event_scalars(whole_dir)}
        for tag in ("loss", "lr", "global_step/sec", "items_per_sec", "device/mfu"):
            if tag not in train_tags:
                fail(f"no {tag!r} scalar in {whole_dir}'s event file: {sorted(train_tags)}")
        print("ok: TensorBoard's training and evaluation runs hold their scalars")

        for attempt in range(1, 6):
            killed_dir = os.path.join(tmp, f"killed-{attempt}")
            args = ["--data", data, "--checkpoint-dir", killed_dir] + SMALL
            if killed_run(exe, args, killed_dir, rng):
                break
            print(f"the run finished before the kill (attempt {attempt}); again")
        else:
            fail("every run finished before the kill")
        second = run_example(exe, args)
        m = re.search(r"^runhooks: restored checkpoint \S+-(\d+) \(global step (\d+)\)$",
                      second, re.M)
        if not m or not 0 < int(m.group(2)) < STEPS:
            fail("the second run restored no checkpoint from the middle of training")
        restored = int(m.group(2))
        if summary(second) != summary(out):
            fail(f"resumed from step {restored}, the run ended with {summary(second)}, the "
                 f"uninterrupted one with {summary(out)}")
        print(f"ok: resumed from step {restored}, the run ends with the uninterrupted one's "
              "parameters, AdamW state, validation loss and sample")
        whole, resumed = (event_scalars(os.path.join(d, "eval")) for d in (whole_dir, killed_dir))
        # The killed process may not have flushed its last evaluations (its writer flushes every
        # 2 s); the second one wrote every evaluation from the restored step on.
        after = sorted(k for k in whole if k[1] >= restored)
        missing = sorted(set(after) - set(resumed))
        if missing or not set(resumed) <= set(whole):
            fail(f"evaluations at {sorted(resumed)} after the resume, {sorted(whole)} without")
        common = sorted(set(whole) & set(resumed))
        different = [k for k in common if whole[k] != resumed[k]]
        if different:
            fail(f"evaluation losses differ at {different}")
        print(f"ok: the {len(common)} evaluation losses are the same float32 bytes")


def descendants(pid):
    """Every process under pid (from /proc's children lists), deepest last."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                found += kids
                todo += kids
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def torchrun_job(python, exe, args):
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--no-python", exe, "--engine", "c10d", "--timeout-secs", "20"] + args
    print("+ OMP_NUM_THREADS=1 " + shlex.join(cmd), flush=True)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)


def ranks_summary(out):
    """The two ranks' hashes (equal), the chief's validation loss and sample."""
    hashes = re.findall(r"^rank (\d+) (parameters hash: \d+, optimizer state hash: \d+)$", out,
                        re.M)
    if sorted(rank for rank, _ in hashes) != ["0", "1"] or hashes[0][1] != hashes[1][1]:
        fail(f"expected one and the same hash line from ranks 0 and 1, got {hashes}")
    _, loss, sample = summary(out.replace("rank 0 parameters", "parameters"))
    return hashes[0][1], loss, sample


def test_ddp(exe, data, python):
    steps = 200
    small = SMALL + ["--steps", str(steps), "--lr-decay-steps", str(steps), "--eval-every", "50",
                     "--save-steps", "50"]  # later options win
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"random seed for the kill instant: {seed}")
    rng.seed(seed)
    with tempfile.TemporaryDirectory(prefix="runhooks-train-gpt-ddp-") as tmp:
        whole_dir = os.path.join(tmp, "whole")
        job = torchrun_job(python, exe, ["--data", data, "--checkpoint-dir", whole_dir] + small)
        out = job.communicate(timeout=240)[0]
        print(out, end="", flush=True)
        if job.returncode != 0:
            fail(f"torchrun exited with {job.returncode}")
        whole = ranks_summary(out)
        print(f"ok: both ranks end with {whole[0]}")

        for attempt in range(1, 6):
            killed_dir = os.path.join(tmp, f"killed-{attempt}")
            args = ["--data", data, "--checkpoint-dir", killed_dir] + small
            job = torchrun_job(python, exe, args)
            deadline = time.monotonic() + 120
            while not any(s > 0 for s in saved_steps(killed_dir)) and job.poll() is None:
                if time.monotonic() > deadline:
                    fail("no checkpoint past step 0 within 120 s")
                time.sleep(0.005)
            # The rest of the job takes about 1 s on a quiet machine (200 steps of 6 ms), more
            # when loaded; a kill after its last checkpoint is tried again below.
            time.sleep(rng.uniform(0.0, 0.5))
            if job.poll() is not None:
                print(job.communicate()[0], end="")
                print(f"the job finished before the kill (attempt {attempt}); again")
                continue
            for pid in descendants(job.pid) + [job.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            print(job.communicate(timeout=60)[0], end="", flush=True)
            print("(torchrun and its workers SIGKILLed)")
            if max(saved_steps(killed_dir)) >= steps:
                print(f"the job had saved its last checkpoint before the kill (attempt {attempt}); "
                      "again")
                continue
            break
        else:
            fail("every job finished before the kill")
        job = torchrun_job(python, exe, args)
        second = job.communicate(timeout=240)[0]
        print(second, end="", flush=True)
        if job.returncode != 0:
            fail(f"torchrun exited with {job.returncode}")
        m = re.search(r"^\[rank 0\] runhooks: restored checkpoint \S+-(\d+) \(global step (\d+)\)$",
                      second, re.M)
        if not m or not 0 < int(m.group(2)) < steps:
            fail("the second job restored no checkpoint from the middle of training")
        restored = int(m.group(2))
        if ranks_summary(second) != whole:
            fail(f"resumed from step {restored}, the job ended with {ranks_summary(second)}, the "
                 f"uninterrupted one with {whole}")
        print(f"ok: resumed from step {restored}, both ranks end with the uninterrupted job's "
              "parameters and AdamW state, the chief with its validation loss and sample")
        a, b = (event_scalars(os.path.join(d, "eval")) for d in (whole_dir, killed_dir))
        missing = sorted(k for k in a if k[1] >= restored and k not in b)
        different = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
        if missing or different or not set(b) <= set(a):
            fail(f"evaluations missing {missing} or different {different} after the resume")
        print(f"ok: the {len(set(a) & set(b))} evaluation losses are the same float32 bytes")


def test_args(exe, data):
    with tempfile.TemporaryDirectory(prefix="runhooks-train-gpt-") as tmp:
        copy = os.path.join(tmp, "train_gpt")
        shutil.copy2(exe, copy)
        hint = "; see train_gpt --help"
        positive = ["--steps", "--threads", "--seed", "--layers", "--heads", "--embd", "--block",
                    "--batch", "--eval-every", "--eval-batches", "--final-eval-batches",
                    "--lr-decay-steps", "--log-every", "--save-steps", "--keep-best",
                    "--timeout-secs"]
        refused = [
            (["--bogus"], "unknown argument '--bogus'"),
            (["extra"], "unknown argument 'extra'"),
            (["--steps"], "--steps needs a value"),
            (["--device", "tpu"], "--device must be cpu or cuda, got 'tpu'"),
            (["--engine", "mpi"], "--engine must be c10d, got 'mpi'"),
            (["--lr", "0"], "--lr must be a number greater than 0, got '0'"),
            (["--min-lr", "-1"], "--min-lr must be a number at least 0, got '-1'"),
            (["--dropout", "1"], "--dropout must be a number in [0, 1), got '1'"),
            (["--beta2", "1.5"], "--beta2 must be a number in [0, 1), got '1.5'"),
            (["--grad-clip", "x"],
             "--grad-clip must be a number at least 0 (0: no clipping), got 'x'"),
            (["--warmup-steps", "-1"], "--warmup-steps must be an integer at least 0, got '-1'"),
            (["--sample-chars", "2x"], "--sample-chars must be an integer at least 0, got '2x'"),
            (["--embd", "66"], "--embd must be a multiple of --heads (4), got '66'"),
            (["--warmup-steps", "2000"],
             "--lr-decay-steps must be greater than --warmup-steps (2000), got '2000'"),
            (["--min-lr", "0.01"], "--min-lr must be at most --lr (0.001), got '0.01'"),
        ] + [([flag, value], f"{flag} must be a positive integer, got '{value}'")
             # One bad value each (a start of libtorch costs 0.2 s of CPU), all four in turn.
             for flag, value in zip(positive, ["0", "x", "-3", "5x"] * 4)]
        for args, message in refused:
            message = "train_gpt: " + message + hint
            proc = subprocess.run([copy] + args, cwd=tmp, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
            if proc.returncode != 2 or proc.stderr != message + "\n" or proc.stdout:
                fail(f"train_gpt {shlex.join(args)}: exit {proc.returncode}, stdout "
                     f"{proc.stdout!r}, stderr {proc.stderr!r}; expected exit 2 and {message!r}")
            print(f"ok: train_gpt {shlex.join(args)}: exit 2, {message!r}")
        if os.listdir(tmp) != ["train_gpt"]:
            fail(f"a refused command line made {os.listdir(tmp)}")
        proc = subprocess.run([copy, "--help"], cwd=tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        if (proc.returncode != 0 or proc.stderr or not proc.stdout.startswith("usage: train_gpt ")
                or not all(f in proc.stdout for f in ["--data", "--checkpoint-dir", "--logdir",
                                                      "--device", "--layers", "--lr"])):
            fail(f"train_gpt --help: exit {proc.returncode}, stdout {proc.stdout!r}, stderr "
                 f"{proc.stderr!r}; expected exit 0 and the usage")
        print("ok: train_gpt --help: exit 0 and the usage")
        # Not tiny Shakespeare: this script, and a missing file.
        ckpt = os.path.join(tmp, "ckpt")
        for path, why in [(os.path.abspath(__file__), "is not tiny Shakespeare: "),
                          (os.path.join(tmp, "missing.txt"), "cannot open ")]:
            proc = subprocess.run([copy, "--data", path, "--checkpoint-dir", ckpt], cwd=tmp,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  timeout=60)
            if (proc.returncode != 1 or why not in proc.stderr or path not in proc.stderr
                    or "karpathy/char-rnn" not in proc.stderr):
                fail(f"train_gpt --data {path}: exit {proc.returncode}, stderr {proc.stderr!r}; "
                     f"expected exit 1 naming the file and where tiny Shakespeare comes from")
            print(f"ok: train_gpt --data {os.path.basename(path)}: exit 1, {proc.stderr.strip()!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["args", "train", "ddp"])
    parser.add_argument("train_gpt")
    parser.add_argument("--data", required=True)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    if args.case == "args":
        test_args(args.train_gpt, args.data)
        return 0
    if not os.path.isfile(args.data):
        print(f"skipped: {args.data} is missing (tiny Shakespeare: data/tinyshakespeare/"
              "input.txt of karpathy/char-rnn, 1,115,394 bytes, sha256 86c4e6aa9db7c042ec79f339"
              "dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed)")
        return SKIP
    if args.case == "ddp":
        test_ddp(args.train_gpt, args.data, args.python)
    else:
        test_train(args.train_gpt, args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
