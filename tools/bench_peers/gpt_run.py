#!/usr/bin/env python3
"""nanoGPT's character-level GPT under runhooks + libtorch, a hand-written libtorch loop, plain
PyTorch and Lightning, side by side in one run (`./dev bench-peers gpt`; docs/performance.md,
"nanoGPT"). Issue 28's speed figures.

The model and settings everywhere: nanoGPT's CPU configuration for tiny Shakespeare (block 64,
batch 12, 4 layers, 4 heads, 128 embedding, no dropout, no biases, tied head), AdamW (lr 1e-3
with nanoGPT's warm-up and cosine schedule, betas (0.9, 0.99), weight decay 0.1 on the 2-D
tensors only), gradients clipped to norm 1.0, one thread (torch.set_num_threads(1)).
  C++ (bench/torch_gpt.cpp, examples/torch/gpt.hpp and shakespeare.hpp):
    libtorch-gpt              a hand-written loop, no runhooks
    runhooks-gpt-bare         TorchStepBackend + StopAtStepHook
    runhooks-gpt-hooks        TorchStepBackend + the hooks a user attaches (the program's header)
  Python (tools/bench_peers/gpt_peers.py, gpt_model.py):
    pytorch-gpt               the plain loop (nanoGPT's train.py step)
    lightning-gpt             Trainer.fit, no logger, checkpoint or bar
    lightning-gpt-callbacks   ModelCheckpoint, TensorBoardLogger, LearningRateMonitor, TQDM bar
Every loop is set up and warmed up once, then run in interleaved rounds (the order rotating;
run.py's protocol and measure()). A step's time is the worker's CPU time over the round divided
by its steps (every thread: a background save counts). Ratios are per round, then their median.

Then bench_torch_gpt --measure, alone: the hooks' share of a step inside the runhooks loop (the
training thread's CPU time in the session outside the backend's step, read by a clock hook at
each end of the hook list),
and the stall of the step that takes a background checkpoint against a memcpy of the model and
AdamW bytes.

  tools/bench_peers/gpt_run.py --data tinyshakespeare.txt --worker build/.../bench_torch_gpt
      [--rounds N] [--steps N] [--quick] [--doc docs/performance.md | --no-doc] [--json PATH]
      [--log-dir DIR]

Writes its tables between `<!-- bench-peers-gpt:begin -->` and `<!-- bench-peers-gpt:end -->`
in --doc, only from a run where every row ran (not with --quick). Exit status: 0 when every
configuration whose packages are installed ran, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (Worker, measure, the statistics and the table helpers)

HERE, ROOT = run.HERE, run.ROOT
BEGIN, END = "<!-- bench-peers-gpt:begin -->", "<!-- bench-peers-gpt:end -->"

HOOKS = ("`StopAtStepHook`, `LearningRateScheduleHook`, `StepCounterHook`, "
         "`CheckpointSaverHook` (asynchronous), `SummarySaverHook` (loss), `ProgressBarHook`")
CONFIGS = [
    run.Config("libtorch-gpt", "libtorch", "libtorch (C++)", "hand-written loop", "pytorch-gpt"),
    run.Config("runhooks-gpt-bare", "libtorch", "runhooks + libtorch",
               "`TorchStepBackend`, `StopAtStepHook` only", "pytorch-gpt"),
    run.Config("runhooks-gpt-hooks", "libtorch", "runhooks + libtorch",
               "`TorchStepBackend`, " + HOOKS, "pytorch-gpt"),
    run.Config("pytorch-gpt", "torch", "PyTorch", "plain loop (nanoGPT's step)", "pytorch-gpt"),
    run.Config("lightning-gpt", "torch", "Lightning", "`Trainer.fit`, no logger, checkpoint or bar",
               "pytorch-gpt", ("lightning",)),
    run.Config("lightning-gpt-callbacks", "torch", "Lightning",
               "`ModelCheckpoint`, `TensorBoardLogger`, `LearningRateMonitor`, `TQDMProgressBar`",
               "pytorch-gpt", ("lightning", "tensorboard")),
]
NEEDS = {"libtorch": (), "torch": ("torch",)}
CPP_BASE = "libtorch-gpt"


def step_ms(result, steps):
    return [1e3 * s / steps for s in result.cpu]


def rows(results, kind):
    by_name = {r.config.name: r for r in results}
    out = []
    for config in CONFIGS:
        r = by_name[config.name]
        if r.error or not r.seconds:
            out.append([config.framework, config.what, run.not_run(r), "", ""])
            continue
        values = step_ms(r, kind.steps)
        cells = [config.framework, config.what, run.fmt(statistics.median(values))]
        for base_name in (config.baseline, CPP_BASE):
            base = by_name[base_name]
            if base_name == config.name:
                cells.append("1.00×")
            elif base.error or not base.seconds:
                cells.append("—")
            else:
                cells.append(run.ratio(run.paired(values, step_ms(base, kind.steps))[1]))
        out.append(cells)
    return out


def measure_alone(worker, steps, rounds, data, scratch, log_path):
    """bench_torch_gpt --measure: its JSON, or raises WorkerError."""
    out = os.path.join(scratch, "measure.json")
    argv = [os.path.abspath(worker), "--measure", "--data", data, "--dir",
            os.path.join(scratch, "measure"), "--steps", str(steps), "--rounds", str(rounds),
            "--json", out]
    run.log("the hooks' share and the checkpoint stall: " + " ".join(argv))
    with open(log_path, "w") as log:
        status = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=run.worker_env()).returncode
    if status != 0:
        raise run.WorkerError(f"bench_torch_gpt --measure failed (exit {status}); log: {log_path}")
    with open(out) as f:
        return json.load(f)


def measure_table(m):
    share = m["hooks"]
    stall = m["stall"]
    return run.markdown(
        ["measurement", "median", "target"],
        [["the hooks' CPU time per step (the session outside the backend's step), µs",
          run.fmt(share["hooks_us"]), ""],
         ["the step's CPU time (the backend's step), ms", run.fmt(share["step_ms"]), ""],
         ["the hooks' share of a step (their time over the step's, per round)",
          f"{100 * share['share']:.4f} %", "< 0.1 %"],
         [f"background checkpoint: the saving step's extra time in the hooks, ms "
          f"({stall['bytes'] / 2**20:.1f} MiB of model and AdamW state)",
          run.fmt(stall["snapshot_ms"]), ""],
         ["memcpy of the same bytes into a buffer mapped before, ms", run.fmt(stall["memcpy_ms"]),
          ""],
         ["the same bytes by one `Tensor::copy_` per tensor into host tensors made before, ms",
          run.fmt(stall["copy_ms"]), ""],
         ["the stall over the memcpy (wall clock)", run.ratio(stall["ratio"]), "≤ 1.2×"],
         ["the same on the training thread's CPU clock "
          f"({run.fmt(stall['snapshot_cpu_ms'])} ms over {run.fmt(stall['memcpy_cpu_ms'])})",
          run.ratio(stall["ratio_cpu"]), ""]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="tinyshakespeare.txt")
    parser.add_argument("--worker", help="bench_torch_gpt; without it, the C++ rows are skipped")
    parser.add_argument("--rounds", type=int, help="rounds (default 5; --quick 2)")
    parser.add_argument("--steps", type=int, help="steps per loop per round (default 40; "
                        "--quick 5)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: fewer steps and rounds; docs are not written")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    parser.add_argument("--no-doc", action="store_true", help="print the tables only")
    parser.add_argument("--json", help="write every round's numbers here")
    parser.add_argument("--log-dir", help="keep the workers' logs here")
    parser.add_argument("--command", default="./dev bench-peers gpt")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    steps = args.steps if args.steps is not None else (5 if args.quick else 40)
    if rounds < 1 or steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if not os.path.isfile(args.data):
        parser.error(f"{args.data} is not a file (tiny Shakespeare: ../shared/data/)")
    kind = run.Kind("gpt", CONFIGS, steps, save_every=steps, summary_every=max(1, steps // 4),
                    warmup=steps if not args.quick else 3)

    packages = run.installed_packages()
    missing = [p for p in ("torch", "lightning", "tensorboard") if packages[p] is None]
    if missing:
        run.log("missing Python packages: " + ", ".join(missing) + "; install them with: "
                + run.install_command(missing))
    skipped = []
    if not args.worker:
        skipped.append("the C++ rows (no --worker: bench_torch_gpt)")
    elif not os.access(args.worker, os.X_OK):
        run.log(f"error: {args.worker} is not an executable")
        return 1

    scratch = tempfile.mkdtemp(prefix="runhooks-bench-gpt-")
    log_dir = args.log_dir or os.path.join(scratch, "logs")
    os.makedirs(log_dir, exist_ok=True)
    data = os.path.abspath(args.data)
    workers, failed, measured = {}, False, None
    try:
        env = run.worker_env()
        if args.worker:
            workers["libtorch"] = run.Worker("libtorch", [os.path.abspath(args.worker)],
                                             os.path.join(log_dir, "gpt-libtorch.log"), env)
        if packages["torch"] is not None:
            workers["torch"] = run.Worker("torch", [sys.executable,
                                                    os.path.join(HERE, "gpt_peers.py")],
                                          os.path.join(log_dir, "gpt-torch.log"), env)
        if not workers:
            run.log("nothing to measure")
            return 1
        versions = {}
        for name, worker in workers.items():
            versions.update(dict(w.split("=", 1) for w in worker.ask("version").split()[1:]))
        load_before = run.load_average()
        results = []
        for config in CONFIGS:
            r = run.Result(config)
            absent = [p for p in NEEDS[config.worker] + config.extra if packages[p] is None]
            if absent:
                r.error = "missing " + ", ".join(absent)
            elif config.worker not in workers:
                r.error = "skipped"
            results.append(r)
        run.measure(kind, results, workers, rounds, data, scratch)
        for worker in workers.values():
            worker.quit()
        if args.worker:
            try:
                measured = measure_alone(args.worker, 50 if args.quick else 200,
                                         rounds, data, scratch,
                                         os.path.join(log_dir, "gpt-measure.log"))
            except run.WorkerError as e:
                failed = True
                skipped.append(f"bench_torch_gpt --measure: {e}")
        load_after = run.load_average()
        for r in results:
            if r.error.startswith("missing"):
                skipped.append(f"{r.config.name} ({r.error})")
            elif r.error and r.error != "skipped":
                failed = True
                skipped.append(f"{r.config.name}: {r.error}")
        command = args.command + (" --quick" if args.quick else "") + (
            f" --rounds {args.rounds}" if args.rounds is not None else "") + (
            f" --steps {args.steps}" if args.steps is not None else "")
        table = run.markdown(["framework", "configuration", "ms per step", "× PyTorch loop",
                              "× hand-written libtorch loop"], rows(results, kind))
        notes = (f"`{command}`: {rounds} interleaved rounds of {kind.steps} steps per loop (after "
                 f"{kind.warmup} untimed warm-up steps), checkpoints every {kind.save_every} "
                 f"steps and summaries every {kind.summary_every} where a loop has them; a "
                 f"step's time is the worker's CPU time (every thread), medians over rounds, "
                 f"ratios per round. One thread everywhere. Machine: {run.machine()}; load "
                 f"average {load_before} before, {load_after} after. Versions: "
                 + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
        if skipped:
            notes += " Not run: " + "; ".join(dict.fromkeys(skipped)) + "."
        if args.quick:
            notes += " A --quick run: a smoke test only."
        parts = [table]
        if measured:
            parts.append(measure_table(measured))
            notes += (f" The hooks' share and the stall: `bench_torch_gpt --measure --steps "
                      f"{measured['steps']} --rounds {measured['rounds']}`, medians over rounds "
                      f"(a save every {measured['stall']['save_every']} steps).")
        print("\n\n".join(parts + [notes]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rounds": rounds, "steps": kind.steps, "versions": versions,
                           "load_before": load_before, "load_after": load_after,
                           "results": [{"config": r.config.name, "error": r.error,
                                        "seconds": r.seconds, "steps": r.steps, "cpu": r.cpu}
                                       for r in results],
                           "measure": measured}, f, indent=1)
        if args.quick or args.no_doc:
            pass
        elif skipped:
            run.log(f"{args.doc} not updated: its tables are of a run where every row ran")
        elif run.write_doc(args.doc, "\n\n".join([BEGIN] + parts + [notes, END]), BEGIN, END):
            run.log(f"updated {args.doc}")
    finally:
        for worker in workers.values():
            worker.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
