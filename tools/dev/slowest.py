#!/usr/bin/env python3
"""The ten slowest tests and build steps of a ./dev test run, so that runs on two machines compare.

Usage: slowest.py [--tests LABEL=TESTLOG.json]... [--builds LABEL=NINJA_LOG:OFFSET]...

A test's seconds are Meson's (testlog.json, one JSON object a line); a build step's are ninja's
(.ninja_log: start and end in milliseconds), counting only the lines written after OFFSET bytes,
which ./dev test records before each build (a rebuild lists what it rebuilt, not the last full
build). Both are wall times: two run at once on two cores, so a step's figure grows with the load.
"""
import json
import os
import sys


def tests(label, path):
    try:
        with open(path, encoding="utf-8") as log:
            for line in log:
                if line.strip():
                    test = json.loads(line)
                    yield float(test.get("duration", 0.0)), f"{label}: {test.get('name', '?')}"
    except FileNotFoundError:
        return


def build_steps(label, path, offset):
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            text = log.read()
    except FileNotFoundError:
        return
    # ninja rewrites (recompacts) its log now and then: then the offset means nothing, read it all.
    if offset <= len(text):
        text = text[offset:]
    latest = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 5 or not fields[0].isdigit() or not fields[1].isdigit():
            continue  # the header "# ninja log v5", or a line cut short
        latest[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000.0
    for output, seconds in latest.items():
        yield seconds, f"{label}: {os.path.basename(output)}"


def show(title, items):
    items = sorted(items, reverse=True)[:10]
    if items:
        print(title)
        for seconds, name in items:
            print(f"  {seconds:7.1f} s  {name}")


def main(argv):
    test_items, build_items = [], []
    it = iter(argv)
    for flag in it:
        value = next(it, None)
        if value is None or "=" not in value:
            sys.exit(f"slowest.py: {flag} wants LABEL=PATH, got {value!r}")
        label, rest = value.split("=", 1)
        if flag == "--tests":
            test_items += tests(label, rest)
        elif flag == "--builds":
            path, _, offset = rest.rpartition(":")
            build_items += build_steps(label, path, int(offset or 0))
        else:
            sys.exit(f"slowest.py: unknown option {flag!r}")
    show("the ten slowest tests (wall seconds):", test_items)
    show("the ten slowest build steps (wall seconds):", build_items)


if __name__ == "__main__":
    main(sys.argv[1:])
