#!/usr/bin/env python3
"""Runs a libFuzzer target for a fixed time on a fresh seed corpus made by its seed maker.

Usage: run_fuzz.py --fuzzer EXE --seed-maker EXE --work DIR [--max-total-time SECONDS]
                   [-- LIBFUZZER_ARG...]

Targets: event_reader_fuzz (seeds: make_event_seeds) and histogram_fuzz (seeds:
make_histogram_seeds; pass -dict=tests/fuzz/histogram.dict after --, as tests/fuzz/meson.build
does). Under DIR: seeds/ (remade on every run), corpus/ (what libFuzzer found; kept, so later runs
start from it) and artifacts/ (an input that crashed, leaked, hung or allocated too much).
Ends with the line `fuzz executions: N in S s` and exits with libFuzzer's status; on a
failure it prints the command that replays the input.
"""

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import time

# -timeout: one input running longer than this is a hang. -malloc_limit_mb: a single
# allocation this large is a failure even where it would succeed, which is what catches a
# length field taken at its word; the reader never needs more than 64 KiB per record piece, and
# histogram_fuzz no more than its 12 KiB of buckets.
LIBFUZZER_ARGS = [
    # libFuzzer's own status for a crash is 77, which Meson reads as a skipped test: a fuzzer that
    # found a crash (histogram_fuzz, after issue 29's UTF-8 check) passed as SKIP.
    "-error_exitcode=1",
    "-timeout=10",
    "-rss_limit_mb=1024",
    "-malloc_limit_mb=64",
    "-print_final_stats=1",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzzer", required=True, type=pathlib.Path)
    parser.add_argument("--seed-maker", required=True, type=pathlib.Path)
    parser.add_argument("--work", required=True, type=pathlib.Path)
    parser.add_argument("--max-total-time", type=int, default=60)
    parser.add_argument("extra", nargs="*", help="more libFuzzer arguments, after --")
    args = parser.parse_args()

    seeds = args.work / "seeds"
    corpus = args.work / "corpus"
    artifacts = args.work / "artifacts"
    shutil.rmtree(seeds, ignore_errors=True)
    for directory in (seeds, corpus, artifacts):
        directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(args.seed_maker), str(seeds)], check=True)

    command = (
        [str(args.fuzzer), f"-max_total_time={args.max_total_time}"]
        + LIBFUZZER_ARGS
        + [f"-artifact_prefix={artifacts}/"]
        + args.extra
        + [str(corpus), str(seeds)]  # new inputs go to the first directory
    )
    print(" ".join(command), flush=True)
    start = time.monotonic()
    run = subprocess.run(command, stderr=subprocess.PIPE, text=True, errors="replace")
    elapsed = time.monotonic() - start
    sys.stderr.write(run.stderr)

    executions = re.search(r"stat::number_of_executed_units:\s*(\d+)", run.stderr)
    print(f"fuzz executions: {executions.group(1) if executions else '?'} in {elapsed:.0f} s")
    if run.returncode != 0:
        for written in re.findall(r"Test unit written to (\S+)", run.stderr):
            print(f"failing input: {written}\nreplay: {args.fuzzer} {written}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
