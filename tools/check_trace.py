#!/usr/bin/env python3
"""Validates a Chrome trace-event JSON file as ProfilerHook writes it (timeline-<step>.json).

Used by tests/hooks/profiler_hook.cpp. Checks what chrome://tracing and Perfetto need to load it:
  - well-formed JSON, an object with a "traceEvents" list;
  - every event has name (string), ph, pid and tid; "X" (complete) events have numeric ts and
    dur with dur >= 0, "M" (metadata) events have args.name;
  - exactly one "step <N>" event with args.global_step == N (and N == --step when given);
  - nesting: every other "X" event of the thread lies inside the step event, and the other
    events do not overlap one another (each ends before the next begins), so every pair of
    events is either nested or disjoint.
Prints "ok N" (N = the number of spans inside the step) or the first problem, and exits 1.
"""

import argparse
import json
import sys

EPS = 1e-6  # microseconds: the file has 3 decimals


def fail(message):
    print("error: %s" % message)
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--step", type=int)
    parser.add_argument("--span", action="append", default=[],
                        help="the end of a span's name (who::what) that must be present, e.g. "
                             "Backend::run; repeatable")
    args = parser.parse_args()
    try:
        with open(args.trace, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        return fail("not well-formed JSON: %s" % e)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return fail("no traceEvents list")
    steps, spans = [], []
    for i, e in enumerate(trace["traceEvents"]):
        if not isinstance(e, dict):
            return fail("event %d is not an object" % i)
        for field in ("name", "ph", "pid", "tid"):
            if field not in e:
                return fail("event %d has no %s" % (i, field))
        if not isinstance(e["name"], str):
            return fail("event %d: name is not a string" % i)
        if e["ph"] == "M":
            if not isinstance(e.get("args", {}).get("name"), str):
                return fail("metadata event %d has no args.name" % i)
        elif e["ph"] == "X":
            for field in ("ts", "dur"):
                if not isinstance(e.get(field), (int, float)) or isinstance(e.get(field), bool):
                    return fail("event %d: %s is not a number" % (i, field))
            if e["dur"] < 0:
                return fail("event %d (%s): negative duration %r" % (i, e["name"], e["dur"]))
            (steps if e.get("cat") == "step" else spans).append(e)
        else:
            return fail("event %d: unexpected phase %r" % (i, e["ph"]))
    if len(steps) != 1:
        return fail("%d step events, expected 1" % len(steps))
    step = steps[0]
    n = step.get("args", {}).get("global_step")
    if step["name"] != "step %s" % n:
        return fail("step event %r does not match args.global_step %r" % (step["name"], n))
    if args.step is not None and n != args.step:
        return fail("global step %r, expected %d" % (n, args.step))
    begin, end = step["ts"], step["ts"] + step["dur"]
    previous_end = None
    for e in sorted(spans, key=lambda e: e["ts"]):
        if (e["pid"], e["tid"]) != (step["pid"], step["tid"]):
            return fail("span %s is on another thread" % e["name"])
        if e["ts"] < begin - EPS or e["ts"] + e["dur"] > end + EPS:
            return fail("span %s [%r, %r] is not inside the step [%r, %r]"
                        % (e["name"], e["ts"], e["ts"] + e["dur"], begin, end))
        if previous_end is not None and e["ts"] < previous_end - EPS:
            return fail("span %s begins before the previous span ends" % e["name"])
        previous_end = e["ts"] + e["dur"]
    names = {e["name"] for e in spans}
    for wanted in args.span:
        if not any(name == wanted or name.endswith("::" + wanted) for name in names):
            return fail("no span %r among %r" % (wanted, sorted(names)))
    print("ok %d" % len(spans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
