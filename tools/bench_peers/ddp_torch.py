#!/usr/bin/env python3
"""The PyTorch side of `./dev bench-peers ddp` (tools/bench_peers/ddp.py): one rank of a
data-parallel job under torchrun, with the Gloo backend, one thread, that runs one loop and prints
what it measured, one line per rank (as bench/peers/ddp_peers.cpp does):

  ddp        torch.nn.parallel.DistributedDataParallel over the digits MLP (64, 64, 10; the same
             initial weights as torch_peers.py's, broadcast from rank 0 by DDP), SGD lr 0.05
             momentum 0.9, cross-entropy; the global batch of 32 drawn as DistributedSampler
             shards it (each pass over the rows in a new order drawn from one seed, the same on
             every rank; rank r takes rows r*b .. (r+1)*b - 1 of each global batch, b = 32 / world
             size; the last partial batch dropped); a plain loop, no DataLoader (its per-sample
             collation would weigh more than the MLP), as torch_peers.py's plain loop. --warmup
             steps untimed, then --steps timed with time.perf_counter. Prints
               rank R ddp steps N secs S
  allreduce  torch.distributed.all_reduce of the same bytes alone (4810 float32, the MLP's
             parameters, 19 KB, DDP's one bucket), --warmup times untimed, a barrier, then
             --steps timed. Prints `rank R allreduce steps N secs S bytes B`.

  torchrun --standalone --nproc-per-node 2 tools/bench_peers/ddp_torch.py --loop ddp
      --data build/data/digits.csv.gz [--warmup N] [--steps N]
"""

import argparse
import os
import sys
import time
import traceback

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)


def make_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def shards(inputs, labels, rank, world, seed=1):
    """Endless (inputs, labels) of this rank's shard of each global batch."""
    size = data.BATCH_SIZE["digits"]
    if size % world:
        raise ValueError(f"the global batch {size} is not a multiple of the world size {world}")
    local = size // world
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(inputs), generator=generator)
        for start in range(0, len(inputs) - size + 1, size):
            rows = order[start + rank * local:start + (rank + 1) * local]
            yield inputs.index_select(0, rows), labels.index_select(0, rows)


def ddp_loop(args, rank, world):
    inputs, labels = (torch.from_numpy(a) for a in data.arrays("digits", args.data))
    model = DistributedDataParallel(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=data.LEARNING_RATE,
                                momentum=data.MOMENTUM)
    batches = shards(inputs, labels, rank, world)

    def step():
        x, y = next(batches)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    return time.perf_counter() - start, ""


def allreduce_loop(args, rank, world):
    numel = sum(p.numel() for p in make_model().parameters())
    flat = torch.ones(numel, dtype=torch.float32)
    for _ in range(args.warmup):
        dist.all_reduce(flat)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        flat.fill_(1.0)  # as a bucket is refilled each step
        dist.all_reduce(flat)
    return time.perf_counter() - start, f" bytes {numel * 4}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", required=True, choices=["ddp", "allreduce"])
    parser.add_argument("--data", help="digits.csv.gz (tools/fetch_digits.py); --loop ddp")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1")
    if args.loop == "ddp" and not args.data:
        parser.error("--loop ddp needs --data")
    dist.init_process_group("gloo")  # env:// from torchrun's variables
    status = 1
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        loop = ddp_loop if args.loop == "ddp" else allreduce_loop
        secs, extra = loop(args, rank, world)
        sys.stdout.write(f"rank {rank} {args.loop} steps {args.steps} secs {secs:.9f}{extra}\n")
        sys.stdout.flush()  # one write per line: the ranks share stdout
        dist.barrier()
        dist.destroy_process_group()
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        # Out at once: torch 2.13's Gloo sometimes aborts in the interpreter's teardown after a
        # DDP run ("terminate called without an active exception", 2 runs in 3 here), after the
        # line above was printed; that would fail the job for nothing measured.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


if __name__ == "__main__":
    main()
