#!/usr/bin/env python3
"""Runs examples/resume as a user would and checks what it claims.

Usage: check_resume.py RESUME_EXECUTABLE

1. A fresh directory: trains 0 -> 300 ("starting from step 0", "finished at step 300"), and the
   state file names model.ckpt-300.
2. A rerun to 400 resumes: "resumed from step 300", "finished at step 400".
3. SIGTERM, then SIGINT (Ctrl-C) mid-run: exit 0, "stopped by SIGTERM at step S; checkpoint
   .../model.ckpt-S saved", the state file's latest checkpoint is model.ckpt-S, and a rerun says
   "resumed from step S".
4. Two SIGINTs in a row: the second terminates the process at once (killed by SIGINT), and a
   rerun still resumes from a complete checkpoint.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

FAILURES = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILURES.append(what)


def run(exe, directory, steps, *extra):
    result = subprocess.run([exe, "--checkpoint-dir", directory, "--steps", str(steps), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    return result.returncode, result.stdout


def latest(directory):
    with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as state:
        return re.search(r'^model_checkpoint_path: "([^"]*)"', state.read(), re.M).group(1)


def interrupted(exe, directory, signals, step_ms=1):
    child = subprocess.Popen([exe, "--checkpoint-dir", directory, "--steps", "100000000",
                              "--save-steps", "1000", "--step-ms", str(step_ms)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = child.stdout.readline()  # "resumed from step ..." once training runs
    time.sleep(0.3)
    for sig in signals:
        child.send_signal(sig)
        time.sleep(0.01)
    out, _ = child.communicate(timeout=60)
    return child.returncode, first + out


def bad_options(exe):
    """Every bad command line: exit 2, a message naming the option and the value, nothing made."""
    with tempfile.TemporaryDirectory() as parent:
        target = os.path.join(parent, "ckpt")
        for args, message in (
                (["--steps", "1e3"], "--steps: '1e3' is not a whole number"),
                (["--steps", "12abc"], "--steps: '12abc' is not a whole number"),
                (["--steps", "-5"], "--steps must be at least 0, got -5"),
                (["--steps", "10", "--save-steps", "0"], "--save-steps must be at least 1, got 0"),
                (["--steps", "10", "--step-ms", "-3"], "--step-ms must be at least 0, got -3"),
                (["--steps", "10", "--bogus", "1"], "unknown option --bogus"),
                (["--steps"], "--steps needs a value"),
                ([], "--steps is required")):
            first = ["--checkpoint-dir", target] if args[:1] != ["--checkpoint-dir"] else []
            result = subprocess.run([exe, *first, *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, timeout=60)
            check(result.returncode == 2 and message in result.stderr and
                  not os.path.exists(target),
                  "%s: exit 2, says %r, makes nothing (got %s: %r)"
                  % (" ".join(args), message, result.returncode, result.stderr[:200]))
        result = subprocess.run([exe, "--checkpoint-dir", "--steps", "10"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, timeout=60)
        check(result.returncode == 2 and "--checkpoint-dir needs a value" in result.stderr,
              "--checkpoint-dir without its value is named (got %r)" % result.stderr[:200])
        result = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, timeout=60)
        check(result.returncode == 0 and result.stdout.startswith("usage: resume"),
              "--help prints the usage and exits 0")


def main():
    exe = sys.argv[1]
    bad_options(exe)
    with tempfile.TemporaryDirectory() as directory:
        code, out = run(exe, directory, 300, "--save-steps", "50")
        check(code == 0, "a fresh run exits 0")
        check(out.splitlines()[:1] == ["starting from step 0"], "it starts from step 0: %r" % out)
        check("finished at step 300" in out, "it finishes at step 300")
        check(latest(directory) == "model.ckpt-300", "the state file names model.ckpt-300")

        code, out = run(exe, directory, 400)
        check(code == 0 and out.startswith("resumed from step 300\n"),
              "a rerun resumes from step 300: %r" % out)
        check("finished at step 400" in out, "and finishes at step 400")

        code, out = run(exe, directory, 400)
        check(code == 0 and "already at step 400, at or past --steps 400: nothing to train" in out
              and latest(directory) == "model.ckpt-400",
              "a rerun of a finished run trains nothing: %r" % out)

        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            code, out = interrupted(exe, directory, [sig])
            match = re.search(r"stopped by %s at step (\d+); checkpoint (.*)/model\.ckpt-(\d+) saved"
                              % name, out)
            check(code == 0, "%s: exit 0 (got %s)" % (name, code))
            check(match is not None and match.group(1) == match.group(3), "%s: %r" % (name, out))
            if match:
                step = int(match.group(1))
                check(latest(directory) == "model.ckpt-%d" % step,
                      "%s: the latest checkpoint is the last step, %d" % (name, step))
                code, out = run(exe, directory, step + 10)
                check(code == 0 and out.startswith("resumed from step %d\n" % step),
                      "%s: a rerun resumes from step %d: %r" % (name, step, out))

        # Both arrive within one (slow) step: the second one terminates.
        code, out = interrupted(exe, directory, [signal.SIGINT, signal.SIGINT], step_ms=200)
        check(code == -signal.SIGINT, "a second SIGINT terminates at once (got %s)" % code)
        saved = latest(directory)
        code, out = run(exe, directory, 10)
        check(code == 0 and out.startswith("resumed from step %s\n" % saved.split("-")[-1]),
              "after that, a rerun resumes from %s: %r" % (saved, out))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
