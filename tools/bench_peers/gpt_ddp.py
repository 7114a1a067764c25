#!/usr/bin/env python3
"""nanoGPT's GPT under PyTorch's DistributedDataParallel, one rank of a torchrun job (Gloo, one
thread), for the 2-rank comparison of docs/performance.md ("nanoGPT"): the same model, settings
and steps as train_gpt --engine c10d, which --compare runs beside it. The global batch of 12 is split over the ranks as
shakespeare::Batches splits it (every rank draws the whole global batch from the same generator
and keeps rows [rank * b, (rank + 1) * b)); DDP averages the gradients; the step is
gpt_peers.py's plain loop (nanoGPT's rate, clip 1.0, AdamW). Times --steps steps from the first
with time.perf_counter (as train_gpt's "trained to step N in S s" does), then prints
  rank R gpt-ddp steps N secs S loss L

  torchrun --standalone --nproc-per-node 2 tools/bench_peers/gpt_ddp.py --data FILE [--steps N]

--compare TRAIN_GPT: the driver. Runs, in --rounds rounds alternating which goes first, two
torchrun jobs of 2 ranks (OMP_NUM_THREADS=1): train_gpt --engine c10d (runhooks: TorchStepBackend
with GradientAllreduce over Gloo, its hooks, evaluations only at the start and the end on one
batch, no sample, no checkpoint but its first and last) and this script's DDP job, the same
--steps each; prints each round's ms per step (train_gpt's "trained to step N in S s" line, which
includes those evaluations and saves; DDP's slowest rank) and the median ratio.

  tools/bench_peers/gpt_ddp.py --compare build/.../train_gpt --data FILE [--steps N] [--rounds N]
"""

import argparse
import os
import sys
import time

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_model  # noqa: E402
from gpt_peers import learning_rate  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

torch.set_num_threads(1)


def compare(args):
    import re
    import statistics
    import subprocess
    import tempfile
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2"]

    def runhooks_job(where):
        out = subprocess.run(
            launcher + ["--no-python", args.compare, "--engine", "c10d", "--data", args.data,
                        "--checkpoint-dir", where, "--steps", str(args.steps),
                        "--eval-every", str(10 * args.steps), "--eval-batches", "1",
                        "--final-eval-batches", "1", "--sample-chars", "0",
                        "--save-steps", str(10 * args.steps)],
            env=env, capture_output=True, text=True)
        m = re.search(r"^trained to step \d+ in ([0-9.]+) s", out.stdout, re.M)
        if out.returncode != 0 or not m:
            raise SystemExit(f"train_gpt failed (exit {out.returncode}):\n{out.stdout[-2000:]}"
                             f"{out.stderr[-2000:]}")
        return 1e3 * float(m.group(1)) / args.steps

    def ddp_job():
        out = subprocess.run(launcher + [os.path.abspath(__file__), "--data", args.data,
                                         "--steps", str(args.steps)],
                             env=env, capture_output=True, text=True)
        secs = [float(s) for s in re.findall(r"gpt-ddp steps \d+ secs ([0-9.]+)", out.stdout)]
        if out.returncode != 0 or len(secs) != 2:
            raise SystemExit(f"the DDP job failed (exit {out.returncode}):\n{out.stdout[-2000:]}"
                             f"{out.stderr[-2000:]}")
        return 1e3 * max(secs) / args.steps

    with open("/proc/loadavg") as f:
        print("load average before: " + " ".join(f.read().split()[:3]), flush=True)
    ratios = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="runhooks-gpt-ddp-") as where:
            if r % 2 == 0:
                ours, theirs = runhooks_job(where), ddp_job()
            else:
                theirs, ours = ddp_job(), runhooks_job(where)
        ratios.append(ours / theirs)
        print(f"round {r + 1}: runhooks (train_gpt --engine c10d) {ours:.1f} ms/step, "
              f"PyTorch DDP {theirs:.1f} ms/step, {ours / theirs:.2f}x", flush=True)
    with open("/proc/loadavg") as f:
        print("load average after: " + " ".join(f.read().split()[:3]))
    print(f"median ratio over {args.rounds} rounds: {statistics.median(ratios):.2f}x "
          f"(target: at most 1.00x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compare", metavar="TRAIN_GPT", help="the driver: see above")
    parser.add_argument("--rounds", type=int, default=4, help="with --compare (default 4)")
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    if args.compare:
        return compare(args)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = gpt_model.Config()
    if c.batch % world:
        raise SystemExit(f"the global batch {c.batch} does not split over {world} ranks")
    local = c.batch // world
    train, _, _ = gpt_model.load_text(args.data)
    model = DistributedDataParallel(gpt_model.make_model(c))
    optimizer = gpt_model.make_optimizer(model.module, c)
    batches = gpt_model.batch_stream(train, c)  # the global batch, the same on every rank
    dist.barrier()
    start = time.perf_counter()
    for step in range(args.steps):
        lr = learning_rate(step, c)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = next(batches)
        rows = slice(rank * local, (rank + 1) * local)
        logits = model(inputs[rows])  # DDP's forward: the gradients are averaged in backward
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets[rows].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    secs = time.perf_counter() - start
    print(f"rank {rank} gpt-ddp steps {args.steps} secs {secs:.6f} loss {loss.item():.4f}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
