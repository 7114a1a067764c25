#!/usr/bin/env python3
"""Regenerates docs/performance.md's benchmark section and docs/bench_hooks.svg from fresh measurements:
the Google Benchmark run of bench/session_overhead.cpp (JSON), the instruction counter
(tests/codegen/count_instructions.py) and the compile-time script (tools/compile_time.py).

Writes the section between `<!-- bench:begin -->` and `<!-- bench:end -->` in docs/performance.md, or
prints it to stdout when that file or the markers are absent. Every number in the section comes
from this run. Takes about 3-5 minutes on 2 cores.

  tools/bench_report.py [--cxx g++] [--min-time 0.2] [--repetitions 3] [--skip-compile-time]
"""

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
BENCH_FLAGS = ["-std=c++20", "-O2", "-DNDEBUG"]
HOOK_COUNTS = [1, 4, 16, 64]

# Benchmark configuration -> (label, codegen comparison id giving instructions per step over
# the hand-written loop, or None).
CONFIGS = [
    ("hand_written/bare", "hand-written loop, stop test only", None),
    ("hand_written/stop+counter", "hand-written loop, same work as StopAtStep + StepCounter", None),
    ("no_hooks", "session, no hooks", "no hooks"),
    ("stop_at_step", "StopAtStepHook", None),
    ("step_counter_steps", "StepCounterHook every_n_steps", None),
    ("step_counter_secs", "StepCounterHook every_n_secs", None),
    ("naive_counter_secs", "every_n_secs hook reading the clock every step", None),
    ("stop+counter", "StopAtStepHook + StepCounterHook every_n_steps", "stop+counter"),
    ("three_hooks", "StopAtStep + StepCounter + GlobalStepWaiterHook(0)", None),
    ("hooks:1", "1 hook (StopAtStepHook)", None),
    ("hooks:4", "4 hooks with per-step callbacks", None),
    ("hooks:16", "16 hooks (4 per-step + 12 lifecycle-only)", None),
    ("hooks:64", "64 hooks (4 per-step + 60 lifecycle-only)", "64 hooks vs 4"),
]


def run(cmd, **kw):
    print("+ " + shlex.join(cmd), file=sys.stderr)
    return subprocess.run(cmd, **kw)


def benchmarks(cxx, tmp, min_time, repetitions):
    exe = os.path.join(tmp, "bench_session_overhead")
    cmd = shlex.split(cxx) + BENCH_FLAGS + ["-I", os.path.join(ROOT, "include"), "-I",
                                            os.path.join(ROOT, "bench"),
                                            os.path.join(ROOT, "bench", "session_overhead.cpp"),
                                            "-o", exe, "-lbenchmark", "-lpthread"]
    run(cmd, check=True)
    out = os.path.join(tmp, "bench.json")
    run([exe, f"--benchmark_min_time={min_time}", f"--benchmark_repetitions={repetitions}",
         "--benchmark_report_aggregates_only=true", "--benchmark_format=console",
         f"--benchmark_out={out}", "--benchmark_out_format=json"], check=True,
        stdout=sys.stderr)
    with open(out) as f:
        data = json.load(f)
    ns = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
            ns[b["run_name"]] = b["cpu_time"] * scale
    return ns, " ".join(BENCH_FLAGS), data["context"]


def machine():
    model, cores = platform.processor() or "unknown", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            model = m.group(1).strip()
    except OSError:
        pass
    return f"{model}, {cores} cores"


def svg_plot(ns, body, path):
    """Per-step overhead of N hooks over a session without hooks, static vs dynamic."""
    base = ns[f"static/no_hooks/{body}"]
    series = {kind: [max(0.0, ns[f"{kind}/hooks:{n}/{body}"] - base) for n in HOOK_COUNTS]
              for kind in ("static", "dynamic")}
    w, h, left, right, top, bottom = 560, 320, 60, 20, 40, 50
    ymax = max(max(v) for v in series.values()) * 1.1 or 1.0
    x = lambda i: left + (w - left - right) * i / (len(HOOK_COUNTS) - 1)
    y = lambda v: top + (h - top - bottom) * (1 - v / ymax)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">Per-step overhead '
             f'over a session without hooks ({body} step)</text>']
    for k in range(6):  # horizontal grid and y labels
        v = ymax * k / 5
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#ddd"/><text x="{left - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{v:.0f}</text>')
    for i, n in enumerate(HOOK_COUNTS):
        parts.append(f'<text x="{x(i):.1f}" y="{h - bottom + 18}" text-anchor="middle">{n}</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">number of hooks '
                 f'(at most 4 with per-step callbacks)</text>')
    parts.append(f'<text x="15" y="{h / 2}" text-anchor="middle" transform="rotate(-90 15 '
                 f'{h / 2})">ns per step</text>')
    colors = {"static": "#1f77b4", "dynamic": "#d62728"}
    labels = {"static": "runhooks (static)", "dynamic": "virtual hooks (dynamic)"}
    for j, (kind, values) in enumerate(series.items()):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colors[kind]}" '
                     f'stroke-width="2"/>')
        for i, v in enumerate(values):
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colors[kind]}"/>')
        parts.append(f'<text x="{left + 10}" y="{top + 14 + 16 * j}" fill="{colors[kind]}">'
                     f'{labels[kind]}</text>')
    parts.append("</svg>")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def markdown_label(source):
    """`#include <x>` in code font, the rest of the label as text."""
    if source.startswith("#include"):
        end = source.index(">") + 1
        return f"`{source[:end]}`{source[end:]}"
    return source


def section(ns, bench_flags, cxx_version, codegen, codegen_ok, compile_times):
    lines = [BEGIN, "",
             "Regenerated by `tools/bench_report.py`; do not edit by hand. Wall-clock numbers "
             "are medians of CPU time per step on a shared machine and vary between runs; "
             "instruction counts are exact and are what CI (`meson test --suite codegen`) "
             "asserts. See `bench/README.md` for what each loop is.", "",
             "| configuration | instructions per step over hand-written (g++ / clang++) | "
             "ns per step, empty step | ns per step, SGD step | ratio to dynamic baseline "
             "(empty step) |",
             "|---|---|---|---|---|"]
    diffs = {}
    for result in codegen.get("results", []):
        for c in result["comparisons"]:
            diffs.setdefault(c["id"], []).append(f"{c['diff']:+.2f}")
    for key, label, comparison in CONFIGS:
        static = key if key.startswith("hand_written") else f"static/{key}"
        dynamic = f"dynamic/{key}"
        e, s = ns.get(f"{static}/empty"), ns.get(f"{static}/sgd")
        de = ns.get(f"{dynamic}/empty")
        instr = " / ".join(diffs[comparison]) if comparison in diffs else "—"
        if comparison == "64 hooks vs 4":
            instr += " (over the 4 hooks alone)"
        ratio = f"{e / de:.2f}" if e and de else "—"
        lines.append(f"| {label} | {instr} | {e:.2f} | {s:.1f} | {ratio} |")
    lines += ["", "![per-step overhead against the number of hooks](bench_hooks.svg)", ""]
    if codegen.get("results"):
        lines.append("Instruction-count bounds (`tests/codegen/count_instructions.py`): "
                     + ("all hold." if codegen_ok else "**some are violated**: CI fails until they hold."))
        lines += ["", "| compiler | comparison | session | reference | difference | bound |",
                  "|---|---|---|---|---|---|"]
        for result in codegen["results"]:
            for c in result["comparisons"]:
                bound = "info" if c["bound"] is None else f"≤ {c['bound']} ({c['status']})"
                lines.append(f"| {result['compiler']} | {c['what']} | {c['subject_per_step']:.2f} "
                             f"| {c['reference_per_step']:.2f} | {c['diff']:+.2f} | {bound} |")
        lines.append("")
    if compile_times:
        results = compile_times["results"]
        lines += ["Compile time of one translation unit (CPU seconds, best of "
                  f"{results[0]['rounds']} interleaved rounds, `{results[0]['flags']}`), and its "
                  "ratio to the floor TU, one that includes only `<vector>`, `<chrono>`, "
                  "`<atomic>`, `<boost/hana/tuple.hpp>` and `<boost/hana/for_each.hpp>` "
                  "(`tools/compile_time.py --headers`). Target: the quick start with "
                  f"`<runhooks/core.hpp>` at most {compile_times['target_ratio']}× the floor "
                  "with g++.", "",
                  "| translation unit | " + " | ".join(f"{r['compiler']} s | × floor"
                                                       for r in results) + " |",
                  "|---|" + "---|---|" * len(results)]
        for i, row in enumerate(results[0]["rows"]):
            cells = []
            for r in results:
                other = r["rows"][i]
                cells += [f"{other['secs']:.2f}", f"{other['ratio']:.2f}"]
            lines.append(f"| {markdown_label(row['source'])} | " + " | ".join(cells) + " |")
        for r in results:
            if "instructions" in r:
                i = r["instructions"]
                lines += ["", f"{r['compiler']}, counted by callgrind (exact, unlike seconds): "
                          f"the quick start takes {i['ratio']:.3f}× the floor's instructions "
                          f"({i['quick_start']:,} vs {i['floor']:,})."]
        lines.append("")
    lines += [f"Machine: {machine()}. Benchmarks: {cxx_version}, `{bench_flags}`, Google "
              "Benchmark (CPU time, median of the repetitions). Instruction counts: "
              + ", ".join(f"{r['version']} `-O2`" for r in codegen.get("results", []))
              + ", valgrind --tool=callgrind.", "", END]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cxx", default="g++", help="compiler for the benchmarks")
    parser.add_argument("--min-time", default="0.2", help="--benchmark_min_time (1.7: seconds)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--skip-compile-time", action="store_true")
    parser.add_argument("--readme", default=os.path.join(ROOT, "docs", "performance.md"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="runhooks-bench-") as tmp:
        ns, flags, _ = benchmarks(args.cxx, tmp, args.min_time, args.repetitions)
        codegen_json = os.path.join(tmp, "codegen.json")
        cg = run([sys.executable, os.path.join(ROOT, "tests", "codegen", "count_instructions.py"),
                  "--json", codegen_json], stdout=sys.stderr)
        codegen = {}
        if os.path.exists(codegen_json):
            with open(codegen_json) as f:
                codegen = json.load(f)
        compile_times = None
        if not args.skip_compile_time:
            ct_json = os.path.join(tmp, "compile_time.json")
            run([sys.executable, os.path.join(ROOT, "tools", "compile_time.py"), "--cxx", "g++",
                 "--cxx", "clang++", "--headers", "--instructions", "--rounds", "3", "--json",
                 ct_json], check=True, stdout=sys.stderr)
            with open(ct_json) as f:
                compile_times = json.load(f)
        version = subprocess.run(shlex.split(args.cxx) + ["--version"], capture_output=True,
                                 text=True).stdout.splitlines()[0]

    svg_plot(ns, "empty", os.path.join(ROOT, "docs", "bench_hooks.svg"))
    text = section(ns, flags, version, codegen, cg.returncode == 0, compile_times)
    readme = None
    if os.path.exists(args.readme):
        with open(args.readme) as f:
            readme = f.read()
    if readme is not None and BEGIN in readme and END in readme:
        start, end = readme.index(BEGIN), readme.index(END) + len(END)
        with open(args.readme, "w") as f:
            f.write(readme[:start] + text + readme[end:])
        print(f"updated {args.readme} and docs/bench_hooks.svg", file=sys.stderr)
    else:
        print(text)
        print(f"({args.readme} has no {BEGIN} ... {END} markers: section printed above; "
              "docs/bench_hooks.svg written)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
