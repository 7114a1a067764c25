#!/usr/bin/env python3
"""runhooks + libtorch against hand-written libtorch, PyTorch, Lightning, Keras and TensorFlow
on the same training loops, interleaved in rounds (`./dev bench-peers`; docs/performance.md).

Three measurements, each over the configurations of every framework that is installed:
  digits   time per step of the MLP (64, 64, 10) on the 8x8 digits, batches of 32, with the
           frameworks' checkpoint, summary and progress-bar callbacks, and without them
  trivial  the same loops on a step that does almost nothing (a Linear(1, 2) on one row), so
           that each framework's own cost per step shows
  stall    how long the step that saves a checkpoint of a 64 MiB state stops training, in each
           framework's usual checkpoint path
Each framework runs in a worker process (bench/peers/libtorch_peers.cpp for libtorch and
runhooks, tools/bench_peers/{torch,keras,tf1}_peers.py for the others; protocol.py) that sets
every loop up once, runs its warm-up steps untimed (first-step tracing, the first checkpoint and
summary), and then runs a round's steps whenever told. A round runs every loop once, in an order
that rotates from round to round (A B C ... then B C ... A), so that the machine's load spreads
over all of them; the loops keep their state between rounds (one long fit() per Keras or
Lightning loop), so every round measures the steady state. One thread everywhere.

Reported: per loop the median over rounds, and per round its difference from and its ratio to
the plain loop of the same language and engine (libtorch's hand-written loop, the plain PyTorch
loop, the plain TF2 loop, the plain tf.compat.v1 Session loop), medians of those. A stall is the
round's time minus its steps at the round's median step time.

  tools/bench_peers/run.py --data build/data/digits.csv.gz [--libtorch-worker PATH]
      [--rounds N] [--quick] [--doc docs/performance.md | --no-doc] [--json PATH] [--log-dir DIR]

Writes its tables between `<!-- bench-peers:begin -->` and `<!-- bench-peers:end -->` in --doc,
only from a run where every row ran (not with --quick). Exit status: 0 when every configuration
whose packages are installed ran, 1 otherwise.
"""

import argparse
import concurrent.futures
import gzip
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BEGIN, END = "<!-- bench-peers:begin -->", "<!-- bench-peers:end -->"

# Python packages: the module that must be importable, the distributions whose version is
# reported (the first installed), and the pinned requirement to install. torch is pinned in every
# command that installs a package depending on it: an unpinned one pulls GBs of CUDA.
PACKAGES = {
    "numpy": (("numpy",), ("numpy",), "numpy==2.4.6"),  # tools/bench_peers/data.py; torch lacks it
    "torch": (("torch",), ("torch",), "torch==2.13.0"),
    "lightning": (("lightning", "pytorch_lightning"), ("lightning", "pytorch-lightning"),
                  "lightning==2.6.6"),
    "tensorflow": (("tensorflow",), ("tensorflow-cpu", "tensorflow"), "tensorflow-cpu==2.21.0"),
    "keras": (("keras",), ("keras",), "keras==3.15.1"),
    "tensorboard": (("tensorboard",), ("tensorboard",), "tensorboard==2.21.0"),
}

# The worker of each framework family: its program, and the packages it cannot start without.
WORKERS = {
    "libtorch": ((), ()),  # the C++ program (--libtorch-worker)
    "torch": (("torch_peers.py",), ("numpy", "torch")),
    "keras": (("keras_peers.py",), ("numpy", "tensorflow", "keras")),
    "tf1": (("tf1_peers.py",), ("numpy", "tensorflow")),
}


@dataclass
class Config:
    name: str
    worker: str
    framework: str
    what: str
    baseline: str  # the plain loop of its language and engine
    extra: tuple = ()  # packages it needs besides its worker's

    @property
    def needs(self):
        return WORKERS[self.worker][1] + self.extra


LIGHTNING, TENSORBOARD = ("lightning",), ("tensorboard",)
STEP_CONFIGS = [
    Config("libtorch", "libtorch", "libtorch (C++)", "hand-written loop", "libtorch"),
    Config("runhooks-bare", "libtorch", "runhooks + libtorch", "`StopAtStepHook` only", "libtorch"),
    Config("runhooks-hooks", "libtorch", "runhooks + libtorch",
           "`StopAtStepHook`, `StepCounterHook`, `CheckpointSaverHook`, `SummarySaverHook`, "
           "`ProgressBarHook`", "libtorch"),
    Config("pytorch", "torch", "PyTorch", "plain loop", "pytorch"),
    Config("lightning-bare", "torch", "Lightning", "`Trainer.fit`, no logger, checkpoint or bar",
           "pytorch", LIGHTNING),
    Config("lightning-callbacks", "torch", "Lightning",
           "`ModelCheckpoint`, `TensorBoardLogger`, `TQDMProgressBar`", "pytorch",
           LIGHTNING + TENSORBOARD),
    Config("tf2", "keras", "TensorFlow 2", "`tf.function` step in a Python loop", "tf2"),
    Config("keras-bare", "keras", "Keras", "`model.fit`, `verbose=0`", "tf2"),
    Config("keras-callbacks", "keras", "Keras",
           "`ModelCheckpoint`, `TensorBoard`, progress bar (`verbose=1`)", "tf2", TENSORBOARD),
    Config("session", "tf1", "TensorFlow, graph", "`Session.run` loop", "session"),
    Config("mts-bare", "tf1", "`MonitoredTrainingSession`", "no default hooks (`StopAtStepHook`)",
           "session"),
    Config("mts-defaults", "tf1", "`MonitoredTrainingSession`",
           "default hooks: checkpoints, summaries, step counter", "session"),
]

STALL_CONFIGS = [
    Config("libtorch-save", "libtorch", "libtorch (C++)", "`save()`: a torch archive, no fsync",
           "libtorch-save"),
    Config("runhooks-async", "libtorch", "runhooks + libtorch",
           "`CheckpointSaverHook`, asynchronous: a copy in the step; write, fsync, commit on a "
           "thread", "libtorch-save"),
    Config("runhooks-sync", "libtorch", "runhooks + libtorch",
           "`CheckpointSaverHook`, `async_save = false`: write, fsync, commit in the step",
           "libtorch-save"),
    Config("pytorch-save", "torch", "PyTorch", "`torch.save`, no fsync", "pytorch-save"),
    Config("lightning-checkpoint", "torch", "Lightning", "`ModelCheckpoint`", "pytorch-save",
           LIGHTNING),
    Config("tf2-checkpoint", "keras", "TensorFlow 2", "`tf.train.CheckpointManager.save`",
           "tf2-checkpoint"),
    Config("keras-checkpoint", "keras", "Keras", "`ModelCheckpoint` (a `.keras` file)",
           "tf2-checkpoint"),
    Config("session-saver", "tf1", "TensorFlow, graph", "`Saver.save`", "session-saver"),
    Config("mts-checkpoint", "tf1", "`MonitoredTrainingSession`",
           "its `CheckpointSaverHook` (a `Saver`)", "session-saver"),
]


@dataclass
class Kind:
    name: str
    configs: list
    steps: int  # per round
    save_every: int
    summary_every: int
    warmup: int


def kinds(quick):
    steps = 100 if quick else 500
    stall = 10 if quick else 20
    return [
        Kind("digits", STEP_CONFIGS, steps, steps, steps // 5, steps),
        Kind("trivial", STEP_CONFIGS, steps, steps, steps // 5, steps),
        Kind("stall", STALL_CONFIGS, stall, stall, stall, (1 if quick else 2) * stall),
    ]


# ---- packages -----------------------------------------------------------------------------------

def installed_packages():
    """{package: version or None}."""
    found = {}
    for name, (modules, distributions, _) in PACKAGES.items():
        version = None
        if any(importlib.util.find_spec(m) is not None for m in modules):
            version = "installed"
            for distribution in distributions:
                try:
                    version = importlib.metadata.version(distribution)
                    break
                except importlib.metadata.PackageNotFoundError:
                    pass
        found[name] = version
    return found


def install_command(missing):
    requirements = [PACKAGES[p][2] for p in missing]
    if any(p in ("lightning",) for p in missing) and "torch" not in missing:
        requirements.insert(0, PACKAGES["torch"][2])  # never let pip pick a torch (CUDA)
    return f"{sys.executable} -m pip install " + " ".join(requirements)


# ---- workers ------------------------------------------------------------------------------------

class WorkerError(RuntimeError):
    pass


class Worker:
    def __init__(self, name, argv, log_path, env):
        self.name, self.log_path = name, log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1, env=env, cwd=ROOT)

    def ask(self, line):
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerError(f"the {self.name} worker died; its log: {self.log_path}") from None
        reply = self.proc.stdout.readline().strip()
        if not reply:
            raise WorkerError(f"the {self.name} worker died (exit {self.proc.wait()}); "
                              f"its log: {self.log_path}")
        if reply.startswith("error "):
            raise WorkerError(reply[len("error "):] + f" (log: {self.log_path})")
        return reply

    def quit(self):
        try:
            if self.proc.poll() is None and not self.proc.stdin.closed:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
        except OSError:
            pass

    def close(self):
        self.quit()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def worker_env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1",
               TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return env


# ---- measuring ----------------------------------------------------------------------------------

@dataclass
class Result:
    config: Config
    seconds: list = field(default_factory=list)  # per round: the round's time
    steps: list = field(default_factory=list)  # per round: each step's time, when timed per step
    background: list = field(default_factory=list)  # per round: background work waited for
    cpu: list = field(default_factory=list)  # per round: the worker's CPU seconds (all threads)
    error: str = ""


def parse_ran(reply):
    words = reply.split()
    if not words or words[0] != "ran":
        raise WorkerError(f"unexpected reply '{reply}'")
    extra = dict(w.split("=", 1) for w in words if "=" in w)
    numbers = [float(w) for w in words[1:] if "=" not in w]
    return numbers[0], numbers[1:], float(extra.get("background", 0)), float(extra["cpu"])


def on_workers(workers, jobs):
    """Runs jobs[worker] (a function of no arguments) for every worker at once."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(jobs))) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def measure(kind, results, workers, rounds, data_csv, scratch):
    runnable = [r for r in results if not r.error]
    last_step = kind.warmup + (rounds + 2) * kind.steps

    def setup_all(worker):
        for r in runnable:
            if r.config.worker != worker:
                continue
            where = os.path.join(scratch, kind.name, r.config.name)
            os.makedirs(where)
            started = time.monotonic()
            try:
                workers[worker].ask(
                    f"setup {r.config.name} {kind.name} data={data_csv} dir={where} "
                    f"warmup={kind.warmup} save_every={kind.save_every} "
                    f"summary_every={kind.summary_every} last_step={last_step}")
                log(f"  set up {r.config.name} ({time.monotonic() - started:.1f} s)")
            except WorkerError as e:
                r.error = f"setup failed: {e}"
                log(f"  {r.config.name}: {r.error}")

    log(f"{kind.name}: setting up {len(runnable)} loops ({kind.warmup} warm-up steps each)")
    on_workers(workers, {w: (lambda w=w: setup_all(w)) for w in workers})
    active = [r for r in runnable if not r.error]
    for round_index in range(rounds):
        started = time.monotonic()
        shift = round_index % max(1, len(active))
        for r in active[shift:] + active[:shift]:
            if r.error:
                continue
            try:
                total, steps, background, cpu = parse_ran(
                    workers[r.config.worker].ask(f"run {r.config.name} {kind.steps}"))
            except WorkerError as e:
                r.error = f"round {round_index + 1} failed: {e}"
                log(f"  {r.config.name}: {r.error}")
                continue
            r.seconds.append(total)
            r.steps.append(steps)
            r.background.append(background)
            r.cpu.append(cpu)
        log(f"  round {round_index + 1}/{rounds}: {time.monotonic() - started:.1f} s")

    def finish_all(worker):
        for r in active:
            if r.config.worker == worker and not r.error:
                try:
                    workers[worker].ask(f"finish {r.config.name}")
                except WorkerError as e:
                    r.error = f"finish failed: {e}"
                    log(f"  {r.config.name}: {r.error}")
    started = time.monotonic()
    on_workers(workers, {w: (lambda w=w: finish_all(w)) for w in workers})
    log(f"  closed the loops ({time.monotonic() - started:.1f} s)")
    shutil.rmtree(os.path.join(scratch, kind.name), ignore_errors=True)


# ---- statistics and tables ----------------------------------------------------------------------

def step_us(result, steps):
    """Per round: the process's CPU time per step, µs."""
    return [1e6 * s / steps for s in result.cpu]


def stall_ms(result):
    """Per round: the round's time less its steps at the round's median step time."""
    out = []
    for total, steps in zip(result.seconds, result.steps):
        if steps:
            out.append(1e3 * (total - len(steps) * statistics.median(steps)))
    return out


def paired(values, base_values):
    """Medians over the rounds both have of the per-round difference and ratio."""
    pairs = list(zip(values, base_values))
    if not pairs:
        return None, None
    ratios = [v / b for v, b in pairs if b > 0]
    return (statistics.median(v - b for v, b in pairs),
            statistics.median(ratios) if ratios else None)


def not_run(result):
    if result.error == "skipped" or result.error.startswith("missing"):
        return "not run"
    return "failed"


def fmt(x, signed=False):
    if x is None:
        return "—"
    sign = "+" if signed else ""
    if abs(x) >= 100:
        return f"{x:{sign},.0f}"
    if abs(x) >= 10:
        return f"{x:{sign}.1f}"
    return f"{x:{sign}.2f}"


def ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def step_rows(results_by_kind, step_kinds):
    """Rows of the per-step table: one per configuration, a triple of columns per kind."""
    rows = []
    for config in STEP_CONFIGS:
        cells = [config.framework, config.what]
        for kind in step_kinds:
            results = {r.config.name: r for r in results_by_kind[kind.name]}
            r = results[config.name]
            if r.error or not r.seconds:
                cells += [not_run(r), "", ""]
                continue
            values = step_us(r, kind.steps)
            base = results[config.baseline]
            if config.name == config.baseline:
                cells += [fmt(statistics.median(values)), "—", "1.00×"]
            elif base.error or not base.seconds:
                cells += [fmt(statistics.median(values)), "—", "—"]
            else:
                diff, rate = paired(values, step_us(base, kind.steps))
                cells += [fmt(statistics.median(values)), fmt(diff, signed=True), ratio(rate)]
        rows.append(cells)
    return rows


def stall_rows(results):
    by_name = {r.config.name: r for r in results}
    rows = []
    for config in STALL_CONFIGS:
        r = by_name[config.name]
        if r.error or not r.seconds:
            rows.append([config.framework, config.what, not_run(r), "", ""])
            continue
        values = stall_ms(r)
        base = by_name[config.baseline]
        rate = None
        if config.name == config.baseline:
            rate = 1.0
        elif not base.error and base.seconds:
            rate = paired(values, stall_ms(base))[1]
        background = ""
        if any(b > 0 for b in r.background):
            background = f"{fmt(1e3 * statistics.median(r.background))} ms on its thread"
        rows.append([config.framework, config.what, fmt(statistics.median(values)), ratio(rate),
                     background])
    return rows


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            model = m.group(1).strip()
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def report(results_by_kind, the_kinds, rounds, versions, load_before, load_after, skipped, quick,
           command):
    step_kinds = [k for k in the_kinds if k.name != "stall"]
    stall_kind = next(k for k in the_kinds if k.name == "stall")
    header = ["framework", "configuration"]
    for k in step_kinds:
        label = "digits MLP" if k.name == "digits" else "trivial step"
        header += [f"{label}, µs per step", "over its plain loop, µs", "× plain loop"]
    per_step = markdown(header, step_rows(results_by_kind, step_kinds))
    stalls = markdown(["framework", "checkpoint of 64 MiB", "stall, ms", "× the plain save",
                       "background"], stall_rows(results_by_kind["stall"]))
    digits = step_kinds[0]
    of_rounds = f"{rounds} interleaved round{'' if rounds == 1 else 's'}"
    notes = (f"`{command}`: {of_rounds} of {digits.steps} steps per loop "
             f"(after {digits.warmup} untimed warm-up steps) for the digits MLP and the trivial "
             f"step, checkpoints every {digits.save_every} steps and summaries every "
             f"{digits.summary_every}; {of_rounds} of {stall_kind.steps} steps, the last of "
             f"which saves, for the stall. Per step: the worker process's CPU time over the "
             f"round (every thread, so background saves and data pipelines count; waiting for "
             f"the disk does not); stalls: wall-clock time. Medians over rounds; the differences "
             f"and ratios are per round, against the plain loop of the same language and engine. "
             f"One thread everywhere. Machine: {machine()}; load average {load_before} before, "
             f"{load_after} after. Versions: {versions}.")
    if skipped:
        notes += " Not run: " + "; ".join(skipped) + "."
    if quick:
        notes += " A --quick run: few steps and rounds, for a smoke test only."
    return per_step, stalls, notes


def write_doc(path, text, begin=BEGIN, end=END):
    """Replaces what is between the markers begin and end in path (ddp.py passes its own)."""
    with open(path) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        log(f"{path} has no {begin} ... {end} markers; not written")
        return False
    start, stop = doc.index(begin), doc.index(end) + len(end)
    with open(path, "w") as f:
        f.write(doc[:start] + text + doc[stop:])
    return True


STARTED = time.monotonic()
LOG_LOCK = threading.Lock()  # the setups of several workers log at once


def log(message):
    with LOG_LOCK:
        print(f"[{time.monotonic() - STARTED:5.1f} s] {message}", file=sys.stderr, flush=True)


# ---- main ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="digits.csv.gz (tools/fetch_digits.py)")
    parser.add_argument("--libtorch-worker", help="bench_peers_libtorch; without it, libtorch "
                        "and runhooks are skipped")
    parser.add_argument("--rounds", type=int, help="rounds per measurement (default 9; --quick 2)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: fewer steps and rounds; docs are not written")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    parser.add_argument("--no-doc", action="store_true", help="print the tables only")
    parser.add_argument("--json", help="write every round's numbers here")
    parser.add_argument("--log-dir", help="keep the workers' logs here (default: a temporary "
                        "directory, removed)")
    parser.add_argument("--command", default="./dev bench-peers",
                        help="the command named in the notes")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 9)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    the_kinds = kinds(args.quick)

    packages = installed_packages()
    missing = [p for p, v in packages.items() if v is None]
    skipped = []
    if missing:
        log("missing Python packages: " + ", ".join(missing))
        log("  install them with: " + install_command(missing))
    for name, version in packages.items():
        pinned = PACKAGES[name][2].split("==")[1]
        if version not in (None, "installed") and not version.startswith(pinned):
            log(f"note: {name} {version} is installed; the comparison was written for {pinned}")
    if not args.libtorch_worker:
        skipped.append("libtorch and runhooks (no libtorch worker: torch is needed to build it)")
    elif not os.access(args.libtorch_worker, os.X_OK):
        log(f"error: {args.libtorch_worker} is not an executable")
        return 1

    scratch = tempfile.mkdtemp(prefix="runhooks-bench-peers-")
    log_dir = args.log_dir or os.path.join(scratch, "logs")
    os.makedirs(log_dir, exist_ok=True)
    data_csv = os.path.join(scratch, "digits.csv")
    with gzip.open(args.data) as src, open(data_csv, "wb") as dst:
        dst.write(src.read())

    workers, failed = {}, False
    try:
        env = worker_env()
        for name, (script, needs) in WORKERS.items():
            absent = [p for p in needs if packages[p] is None]
            if name == "libtorch":
                if not args.libtorch_worker:
                    continue
                argv = [os.path.abspath(args.libtorch_worker)]
            elif absent:
                continue
            else:
                argv = [sys.executable, os.path.join(HERE, *script)]
            workers[name] = Worker(name, argv, os.path.join(log_dir, f"{name}.log"), env)
        if not workers:
            log("nothing to measure: no framework is installed")
            return 1
        log("workers: " + ", ".join(workers) + f" (logs in {log_dir}); importing the frameworks")
        def version(worker):
            try:
                return worker.ask("version")
            except WorkerError as e:
                return e
        versions = {}
        for name, answer in on_workers(workers, {
                n: (lambda w=w: version(w)) for n, w in workers.items()}).items():
            if isinstance(answer, WorkerError):
                log(f"error: the {name} worker did not start: {answer}")
                skipped.append(f"the {name} worker, which did not start")
                failed = True
                workers.pop(name).close()
                continue
            versions.update(dict(w.split("=", 1) for w in answer.split()[1:]))

        load_before = load_average()
        results_by_kind = {}
        for kind in the_kinds:
            results = []
            for config in kind.configs:
                r = Result(config)
                absent = [p for p in config.needs if packages[p] is None]
                if absent:
                    r.error = "missing " + ", ".join(absent)
                elif config.worker not in workers:
                    r.error = "skipped"
                results.append(r)
            measure(kind, results, workers, rounds, data_csv, scratch)
            results_by_kind[kind.name] = results
        load_after = load_average()

        for kind in the_kinds:
            for r in results_by_kind[kind.name]:
                if r.error.startswith("missing"):
                    skipped.append(f"{r.config.name} ({r.error})")
                elif r.error and r.error != "skipped":
                    failed = True
                    skipped.append(f"{r.config.name} ({kind.name}): {r.error}")
        skipped = list(dict.fromkeys(skipped))
        version_text = ", ".join(f"{k} {v}" for k, v in versions.items())
        command = args.command + (" --quick" if args.quick else "") + (
            f" --rounds {args.rounds}" if args.rounds is not None else "")
        per_step, stalls, notes = report(results_by_kind, the_kinds, rounds, version_text,
                                         load_before, load_after, skipped, args.quick, command)
        print(per_step + "\n\n" + stalls + "\n\n" + notes)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump({"rounds": rounds, "versions": versions, "load_before": load_before,
                           "load_after": load_after, "machine": machine(),
                           "kinds": {k.name: {"steps": k.steps, "save_every": k.save_every,
                                              "summary_every": k.summary_every,
                                              "warmup": k.warmup,
                                              "results": [{"config": r.config.name,
                                                           "error": r.error,
                                                           "seconds": r.seconds,
                                                           "steps": r.steps,
                                                           "background": r.background,
                                                           "cpu": r.cpu}
                                                          for r in results_by_kind[k.name]]}
                                     for k in the_kinds}}, f, indent=1)
            log(f"every round's numbers: {args.json}")
        if args.quick or args.no_doc:
            pass
        elif skipped:
            log(f"{args.doc} not updated: its tables are of a run where every row ran")
        else:
            text = "\n\n".join([BEGIN, per_step, stalls, notes, END])
            if write_doc(args.doc, text):
                log(f"updated {args.doc}")
    finally:
        for worker in workers.values():  # all at once: a TensorFlow process takes a while to exit
            worker.quit()
        for worker in workers.values():
            worker.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if missing:
        log("missing Python packages: " + ", ".join(missing) + "; install them with: "
            + install_command(missing))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
