#!/usr/bin/env python3
"""examples/torch/train_digits_ddp with real processes: torchrun (c10d) and mpirun (MPI).

    check_train_digits_ddp.py CASE PROGRAM --data CSV [--python PYTHON] [--mpirun MPIRUN]

PROGRAM is train_digits_ddp; PYTHON runs torchrun (`PYTHON -m torch.distributed.run`, the torch
the program links). Without the digits data (CSV empty or missing) every case but `args` exits
77 (skipped), never a pass. CASE is one of

  args      the command line alone: unknown arguments and bad values exit 2 naming them.
  c10d      4 ranks under torchrun, 300 steps: every rank ends with the same parameters (the hash
            of their bytes), stops at step 300 once, and rank 0's test accuracy is >= 0.9. Then
            the whole job SIGKILLed after a checkpoint and rerun: every rank resumes at the
            chief's last complete checkpoint and ends with the uninterrupted run's parameters,
            bit for bit. Then the same checkpoint resumed by 2 ranks: the same step and the same
            restored parameters.
  mpi       the same first two claims under mpirun -np 4 (--engine mpi), and the SIGKILL + rerun.
  restart   under torchrun --max-restarts 3, one worker SIGKILLed after a checkpoint: torchrun
            restarts the group, every rank resumes at the chief's last complete checkpoint, and
            the run ends with accuracy >= 0.9, exit 0.
  sigterm   SIGTERM to torchrun mid-run: it forwards it; every rank stops after the same step,
            the chief writes the final checkpoint at that step, every rank exits 0.
  launcher-killed
            torchrun SIGKILLed mid-run (2 ranks): the kernel sends each worker SIGTERM
            (PR_SET_PDEATHSIG, set by C10dEnvironment), and every rank stops after the same step,
            the chief writing the final checkpoint at it, within 30 s; no orphan trains on.
  node-launcher-killed
            two torchrun agents on 127.0.0.1 (--nnodes 1:2, c10d rendezvous, its store in a
            process of its own, one worker each, --max-restarts 3), as two machines: after a
            checkpoint the chief's agent alone is SIGKILLed. Its worker leaves the job at once,
            naming the cause, with no stop vote (one would stop every rank, and the surviving
            agent would report a success with most steps never trained); the survivor's agent
            restarts its group at world size 1, which resumes at the chief's last complete
            checkpoint and trains every step, exit 0.
  node-killed
            the same, but the other machine (rank 1) dies whole (its agent and its worker
            SIGKILLed): the same end.
  throw     rank 1 throws after step 40 (--throw-at-step): the job ends within the collective
            timeout (10 s), naming rank 1 and the error, also in torchrun's failure report
            (through the worker's TORCHELASTIC_ERROR_FILE); no hang.
  no-store  one rank with torchrun's variables but nothing at MASTER_PORT: an error naming the
            address and the timeout (2 s) within seconds.
Prints what it measured and exits non-zero on any failed claim.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from torchrun_support import TORCHRUN_VARIABLES, check, fail, free_port

BOUND_SECS = 90.0  # no run may take longer: a hang fails the test
MIN_ACCURACY = 0.9


class Job:
    """A command in a session of its own, its stdout and stderr merged and collected by a
    thread, so that a test can wait for a line and then signal it."""

    def __init__(self, command, env=None):
        print("$ " + " ".join(str(c) for c in command), flush=True)
        self.start = time.monotonic()
        self.process = subprocess.Popen([str(c) for c in command], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, env=env, start_new_session=True)
        self.lines = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def wait_for(self, pattern, timeout=BOUND_SECS):
        """The first match of pattern in the output, waiting for it; fails if the job ends or
        the time runs out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.output(), re.M)
            if m:
                return m
            if self.process.poll() is not None:
                self.reader.join(5)
                m = re.search(pattern, self.output(), re.M)
                if m:
                    return m
                fail(f"the job ended (exit {self.process.returncode}) without {pattern!r}",
                     self.output())
            time.sleep(0.02)
        self.kill()
        fail(f"no {pattern!r} within {timeout} s", self.output())

    def finish(self, timeout=BOUND_SECS):
        """(exit status, output, seconds); a hang past timeout fails the test."""
        try:
            self.process.wait(timeout=timeout - (time.monotonic() - self.start))
        except subprocess.TimeoutExpired:
            self.kill()
            fail(f"no end within {timeout} s (a hang)", self.output())
        self.reader.join(10)
        return self.process.returncode, self.output(), time.monotonic() - self.start

    def kill(self):
        """SIGKILL to the launcher and every process under it: torchrun starts its workers in
        sessions of their own, so its process group alone would leave them running."""
        doomed = descendants(self.process.pid)
        for pid in doomed + [self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def env_one_thread():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    return env


def torchrun(args, nproc, python, program, restarts=0):
    return Job([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc,
                "--max-restarts", restarts, "--no-python", program, "--engine", "c10d",
                "--timeout-secs", 10] + args, env_one_thread())


def mpirun(args, nproc, mpirun_exe, program):
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return Job([mpirun_exe] + extra + ["--oversubscribe", "-np", nproc, program,
                                       "--engine", "mpi"] + args, env_one_thread())


def per_rank(pattern, output):
    """{rank: [values]} of every line matching pattern (groups: rank, value)."""
    found = {}
    for m in re.finditer(pattern, output, re.M):
        found.setdefault(int(m[1]), []).append(m[2])
    return found


def finished_run(output, nproc, steps, expect_accuracy=True):
    """Checks a run that ended: every rank stopped at `steps` exactly once with the same
    parameters hash; returns the hash."""
    stopped = per_rank(r"^rank (\d+) stopped at step (\d+)$", output)
    check(sorted(stopped) == list(range(nproc)) and
          all(v == [str(steps)] for v in stopped.values()),
          f"expected every rank of {nproc} to print `rank R stopped at step {steps}` once, got "
          f"{stopped}", output)
    hashes = per_rank(r"^rank (\d+) parameters hash: (\d+)$", output)
    check(sorted(hashes) == list(range(nproc)) and all(len(v) == 1 for v in hashes.values()),
          f"expected one `rank R parameters hash: H` per rank, got {hashes}", output)
    distinct = {v[0] for v in hashes.values()}
    check(len(distinct) == 1, f"the ranks hold different parameters: {hashes}", output)
    if expect_accuracy:
        m = re.search(r"^test accuracy: ([0-9.]+)", output, re.M)
        check(m and float(m[1]) >= MIN_ACCURACY, f"no test accuracy >= {MIN_ACCURACY}", output)
        print(f"ok: test accuracy {m[1]}")
    m = re.search(r"^trained (\d+) steps in .*$", output, re.M)
    if m:
        print("   " + m[0])
    print(f"ok: all {nproc} ranks stopped at step {steps} with parameters hash {distinct}")
    return distinct.pop()


def resumed(output, nproc):
    """(step, restored parameters hash), the same on every rank, from `rank R resumed at ...`."""
    found = {int(m[1]): (int(m[2]), m[3]) for m in re.finditer(
        r"^rank (\d+) resumed at step (\d+), parameters hash: (\d+)$", output, re.M)}
    check(sorted(found) == list(range(nproc)), f"expected every rank of {nproc} to resume, got "
          f"{found}", output)
    check(len(set(found.values())) == 1, f"the ranks resumed differently: {found}", output)
    return next(iter(found.values()))


def last_checkpoint(model_dir):
    """The step of the checkpoint that the state file names (the last complete one)."""
    with open(os.path.join(model_dir, "checkpoint")) as f:
        m = re.search(r'^model_checkpoint_path: "model\.ckpt-(\d+)"', f.read(), re.M)
    check(m, f"{model_dir}/checkpoint names no model.ckpt-N")
    return int(m[1])


def kill_and_resume(start_job, common, model_dir, nproc, whole_hash, steps, save_steps):
    """Runs start_job(args) until a checkpoint after step 0 is saved and a little more, SIGKILLs
    the whole job, reruns it; the rerun must resume at the last complete checkpoint and end with
    whole_hash. Returns the checkpoint's step."""
    job = start_job(common + ["--model-dir", model_dir])
    job.wait_for(rf"saved checkpoint .*model\.ckpt-{save_steps}$")
    time.sleep(random.uniform(0.0, 0.1))
    job.kill()
    at = last_checkpoint(model_dir)
    print(f"killed the whole job; the last complete checkpoint is at step {at}")
    code, output, secs = start_job(common + ["--model-dir", model_dir]).finish()
    check(code == 0, f"the rerun exited {code}", output)
    step, restored = resumed(output, nproc)
    check(step == at, f"the rerun resumed at step {step}, the last checkpoint is at {at}", output)
    final = finished_run(output, nproc, steps, expect_accuracy=False)
    check(final == whole_hash, f"the resumed run ends with parameters hash {final}, the "
          f"uninterrupted one with {whole_hash}", output)
    print(f"ok: every rank resumed at step {at} and ended bit for bit as the uninterrupted run "
          f"({secs:.1f} s)")
    return at, restored


def case_engine(engine, args):
    # MPI's steps are faster (about 1.8 ms against c10d's 6 ms on 4 ranks of 2 cores): more of
    # them, so that the kill comes mid-run.
    nproc, steps, save_steps = 4, (300 if engine == "c10d" else 800), 100
    common = ["--data", args.data, "--steps", steps, "--save-steps", save_steps,
              "--log-every", 100]
    if engine == "c10d":
        def start(a, n=nproc):
            return torchrun(a, n, args.python, args.program)
    else:
        def start(a, n=nproc):
            return mpirun(a, n, args.mpirun, args.program)
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        code, output, secs = start(common + ["--model-dir", os.path.join(tmp, "whole")]).finish()
        check(code == 0, f"exit {code}", output)
        whole = finished_run(output, nproc, steps)
        print(f"   uninterrupted run: {secs:.1f} s")
        # The chief's summaries only: one event file (the other ranks' ChiefOnly hooks never
        # begin, so they open none), which TensorBoard reads as the run.
        events = [n for n in os.listdir(os.path.join(tmp, "whole")) if n.startswith("events.out.")]
        check(len(events) == 1, f"the model directory holds {len(events)} event files, "
              f"expected the chief's one: {events}")
        killed = os.path.join(tmp, "killed")
        at, restored = kill_and_resume(start, common, killed, nproc, whole, steps, save_steps)
        if engine != "c10d":
            return
        # Another world size: the checkpoint at `at`, as the killed job left it, resumed by 2.
        # kill_and_resume's rerun went on from it; its checkpoints up to `at` are the same files.
        two = os.path.join(tmp, "two")
        os.makedirs(two)
        for name in os.listdir(killed):
            if name.startswith(f"model.ckpt-{at}."):
                shutil.copy2(os.path.join(killed, name), two)
        with open(os.path.join(two, "checkpoint"), "w") as f:
            f.write(f'model_checkpoint_path: "model.ckpt-{at}"\n'
                    f'all_model_checkpoint_paths: "model.ckpt-{at}"\n')
        code, output, secs = start(common + ["--model-dir", two], 2).finish()
        check(code == 0, f"the 2-rank run exited {code}", output)
        step, hash2 = resumed(output, 2)
        check((step, hash2) == (at, restored), f"2 ranks resumed at step {step} with parameters "
              f"hash {hash2}; 4 ranks at step {at} with {restored}", output)
        finished_run(output, 2, steps, expect_accuracy=False)
        print(f"ok: 2 ranks resumed the 4 ranks' checkpoint at step {at} with the same "
              f"parameters ({secs:.1f} s)")


def children(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def descendants(pid):
    """Every process under pid (children first found, then theirs)."""
    found, queue = [], [pid]
    while queue:
        kids = children(queue.pop())
        found += kids
        queue += kids
    return found


def worker_of_rank(torchrun_pid, rank):
    for kid in children(torchrun_pid):
        try:
            with open(f"/proc/{kid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if env.get(b"RANK") == str(rank).encode():
            return kid
    return None


def case_restart(args):
    nproc, steps, save_steps = 4, 300, 100
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        job = torchrun(["--data", args.data, "--steps", steps, "--save-steps", save_steps,
                        "--log-every", 100, "--model-dir", tmp], nproc, args.python, args.program,
                       restarts=3)
        job.wait_for(rf"saved checkpoint .*model\.ckpt-{save_steps}$")
        victim = worker_of_rank(job.process.pid, 2)
        check(victim is not None, "no worker of rank 2 among torchrun's children", job.output())
        os.kill(victim, signal.SIGKILL)
        print(f"SIGKILLed rank 2 (pid {victim})")
        code, output, secs = job.finish()
        check(code == 0, f"torchrun exited {code}", output)
        before = output[:output.find(" resumed at step ")]
        saved = [int(s) for s in re.findall(r"saved checkpoint .*model\.ckpt-(\d+)$", before, re.M)]
        step, _ = resumed(output, nproc)
        check(saved and step == max(saved), f"resumed at step {step}; the chief's last complete "
              f"checkpoint before the restart was at {max(saved) if saved else None}", output)
        finished_run(output, nproc, steps)
        print(f"ok: torchrun restarted the group; every rank resumed at step {step}, the chief's "
              f"last checkpoint, and finished ({secs:.1f} s)")


def case_sigterm(args):
    nproc, steps = 4, 100000
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        job = torchrun(["--data", args.data, "--steps", steps, "--save-steps", 100,
                        "--log-every", 100, "--model-dir", tmp], nproc, args.python, args.program)
        job.wait_for(r"saved checkpoint .*model\.ckpt-100$")
        os.kill(job.process.pid, signal.SIGTERM)
        sent = time.monotonic()
        print("sent SIGTERM to torchrun")
        code, output, secs = job.finish()
        stopped = per_rank(r"^rank (\d+) stopped at step (\d+)$", output)
        check(sorted(stopped) == list(range(nproc)) and all(len(v) == 1 for v in stopped.values())
              and len({v[0] for v in stopped.values()}) == 1,
              f"expected every rank to stop once after the same step, got {stopped}", output)
        at = int(stopped[0][0])
        check(100 <= at < steps, f"stopped at step {at}", output)
        check(last_checkpoint(tmp) == at, f"the last checkpoint is at step {last_checkpoint(tmp)},"
              f" the ranks stopped at {at}", output)
        finished_run(output, nproc, at, expect_accuracy=False)
        failed = re.findall(r"exitcode\s*:\s*(-?\d+)", output)
        check(all(c == "0" for c in failed), f"a worker exited non-zero: {failed}", output)
        print(f"ok: SIGTERM stopped every rank after step {at}, final checkpoint written; torchrun "
              f"exit {code}, {time.monotonic() - sent:.1f} s after the signal")


def alive(pid):
    """Whether pid runs (a zombie, waiting for a parent to reap it, has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def case_launcher_killed(args):
    nproc, steps = 2, 100000
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        job = torchrun(["--data", args.data, "--steps", steps, "--save-steps", 100,
                        "--log-every", 100, "--model-dir", tmp], nproc, args.python, args.program)
        job.wait_for(r"saved checkpoint .*model\.ckpt-100$")
        workers = children(job.process.pid)
        check(len(workers) == nproc, f"torchrun has {len(workers)} children, expected {nproc}",
              job.output())
        os.kill(job.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        print(f"SIGKILLed torchrun (pid {job.process.pid}); its workers: {workers}")
        while any(alive(w) for w in workers) and time.monotonic() - killed < 30:
            time.sleep(0.05)
        left = [w for w in workers if alive(w)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        job.process.wait()
        job.reader.join(10)
        output = job.output()
        check(not left, f"workers {left} still ran 30 s after torchrun was killed", output)
        stopped = per_rank(r"^rank (\d+) stopped at step (\d+)$", output)
        check(sorted(stopped) == list(range(nproc)) and all(len(v) == 1 for v in stopped.values())
              and len({v[0] for v in stopped.values()}) == 1,
              f"expected every rank to stop once after the same step, got {stopped}", output)
        at = int(stopped[0][0])
        check(last_checkpoint(tmp) == at, f"the last checkpoint is at step {last_checkpoint(tmp)},"
              f" the ranks stopped at {at}", output)
        print(f"ok: torchrun SIGKILLed; its workers got SIGTERM from the kernel and every rank "
              f"stopped after step {at}, final checkpoint written, "
              f"{time.monotonic() - killed:.1f} s after the kill")


def two_agents(args, model_dir, steps):
    """Two torchrun agents on 127.0.0.1 as two machines of one elastic job (one worker each), and
    the c10d rendezvous' store (which the workers share) in a process of its own, as a cluster's
    would be, so that either machine may be lost: (store, [agent, agent]). The rendezvous waits
    2 s for a second machine once one is there, and takes a machine whose agent stopped beating
    for 2 s as gone (torchrun's defaults: 30 s and 15 s)."""
    port = free_port()
    store = subprocess.Popen(
        [args.python, "-c", "import sys, time; from torch.distributed import TCPStore; "
         f"s = TCPStore('127.0.0.1', {port}, is_master=True, wait_for_workers=False); "
         "time.sleep(600)"], stdin=subprocess.DEVNULL)
    def agent():
        return Job([args.python, "-m", "torch.distributed.run", "--nnodes", "1:2",
                    "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "runhooks-two-machines",
                    "--rdzv-conf", "is_host=0,last_call_timeout=2,keep_alive_interval=1,"
                                   "keep_alive_max_attempt=2",
                    "--max-restarts", 3, "--no-python", args.program, "--engine", "c10d",
                    "--timeout-secs", 10, "--data", args.data, "--model-dir", model_dir,
                    "--steps", steps, "--save-steps", 100, "--log-every", 100],
                   env_one_thread())
    return store, [agent(), agent()]


def worker_rank(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    return int(env[b"RANK"])


def case_machine_lost(args, whole):
    """node-launcher-killed (the chief's machine loses its agent) and node-killed (the other
    machine dies whole): see the module's doc."""
    steps = 1500
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        store, agents = two_agents(args, tmp, steps)
        workers = []
        def both():
            return (agents[0].output() + "\n---- the other agent ----\n" + agents[1].output())
        try:
            deadline = time.monotonic() + BOUND_SECS
            while not re.search(r"saved checkpoint .*model\.ckpt-200$", both(), re.M):
                check(time.monotonic() < deadline and all(a.process.poll() is None
                                                          for a in agents),
                      "no checkpoint at step 200 from two agents", both())
                time.sleep(0.02)
            check(re.search(r"over 2 ranks", both()), "the job did not start on 2 machines",
                  both())
            per_agent = [children(a.process.pid) for a in agents]
            check([len(w) for w in per_agent] == [1, 1], f"expected one worker per agent, got "
                  f"{per_agent}", both())
            workers = [w[0] for w in per_agent]
            # The chief's machine loses its agent; the other machine dies whole: between them,
            # the survivor goes on as the chief and as a rank that becomes it.
            lost_rank = 1 if whole else 0
            i = [worker_rank(w) for w in workers].index(lost_rank)
            lost, survivor, victim = agents[i], agents[1 - i], workers[i]
            if whole:
                os.kill(victim, signal.SIGKILL)
            os.kill(lost.process.pid, signal.SIGKILL)
            killed = time.monotonic()
            print(f"SIGKILLed the agent (pid {lost.process.pid}) of rank {lost_rank}" +
                  (f" and its worker (pid {victim})" if whole else
                   f"; its worker (pid {victim}) lives on"))
            # Both workers of the 2-machine group end (the lost machine's, and the survivor's
            # when its collective fails); then the state file names the chief's last complete
            # checkpoint, before the survivor's agent, after a rendezvous of 2 s at least,
            # starts a group again.
            while any(alive(w) for w in workers) and time.monotonic() - killed < 30:
                time.sleep(0.02)
            left = [w for w in workers if alive(w)]
            check(not left, f"workers {left} still ran 30 s after the kill", both())
            at = last_checkpoint(tmp)
            lost.process.wait()
            lost.reader.join(10)
            before = survivor.output()
            early = per_rank(r"^rank (\d+) stopped at step (\d+)$", before + lost.output())
            check(not early, f"the machine's loss stopped the job: {early} (a stop vote; the "
                  f"surviving agent would take it for a success)", both())
            if not whole:
                expected = (rf"runhooks: rank {lost_rank} of 2: its launcher \(torchrun's agent, "
                            rf"pid {lost.process.pid}\) died, and other machines take part in "
                            r"the job \(LOCAL_WORLD_SIZE=1, WORLD_SIZE=2\): leaving it as a lost "
                            r"machine does, without a stop vote")
                check(re.search(expected, lost.output()),
                      "the orphaned worker did not say why it left", lost.output())
            print(f"both workers ended {time.monotonic() - killed:.1f} s after the kill, none "
                  f"stopped; the chief's last checkpoint: step {at}")
            code, output, secs = survivor.finish()
            check(code == 0, f"the surviving agent exited {code}", output)
            after = output[len(before):]
            check(re.search(r"over 1 ranks", after), "the survivor did not go on at world size 1",
                  output)
            step, _ = resumed(after, 1)
            check(step == at, f"the survivor resumed at step {step}, the chief's last checkpoint "
                  f"is at {at}", output)
            finished_run(after, 1, steps)
            print(f"ok: the survivor's agent restarted its group at world size 1, which resumed at "
                  f"step {at} and trained to step {steps}; exit 0 "
                  f"{time.monotonic() - killed:.1f} s after the kill")
        finally:
            for pid in workers:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            for job in agents:
                if job.process.poll() is None:
                    job.kill()
            store.kill()
            store.wait()


def case_throw(args):
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        job = torchrun(["--data", args.data, "--steps", 100000, "--save-steps", 1000,
                        "--log-every", 1000, "--throw-at-step", 40, "--throw-rank", 1,
                        "--model-dir", tmp], 4, args.python, args.program)
        code, output, secs = job.finish(timeout=40)
    check(code != 0, "torchrun exited 0", output)
    check(re.search(r"runhooks: rank 1 of 4: error: an injected failure after step 40 "
                    r"\(--throw-at-step\); ending the job", output),
          "no error naming rank 1 and the failure", output)
    # torchrun's own failure report carries it too, read from the worker's error file
    # (TORCHELASTIC_ERROR_FILE), where it would otherwise say that no traceback was recorded.
    check(re.search(r"traceback *: runhooks: rank 1 of 4: error: an injected failure after step "
                    r"40 \(--throw-at-step\)", output),
          "torchrun's failure report does not show rank 1's error (its error file)", output)
    print(f"ok: the job ended in {secs:.1f} s with torchrun's exit {code}, naming rank 1 and "
          f"its error, in torchrun's report too")


def case_no_store(args):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    env.update({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_RUN_ID": "ddp", "TORCHELASTIC_USE_AGENT_STORE": "True"})
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        code, output, secs = Job([args.program, "--engine", "c10d", "--data", args.data,
                                  "--model-dir", tmp, "--timeout-secs", 2],
                                 env).finish(timeout=30)
    check(code == 1, f"exit {code}, expected 1", output)
    check(f"cannot reach the job's store at MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port}" in output
          and "C10dOptions::timeout_secs = 2 s" in output and "rank 1 of 2" in output,
          "no error naming the store's address and the timeout", output)
    check(secs < 15, f"the error took {secs:.1f} s")
    print(f"ok: no store at port {port}: an error naming it after {secs:.1f} s")


def case_args(args):
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        hint = "; see train_digits_ddp --help"
        base = ["--engine", "c10d", "--data", "x.csv.gz", "--model-dir", "m"]
        refused = [
            (["--bogus"], "unknown argument '--bogus'"),
            (base + ["extra"], "unknown argument 'extra'"),
            (["--engine"], "--engine needs a value"),
            (["--engine", "nccl"], "--engine must be c10d or mpi, got 'nccl'"),
            (base[2:], "--engine is required (c10d or mpi)"),
            (base[:4], "--model-dir is required: a restarted job resumes from its checkpoints"),
            (base[:2] + base[4:], "--data is required (tools/fetch_digits.py fetches it)"),
            (base + ["--bucket-cap-mb", "0"], "--bucket-cap-mb must be a number of MiB greater "
             "than 0 and at most 1e6, got '0'"),
            (base + ["--bucket-cap-mb", "x"], "--bucket-cap-mb must be a number of MiB greater "
             "than 0 and at most 1e6, got 'x'"),
        ] + [(base + [flag, value], f"{flag} must be a positive integer, got '{value}'")
             for flag in ["--steps", "--save-steps", "--log-every", "--seed", "--timeout-secs",
                          "--throw-at-step"] for value in ["0", "x"]]
        for argv, message in refused:
            proc = subprocess.run([args.program] + argv, cwd=tmp, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
            expected = "train_digits_ddp: " + message + hint + "\n"
            check(proc.returncode == 2 and proc.stderr == expected and not proc.stdout,
                  f"train_digits_ddp {' '.join(argv)}: exit {proc.returncode}, stdout "
                  f"{proc.stdout!r}, stderr {proc.stderr!r}; expected exit 2 and {expected!r}")
            print(f"ok: {' '.join(argv)}: exit 2, {message!r}")
        check(os.listdir(tmp) == [], f"a refused command line made {os.listdir(tmp)}")
    # Under torchrun, the same line goes into the worker's error file (TORCHELASTIC_ERROR_FILE),
    # as JSON that torchrun reads: a value with a quote, a backslash and a tab, escaped.
    with tempfile.TemporaryDirectory(prefix="runhooks-ddp-") as tmp:
        error_file = os.path.join(tmp, "error.json")
        value = 'x"y\\z\tw'
        proc = subprocess.run([args.program, "--engine", value], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env=dict(os.environ, TORCHELASTIC_ERROR_FILE=error_file))
        line = f"train_digits_ddp: --engine must be c10d or mpi, got '{value}'" + hint
        check(proc.returncode == 2 and proc.stderr == line + "\n",
              f"exit {proc.returncode}, stderr {proc.stderr!r}")
        check(os.path.exists(error_file), "no error file written under TORCHELASTIC_ERROR_FILE")
        with open(error_file, encoding="utf-8") as f:
            data = json.load(f)
        check(data.get("message") == line and isinstance(data.get("timestamp"), int)
              and abs(data["timestamp"] - time.time()) < 600,
              f"the error file holds {data!r}, expected the message {line!r} and a timestamp")
        print("ok: the same line in torchrun's error file, as JSON")
    proc = subprocess.run([args.program, "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    check(proc.returncode == 0 and proc.stdout.startswith("usage: train_digits_ddp ")
          and not proc.stderr, f"--help: exit {proc.returncode}, {proc.stdout!r}")
    print("ok: --help: exit 0 and the usage")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=["args", "c10d", "mpi", "restart", "sigterm",
                                         "launcher-killed", "node-launcher-killed",
                                         "node-killed", "throw", "no-store"])
    parser.add_argument("program")
    parser.add_argument("--data", default="")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--mpirun", default="")
    args = parser.parse_args()
    args.program = os.path.abspath(args.program)
    if args.case == "args":
        return case_args(args)
    if not args.data or not os.path.isfile(args.data):
        print(f"SKIP: no digits data (-Ddigits_csv={args.data!r}; tools/fetch_digits.py "
              "fetches it)")
        sys.exit(77)
    if args.case == "mpi" and not args.mpirun:
        print("SKIP: no mpirun, or this build has no MPI engine")
        sys.exit(77)
    start = time.monotonic()
    {"c10d": lambda: case_engine("c10d", args), "mpi": lambda: case_engine("mpi", args),
     "restart": lambda: case_restart(args), "sigterm": lambda: case_sigterm(args),
     "launcher-killed": lambda: case_launcher_killed(args),
     "node-launcher-killed": lambda: case_machine_lost(args, whole=False),
     "node-killed": lambda: case_machine_lost(args, whole=True),
     "throw": lambda: case_throw(args), "no-store": lambda: case_no_store(args)}[args.case]()
    print(f"done in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
