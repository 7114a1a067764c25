#!/usr/bin/env python3
"""runhooks + libtorch data-parallel against PyTorch's DistributedDataParallel, on 2 ranks of one
machine, in one run (`./dev bench-peers ddp`; docs/performance.md, "Data parallelism").

Jobs, each a real job of --ranks processes (default 2, one per core; one thread each), started
afresh in every round:
  runhooks-c10d     examples/torch/train_digits_ddp's job, Gloo (bench/peers/ddp_peers.cpp
                    --loop train under torchrun --no-python)
  runhooks-mpi      the same job over MPI (under mpirun)
  runhooks-*-no-vote, runhooks-c10d-pipelined
                    the same jobs without the stop vote in the timed steps, and with it
                    pipelined: the vote's cost in the job
  pytorch-ddp       DistributedDataParallel in Python, Gloo, a plain loop on the same shards
                    (tools/bench_peers/ddp_torch.py --loop ddp under torchrun)
  gloo-cpp          the gradients' bytes (19,240: the MLP's 4810 float32, one bucket) allreduced
                    alone through c10d's ProcessGroupGloo from C++ (ddp_peers.cpp --loop allreduce)
  gloo-python       the same through torch.distributed.all_reduce (ddp_torch.py --loop allreduce)
  mpi-cpp           the same bytes through MPI_Allreduce (ddp_peers.cpp --loop allreduce)
  hooks-c10d,       the hooks' own cost on the empty step (ddp_peers.cpp --loop hooks): every hook
  hooks-mpi         of train_digits_ddp against a hand-written loop, and the price of one vote
The digits MLP (64, 64, 10), global batch 32 (16 rows per rank), SGD lr 0.05 momentum 0.9, the
digits CSV. Each program times itself the same way: --warmup steps untimed, then --steps timed with
a steady clock around the loop, per rank; a job's time per step is its slowest rank's, its time
in the allreduce the ranks' mean. A round runs every job once, in an order that rotates from round
to round; reported are medians over rounds, and ratios per round (medians of those).

  tools/bench_peers/ddp.py --data build/data/digits.csv.gz --worker build/.../bench_peers_ddp
      [--rounds N] [--quick] [--doc docs/performance.md | --no-doc] [--json PATH] [--log-dir DIR]

Writes its tables between `<!-- bench-ddp:begin -->` and `<!-- bench-ddp:end -->` in --doc, only
from a run where every job ran (not with --quick). Exit status 0 when every job ran, 1 otherwise.
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from run import fmt, load_average, machine, markdown, ratio  # noqa: E402
from run import write_doc as write_marked_doc  # noqa: E402

BEGIN, END = "<!-- bench-ddp:begin -->", "<!-- bench-ddp:end -->"
# StopVoteOptions' defaults (include/runhooks/distributed/stop_vote_hook.hpp): a vote after about
# every_n_secs of steps, or after vote time / max_overhead when that is longer.
VOTE_EVERY_SECS = 0.01
VOTE_MAX_OVERHEAD = 0.01
HOOK_VARIANTS = ("hand-written", "hooks", "vote-every-step", "pipelined-every-step")


def write_doc(path, text):
    """Replaces what is between our markers in path (run.py's write_doc, with these markers)."""
    if write_marked_doc(path, text, BEGIN, END):
        log(f"updated {path}")


def log(message, started=time.monotonic()):
    print(f"[{time.monotonic() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


class Jobs:
    """The command line of every job."""

    def __init__(self, args, scratch):
        self.args, self.scratch = args, scratch
        self.torchrun = importlib.util.find_spec("torch") is not None
        self.mpirun = shutil.which("mpirun") or shutil.which("mpiexec")

    def launcher(self, engine, python):
        n = str(self.args.ranks)
        if engine == "c10d":  # torchrun of this interpreter, which runs the Python jobs
            head = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", n]
            return head + ([] if python else ["--no-python"])
        return [self.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", n,
                    "-x", "OMP_NUM_THREADS", "-x", "MKL_NUM_THREADS"]

    def argv(self, name, round_index):
        a, worker, script = self.args, os.path.abspath(self.args.worker), os.path.join(HERE, "ddp_torch.py")
        timed = ["--warmup", str(a.warmup), "--steps", str(a.steps)]
        where = os.path.join(self.scratch, f"{name}-{round_index}")
        if name.startswith("runhooks-"):
            engine, vote = name.split("-")[1], TRAIN_VOTE[name]
            return self.launcher(engine, False) + [
                worker, "--engine", engine, "--loop", "train", "--data", a.data, "--dir", where,
                "--vote", vote] + timed
        if name == "pytorch-ddp":
            return self.launcher("c10d", True) + [script, "--loop", "ddp", "--data", a.data] + timed
        if name in ("gloo-cpp", "mpi-cpp"):
            engine = "c10d" if name == "gloo-cpp" else "mpi"
            return self.launcher(engine, False) + [worker, "--engine", engine, "--loop",
                                                   "allreduce"] + timed
        if name == "gloo-python":
            return self.launcher("c10d", True) + [script, "--loop", "allreduce"] + timed
        engine = name.split("-")[1]
        return self.launcher(engine, False) + [
            worker, "--engine", engine, "--loop", "hooks", "--dir", where,
            "--steps", str(a.hook_steps), "--rounds", str(a.hook_rounds)]


JOBS = ["runhooks-c10d", "runhooks-mpi", "pytorch-ddp", "gloo-cpp", "gloo-python", "mpi-cpp",
        "hooks-c10d", "hooks-mpi", "runhooks-c10d-no-vote", "runhooks-mpi-no-vote",
        "runhooks-c10d-pipelined"]
# The runhooks jobs' stop vote (ddp_peers.cpp --vote): the default rhythm, none in the timed
# steps, or pipelined (StopVoteOptions::pipelined).
TRAIN_VOTE = {"runhooks-c10d": "default", "runhooks-mpi": "default",
              "runhooks-c10d-no-vote": "never", "runhooks-mpi-no-vote": "never",
              "runhooks-c10d-pipelined": "pipelined"}
TRAIN_JOBS = list(TRAIN_VOTE)


def run_job(jobs, name, round_index, log_dir):
    """The job's `rank ...` lines as dicts, or raises RuntimeError naming its log."""
    argv = jobs.argv(name, round_index)
    log_path = os.path.join(log_dir, f"{name}.log")
    with open(log_path, "a") as log_file:
        log_file.write(f"\n=== round {round_index + 1}: {' '.join(argv)}\n")
        log_file.flush()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=ROOT,
                              env=job_env(), timeout=600)
        log_file.write(proc.stdout)
    lines = []
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "rank":
            continue
        record = {"rank": int(words[1]), "loop": words[2]}
        rest = words[3:]
        if record["loop"] == "hooks":
            record["variant"], rest = rest[0], rest[1:]
        record.update({k: float(v) for k, v in zip(rest[::2], rest[1::2])})
        lines.append(record)
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed (exit {proc.returncode}); its log: {log_path}")
    return lines


def job_env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               PYTHONUNBUFFERED="1", TORCH_CPP_LOG_LEVEL="ERROR")
    return env


# ---- statistics -------------------------------------------------------------------------------

def per_round_step_us(records):
    """The slowest rank's µs per step."""
    return max(1e6 * r["secs"] / r["steps"] for r in records)


def per_round_allreduce_us(records, of=statistics.mean):
    """µs per step in the gradient allreduce: the ranks' mean, or with of=min the rank that
    waited least (the last to arrive: the allreduce itself, without waiting for the others)."""
    return of(1e6 * r["allreduce_secs"] / r["allreduce_calls"] for r in records)


def hook_figures(records):
    """Per window of every variant, the slowest rank's µs per step: {variant: [µs, ...]}."""
    by_window = {}
    for r in records:
        by_window.setdefault((r["variant"], r["window"]), []).append(1e6 * r["secs"] / r["steps"])
    out = {v: [] for v in HOOK_VARIANTS}
    for (variant, _), values in sorted(by_window.items()):
        out[variant].append(max(values))
    return out


def number_windows(records):
    """Each rank prints its windows in order: number them per (rank, variant)."""
    seen = {}
    for r in records:
        key = (r["rank"], r["variant"])
        r["window"] = seen.get(key, 0)
        seen[key] = r["window"] + 1
    return records


def paired_ratio(values, bases):
    ratios = [v / b for v, b in zip(values, bases) if b > 0]
    return statistics.median(ratios) if ratios else None


def med(values):
    return statistics.median(values) if values else None


def small(x):
    """A figure that may be far below 1."""
    return "—" if x is None else (fmt(x) if abs(x) >= 1 else f"{x:.3f}")


def spread(values):
    return f"{fmt(med(values))} [{fmt(min(values))}, {fmt(max(values))}]"


def report(results, rounds, args, load_before, load_after, versions):
    step = {n: [per_round_step_us(r) for r in results[n]] for n in
            TRAIN_JOBS + ["pytorch-ddp", "gloo-cpp", "gloo-python", "mpi-cpp"]}
    mean_in = {n: [per_round_allreduce_us(r) for r in results[n]] for n in TRAIN_JOBS}
    last_in = {n: [per_round_allreduce_us(r, min) for r in results[n]] for n in TRAIN_JOBS}
    alone_of = {"c10d": "gloo-cpp", "mpi": "mpi-cpp"}
    nbytes = int(results["gloo-cpp"][0][0]["bytes"])
    job = "runhooks + libtorch (`train_digits_ddp`'s job)"
    rows = []
    for name, who, how in [
        ("runhooks-c10d", job, "c10d `ProcessGroupGloo`, `torchrun --no-python`"),
        ("runhooks-mpi", job, "MPI, `mpirun`"),
        ("runhooks-c10d-pipelined", "… with `StopVoteOptions::pipelined`",
         "c10d `ProcessGroupGloo`, `torchrun --no-python`"),
        ("pytorch-ddp", "PyTorch `DistributedDataParallel` (Python loop)", "Gloo, `torchrun`"),
    ]:
        cells = [who, how, spread(step[name]),
                 ratio(paired_ratio(step[name], step["pytorch-ddp"]))]
        if name in mean_in:
            alone = alone_of[name.split("-")[1]]
            cells += [f"{fmt(med(mean_in[name]))} / {fmt(med(last_in[name]))}",
                      f"{100 * paired_ratio(mean_in[name], step[name]):.0f} %",
                      f"{ratio(paired_ratio(mean_in[name], step[alone]))} / "
                      f"{ratio(paired_ratio(last_in[name], step[alone]))}"]
        else:
            cells += ["—", "—", "—"]
        rows.append(cells)
    for name, who, how in [
        ("gloo-cpp", f"allreduce of the {nbytes:,} bytes alone: c10d `ProcessGroupGloo` (C++)",
         "Gloo, `torchrun --no-python`"),
        ("gloo-python", "… `torch.distributed.all_reduce` (Python)", "Gloo, `torchrun`"),
        ("mpi-cpp", "… `MPI_Allreduce` (C++)", "MPI, `mpirun`"),
    ]:
        rows.append([who, how, spread(step[name]), "", "", "", ""])
    steps_table = markdown(["job, 2 ranks", "engine, launcher", "µs per step [min, max]",
                            "× PyTorch DDP", "in the gradient allreduce, µs per step: ranks' "
                            "mean / last to arrive", "share of the step (mean)",
                            "× the allreduce alone (mean / last to arrive)"], rows)

    hook_rows = []
    for engine, name, train in [("c10d (Gloo)", "hooks-c10d", "runhooks-c10d"),
                                ("MPI", "hooks-mpi", "runhooks-mpi")]:
        per_variant = {v: [] for v in HOOK_VARIANTS}
        for records in results[name]:
            for v, values in hook_figures(number_windows(records)).items():
                per_variant[v].append(med(values))
        hand, hooks, vote_step, piped_step = (per_variant[v] for v in HOOK_VARIANTS)
        hooks_us = med([h - b for h, b in zip(hooks, hand)])
        vote_us = med([v - h for v, h in zip(vote_step, hooks)])
        piped_us = med([v - h for v, h in zip(piped_step, hooks)])
        ddp_step = med(step[train])
        votes_per_step = 1e-6 * ddp_step / max(VOTE_EVERY_SECS, 1e-6 * vote_us / VOTE_MAX_OVERHEAD)
        cost = hooks_us + vote_us * votes_per_step
        in_job = med([a - b for a, b in zip(step[train], step[train + "-no-vote"])])
        hook_rows.append([engine, small(1e3 * med(hand)), small(1e3 * hooks_us), small(vote_us),
                          small(piped_us), fmt(ddp_step), f"{votes_per_step:.3f}", small(cost),
                          f"{100 * cost / ddp_step:.2f} %",
                          f"{in_job:+.1f} ({100 * in_job / ddp_step:+.1f} %)"])
    hooks_table = markdown(["engine", "empty step, hand-written, ns", "the hooks, ns per step",
                            "one vote, µs", "one pipelined vote, µs",
                            "data-parallel step (above), µs", "votes per step (default rhythm)",
                            "hooks' cost per step, µs", "% of the step",
                            "in the job: step minus the step without a vote, µs"], hook_rows)
    command = args.command + (" --quick" if args.quick else "") + (
        f" --rounds {args.rounds}" if args.rounds is not None else "")
    notes = (f"`{command}`: {rounds} interleaved rounds (the order rotating), each job started "
             f"afresh in every round, {args.ranks} ranks on one machine, one thread per rank; "
             f"{args.warmup} untimed warm-up steps then {args.steps} timed ones per job, each "
             f"rank timing its loop with a steady clock; a job's time per step is its slowest "
             f"rank's. The runhooks jobs' time in the allreduce is GradientAllreduce's own clock "
             f"(the allreduce and the division; the gradients are the bucket's slices): the ranks' "
             f"mean includes waiting for the slower rank's step, the last rank to arrive's "
             f"(the rank with the least) is closest to the allreduce alone. Hooks: "
             f"{args.hook_rounds} windows per variant per round of {args.hook_steps:,} empty "
             f"steps (a hundredth of them with a vote after every step), each after a barrier; "
             f"the hooks' cost per data-parallel step is their per-step cost plus one vote times "
             f"the votes per step that the default rhythm takes at that step time (a vote after "
             f"about {VOTE_EVERY_SECS * 1000:.0f} ms of steps, or after {1 / VOTE_MAX_OVERHEAD:.0f} "
             f"times a vote's time when that is longer: StopVoteOptions::max_overhead); the last "
             f"column measures "
             f"the same in the job itself (`--vote never` jobs, paired by round). Medians over "
             f"rounds; ratios and differences per round, then their median. Machine: "
             f"{machine()}; load average {load_before} before, {load_after} after. Versions: "
             f"{versions}.")
    if args.quick:
        notes += " A --quick run: few steps and rounds, for a smoke test only."
    return steps_table, hooks_table, notes


def versions():
    out = {}
    try:
        import torch
        out["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        line = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
        out["Open MPI"] = line.split()[3] if "Open MPI" in line else line.splitlines()[0]
    except (OSError, IndexError):
        pass
    return ", ".join(f"{k} {v}" for k, v in out.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="digits.csv.gz (tools/fetch_digits.py)")
    parser.add_argument("--worker", default="", help="bench_peers_ddp (bench/peers/ddp_peers.cpp)")
    parser.add_argument("--rounds", type=int, help="rounds (default 7; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run; docs are not written")
    parser.add_argument("--ranks", type=int, default=2, help="ranks per job (default 2)")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    parser.add_argument("--no-doc", action="store_true", help="print the tables only")
    parser.add_argument("--json", help="write every round's numbers here")
    parser.add_argument("--log-dir", help="keep the jobs' logs here (default: a temporary "
                        "directory, removed)")
    parser.add_argument("--from-json", help="only print (and write) the tables of a past run's "
                        "--json file")
    parser.add_argument("--command", default="./dev bench-peers ddp",
                        help="the command named in the notes")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 7)
    if rounds < 1 or args.ranks < 1 or 32 % args.ranks:
        parser.error("--rounds must be at least 1 and --ranks divide the global batch of 32")
    args.warmup, args.steps = (50, 300) if args.quick else (200, 2000)
    args.hook_steps, args.hook_rounds = (20_000, 2) if args.quick else (200_000, 3)
    if args.from_json:
        with open(args.from_json) as f:
            past = json.load(f)
        args.warmup, args.steps, args.ranks = past["warmup"], past["steps"], past["ranks"]
        steps_table, hooks_table, notes = report(past["results"], past["rounds"], args,
                                                 past["load_before"], past["load_after"],
                                                 versions())
        print(steps_table + "\n\n" + hooks_table + "\n\n" + notes)
        if not (args.quick or args.no_doc):
            write_doc(args.doc, "\n\n".join([BEGIN, steps_table, hooks_table, notes, END]))
        return 0
    if not os.access(args.worker, os.X_OK):
        log(f"error: {args.worker} is not an executable")
        return 1
    jobs = Jobs(args, tempfile.mkdtemp(prefix="runhooks-bench-ddp-"))
    if not jobs.torchrun or not jobs.mpirun:
        log(f"error: {sys.executable} with torch (its torchrun) and mpirun are both needed "
            "(pip install torch==2.13.0; apt-get install openmpi-bin)")
        return 1
    log_dir = args.log_dir or os.path.join(jobs.scratch, "logs")
    os.makedirs(log_dir, exist_ok=True)
    for name in JOBS:
        open(os.path.join(log_dir, f"{name}.log"), "w").close()
    results = {name: [] for name in JOBS}
    failed = []
    load_before = load_average()
    try:
        for round_index in range(rounds):
            started = time.monotonic()
            shift = round_index % len(JOBS)
            for name in JOBS[shift:] + JOBS[:shift]:
                if name in failed:
                    continue
                try:
                    results[name].append(run_job(jobs, name, round_index, log_dir))
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    log(f"  {name}: {e}")
                    failed.append(name)
            log(f"round {round_index + 1}/{rounds}: {time.monotonic() - started:.1f} s "
                f"(load average {load_average()})")
        load_after = load_average()
        if failed:
            log("not every job ran: " + ", ".join(failed) + f"; logs in {log_dir}")
            return 1
        steps_table, hooks_table, notes = report(results, rounds, args, load_before, load_after,
                                                 versions())
        print(steps_table + "\n\n" + hooks_table + "\n\n" + notes)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump({"rounds": rounds, "ranks": args.ranks, "warmup": args.warmup,
                           "steps": args.steps, "load_before": load_before,
                           "load_after": load_after, "machine": machine(), "results": results},
                          f, indent=1)
            log(f"every round's numbers: {args.json}")
        if not (args.quick or args.no_doc):
            write_doc(args.doc, "\n\n".join([BEGIN, steps_table, hooks_table, notes, END]))
    finally:
        shutil.rmtree(jobs.scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
