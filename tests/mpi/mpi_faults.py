#!/usr/bin/env python3
"""Fault tests of the MPI support, with real processes: mpirun, real signals, real restarts.

    mpi_faults.py CASE MPIRUN PROGRAM [NP]

CASE is one of
  sigterm        SIGTERM to rank 2 of a running job: every rank stops at the same step, rank 0
                 writes the final checkpoint, every rank's end() runs, mpirun exits 0; a rerun
                 resumes every rank from that step.
  sigkill        SIGKILL to rank 1: mpirun ends with an error naming the signal within a bounded
                 time (measured); a rerun resumes every rank from the last checkpoint committed.
  throw-run_or_abort, throw-uncaught, throw-caught
                 rank 2 throws in its step while the others wait in the gradient allreduce: the
                 error is printed with its rank, the job ends non-zero, nothing hangs.
  worker-timeout rank 0 takes 30 s to create its backend, the others wait at most 1 s: they
                 fail with an error naming max_wait_secs, and the job ends at once.
  chief-error    the chief's checkpoint is corrupt: its restore error reaches every rank (the
                 workers quote it), the job ends non-zero.
  data-parallel  examples/mpi_data_parallel: a run to step 3000, then a rerun to 4000 that
                 resumes from the chief's checkpoint.
  async-workers  examples/mpi_async_workers runs and checks itself.
PROGRAM is tests/mpi/trainer for the first seven. Each case prints what it measured and exits
non-zero on any failed claim (77, meson's SKIP, if mpirun cannot start at all).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BOUND_SECS = 60.0  # no case may take longer to end a job: a hang fails the test


class Job:
    """An mpirun job whose output (stdout and stderr, merged) is collected line by line."""

    def __init__(self, mpirun, np, program, args):
        self.command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np),
                        program] + [str(a) for a in args]
        print("$ " + " ".join(self.command), flush=True)
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, start_new_session=True)
        self.lines = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def output(self):
        with self.lock:
            return list(self.lines)

    def wait_for(self, predicate, what, timeout=BOUND_SECS):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.output()):
                return
            if self.process.poll() is not None:
                self.reader.join(5)
                if predicate(self.output()):
                    return
                fail(f"the job ended (exit {self.process.returncode}) before {what}", self)
            time.sleep(0.02)
        fail(f"no {what} within {timeout} s", self)

    def finish(self, timeout=BOUND_SECS):
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            fail(f"the job did not end within {timeout} s (a hang)", self)
        self.reader.join(10)
        # A job expected to fail must fail for its reason: a sanitizer's report after the expected
        # message would otherwise pass unseen (the asan suite runs these too).
        for line in self.output():
            if any(m in line for m in SANITIZER_REPORTS):
                fail(f"a sanitizer reported: {line}", self)
        return self.process.returncode


SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def fail(message, job=None):
    if job is not None:
        print("---- job output ----\n" + "\n".join(job.output()) + "\n--------------------")
    print("FAILED: " + message, flush=True)
    sys.exit(1)


def check(condition, message, job=None):
    if not condition:
        fail(message, job)


def started(lines):
    """{rank: (pid, step)} from the "rank R pid P started at step S" lines."""
    found = {}
    for line in lines:
        m = re.match(r"rank (\d+) pid (\d+) started at step (\d+)$", line)
        if m:
            found[int(m[1])] = (int(m[2]), int(m[3]))
    return found


def stopped(lines):
    """{rank: step} from the "rank R stopped at step S" lines (each rank must print one)."""
    found = {}
    for line in lines:
        m = re.match(r"rank (\d+) stopped at step (\d+)$", line)
        if m:
            check(int(m[1]) not in found, f"rank {m[1]} printed its stop twice")
            found[int(m[1])] = int(m[2])
    return found


def latest_checkpoint_step(directory):
    """The step of the checkpoint the state file names, or None."""
    try:
        with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as state:
            m = re.search(r'^model_checkpoint_path: "(?:.*/)?model\.ckpt-(\d+)"', state.read(), re.M)
            return int(m[1]) if m else None
    except FileNotFoundError:
        return None


def run_to_completion(mpirun, np, program, args):
    job = Job(mpirun, np, program, args)
    code = job.finish()
    return job, code


def start_training(mpirun, np, program, checkpoint_dir, min_checkpoint):
    """A long job, once every rank started and a checkpoint at or past min_checkpoint exists."""
    job = Job(mpirun, np, program, ["--steps", 10**9, "--checkpoint-dir", checkpoint_dir,
                                    "--save-steps", 200, "--step-us", 200])
    job.wait_for(lambda lines: len(started(lines)) == np, f"start of all {np} ranks")
    job.wait_for(lambda _: (latest_checkpoint_step(checkpoint_dir) or 0) >= min_checkpoint,
                 f"checkpoint at step {min_checkpoint} or later")
    return job


def check_resume(mpirun, np, program, checkpoint_dir, step, extra):
    """A rerun to step + extra must restore `step` on every rank and end there on every rank."""
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", step + extra, "--checkpoint-dir", checkpoint_dir,
                                   "--save-steps", 200, "--step-us", 50])
    lines = job.output()
    check(code == 0, f"the rerun exited with {code}", job)
    check(any(f"restored checkpoint" in l and f"model.ckpt-{step}" in l and
              f"(global step {step})" in l for l in lines),
          f"the chief did not restore model.ckpt-{step}", job)
    starts = started(lines)
    check(sorted(starts) == list(range(np)) and all(s == step for _, s in starts.values()),
          f"not every rank started at step {step}: {starts}", job)
    ends = stopped(lines)
    check(sorted(ends) == list(range(np)) and set(ends.values()) == {step + extra},
          f"not every rank stopped at step {step + extra}: {ends}", job)
    print(f"rerun: every rank restored step {step} and stopped at {step + extra}")


def case_sigterm(mpirun, np, program, tmp):
    directory = os.path.join(tmp, "ckpt")
    job = start_training(mpirun, np, program, directory, 400)
    pid = started(job.output())[2][0]
    sent = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    code = job.finish()
    elapsed = time.monotonic() - sent
    lines = job.output()
    check(code == 0, f"mpirun exited with {code} after SIGTERM to one rank", job)
    ends = stopped(lines)
    check(sorted(ends) == list(range(np)), f"not every rank's end() ran: {ends}", job)
    steps = set(ends.values())
    check(len(steps) == 1, f"the ranks stopped at different steps: {ends}", job)
    step = steps.pop()
    check(latest_checkpoint_step(directory) == step,
          f"the final checkpoint is not at the stop step {step} "
          f"(state file: {latest_checkpoint_step(directory)})", job)
    check(any("SIGTERM received" in l for l in lines), "rank 2 did not report the SIGTERM", job)
    print(f"SIGTERM to rank 2: all {np} ranks stopped at step {step}, rank 0 saved model.ckpt-"
          f"{step}, mpirun exited 0, {elapsed:.2f} s after the signal")
    check_resume(mpirun, np, program, directory, step, 100)


def case_sigkill(mpirun, np, program, tmp):
    directory = os.path.join(tmp, "ckpt")
    job = start_training(mpirun, np, program, directory, 600)
    pid = started(job.output())[1][0]
    sent = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    code = job.finish()
    elapsed = time.monotonic() - sent
    text = "\n".join(job.output())
    check(code != 0, "mpirun exited 0 after SIGKILL to one rank", job)
    check("signal 9" in text, "mpirun did not name the signal that killed the rank", job)
    check(elapsed < 30.0, f"the job took {elapsed:.1f} s to end after the kill", job)
    step = latest_checkpoint_step(directory)
    check(step is not None and step >= 600, f"no checkpoint committed before the kill ({step})")
    print(f"SIGKILL to rank 1: mpirun exited {code}, {elapsed:.2f} s after the kill; the last "
          f"checkpoint committed is at step {step}")
    check_resume(mpirun, np, program, directory, step, 100)


def case_throw(mpirun, np, program, tmp, mode):
    directory = os.path.join(tmp, "ckpt")
    start = time.monotonic()
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 100000, "--checkpoint-dir", directory,
                                   "--step-us", 100, "--throw-rank", 2, "--throw-at-step", 300,
                                   "--throw-mode", mode])
    elapsed = time.monotonic() - start
    text = "\n".join(job.output())
    check(code != 0, f"mpirun exited 0 although rank 2 failed ({mode})", job)
    expected = {
        "run_or_abort": "runhooks: rank 2 of 4: error: injected failure at step 300; aborting the MPI job",
        "uncaught": "runhooks: rank 2 of 4: terminate called after an uncaught exception: "
                    "injected failure at step 300; aborting the MPI job",
        "caught": "runhooks: rank 2 of 4: a session with an MpiStopVoteHook was left by an "
                  "exception before end()",
    }[mode]
    check(expected in text, f"the error was not reported with its rank: expected '{expected}'", job)
    if mode == "caught":
        check("rank 2 caught: injected failure at step 300" in text, "the program's catch did not run", job)
    print(f"rank 2 threw ({mode}): reported with its rank, job ended with exit {code} after "
          f"{elapsed:.2f} s (including start-up)")


def case_worker_timeout(mpirun, np, program, tmp):
    start = time.monotonic()
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 100, "--checkpoint-dir", os.path.join(tmp, "ckpt"),
                                   "--chief-delay-secs", 30, "--max-wait-secs", 1])
    elapsed = time.monotonic() - start
    text = "\n".join(job.output())
    check(code != 0, "mpirun exited 0 although the workers gave up on the chief", job)
    check(re.search(r"runhooks: rank [1-9]\d* of \d+: error: the "
                    r"chief \(rank 0\) sent no initial state within "
                    r"MpiSessionOptions::max_wait_secs = 1 s", text),
          "no worker reported its wait for the chief with its rank", job)
    check(elapsed < 25.0, f"the job took {elapsed:.1f} s, not ended by the workers' timeout", job)
    print(f"a chief 30 s late, workers waiting at most 1 s: the job ended with exit {code} after "
          f"{elapsed:.2f} s")


def case_chief_error(mpirun, np, program, tmp):
    directory = os.path.join(tmp, "ckpt")
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 300, "--checkpoint-dir", directory, "--step-us", 50])
    check(code == 0 and latest_checkpoint_step(directory) == 300, "the first run failed", job)
    with open(os.path.join(directory, "model.ckpt-300.arrays"), "r+b") as arrays:
        arrays.seek(40)
        byte = arrays.read(1)
        arrays.seek(40)
        arrays.write(bytes([byte[0] ^ 0xFF]))
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 400, "--checkpoint-dir", directory])
    text = "\n".join(job.output())
    check(code != 0, "mpirun exited 0 with a corrupt checkpoint", job)
    chief = "runhooks: rank 0 of 4: error: runhooks: restoring checkpoint" in text
    worker = re.search(r"rank [1-9] of 4: the chief \(rank 0\) failed to create its session: "
                       r"runhooks: restoring checkpoint", text)
    check(chief or worker, "the chief's restore error was not reported with a rank", job)
    check(not started(job.output()), "a rank started training from a corrupt checkpoint", job)
    print("a corrupt checkpoint on the chief: reported " +
          ("by the chief" if chief else "") + (" and " if chief and worker else "") +
          ("by a worker quoting it" if worker else "") + f"; the job ended with exit {code}")


def case_data_parallel(mpirun, np, program, tmp):
    directory = os.path.join(tmp, "ckpt")
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 3000, "--checkpoint-dir", directory])
    lines = job.output()
    check(code == 0, f"the first run exited with {code}", job)
    check(stopped(lines) == {r: 3000 for r in range(np)}, "not every rank stopped at 3000", job)
    check(sum(1 for l in lines if re.match(r"step \d+ loss", l)) == 3,
          "rank 0 did not print one log line per 1000 steps", job)
    job, code = run_to_completion(mpirun, np, program,
                                  ["--steps", 4000, "--checkpoint-dir", directory])
    lines = job.output()
    check(code == 0, f"the rerun exited with {code}", job)
    check(any("restored checkpoint" in l and "(global step 3000)" in l for l in lines),
          "the rerun did not restore step 3000", job)
    check(stopped(lines) == {r: 4000 for r in range(np)}, "not every rank stopped at 4000", job)
    print("mpi_data_parallel: every rank stopped at 3000, then resumed and stopped at 4000")


def case_async_workers(mpirun, np, program, tmp):
    job, code = run_to_completion(mpirun, np, program, [])
    check(code == 0, f"mpi_async_workers exited with {code}", job)
    print("\n".join(job.output()))


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    case, mpirun, program = argv[1], argv[2], argv[3]
    np = int(argv[4]) if len(argv) > 4 else 4
    if shutil.which(mpirun) is None and not os.access(mpirun, os.X_OK):
        print(f"SKIP: no mpirun at {mpirun}")
        return 77
    tmp = tempfile.mkdtemp(prefix="runhooks-mpi-faults-")
    try:
        if case == "sigterm":
            case_sigterm(mpirun, np, program, tmp)
        elif case == "sigkill":
            case_sigkill(mpirun, np, program, tmp)
        elif case.startswith("throw-"):
            case_throw(mpirun, np, program, tmp, case[len("throw-"):])
        elif case == "worker-timeout":
            case_worker_timeout(mpirun, np, program, tmp)
        elif case == "chief-error":
            case_chief_error(mpirun, np, program, tmp)
        elif case == "data-parallel":
            case_data_parallel(mpirun, np, program, tmp)
        elif case == "async-workers":
            case_async_workers(mpirun, np, program, tmp)
        else:
            print(f"mpi_faults.py: unknown case '{case}'")
            return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
