#!/usr/bin/env python3
"""Reads a TensorFlow event file with TensorBoard's own code: scalars, histograms, session logs.

Used by tests/summary_saver_hook.cpp to check that TensorBoard reads what SummarySaverHook
writes (tools/read_events.py does the same for scalars alone). Needs the `tensorboard` package;
uses TensorBoard's pure-Python record reader, never TensorFlow (whose import takes seconds).

Output, one item per line, fields separated by a tab:
    records      N
    session_log  STEP STATUS                     STATUS as SessionLog.SessionStatus's name
    scalar       TAG STEP VALUE                  VALUE: "%.9g" of the float32
    histogram    TAG STEP MIN MAX NUM SUM SUM_SQUARES LIMITS COUNTS
                 numbers as Python's repr(); LIMITS and COUNTS comma-separated
    distribution TAG STEP N                      N: basis points of TensorBoard's compressed
                                                 histogram (the Distributions dashboard)

Scalars and histograms are those of EventAccumulator. The script fails (exit 1) unless the
histograms plugin's data provider (what the Histograms dashboard reads; legacy `histo` values
are migrated to tensors on the way in) returns the same steps and bucket counts, and on any
record TensorBoard cannot read.
"""

import argparse
import os
import sys
import types


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("event_file")
    args = parser.parse_args()
    # TensorBoard's own switch (tensorboard/compat/__init__.py): with this module present it uses
    # its pure-Python record reader instead of importing TensorFlow, which takes seconds.
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")

    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.compat.proto import event_pb2

    path = args.event_file
    records = list(event_file_loader._make_tf_record_iterator(path))
    print("records\t%d" % len(records))
    for record in records:
        event = event_pb2.Event.FromString(record)
        if event.HasField("session_log"):
            status = event_pb2.SessionLog.SessionStatus.Name(event.session_log.status)
            print("session_log\t%d\t%s" % (event.step, status))

    accumulator = event_accumulator.EventAccumulator(
        path,
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.HISTOGRAMS: 0,
            event_accumulator.COMPRESSED_HISTOGRAMS: 0,
        },
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    for tag in tags[event_accumulator.SCALARS]:
        for s in accumulator.Scalars(tag):
            print("scalar\t%s\t%d\t%.9g" % (tag, s.step, s.value))
    histograms = {}
    for tag in tags[event_accumulator.HISTOGRAMS]:
        for h in accumulator.Histograms(tag):
            v = h.histogram_value
            histograms.setdefault(tag, []).append((h.step, list(v.bucket)))
            print(
                "histogram\t%s\t%d\t%r\t%r\t%r\t%r\t%r\t%s\t%s"
                % (
                    tag,
                    h.step,
                    v.min,
                    v.max,
                    v.num,
                    v.sum,
                    v.sum_squares,
                    ",".join(repr(x) for x in v.bucket_limit),
                    ",".join(repr(x) for x in v.bucket),
                )
            )
    for tag in tags[event_accumulator.COMPRESSED_HISTOGRAMS]:
        for c in accumulator.CompressedHistograms(tag):
            print("distribution\t%s\t%d\t%d" % (tag, c.step, len(c.compressed_histogram_values)))

    # What the Histograms dashboard reads: the plugin's tensors, migrated from `histo` values.
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        {".": path}, tensor_size_guidance={"histograms": 0}
    )
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, os.path.dirname(path))
    served = provider.read_tensors(
        context.RequestContext(),
        experiment_id="",
        plugin_name="histograms",
        downsample=sys.maxsize,
    ).get(".", {})
    dashboard = {}
    for tag, data in served.items():
        # Each tensor is [k, 3]: (left edge, right edge, count) per bucket.
        dashboard[tag] = [(d.step, sum(row[2] for row in d.numpy.tolist())) for d in data]
    expected = {tag: [(step, sum(counts)) for step, counts in points]
                for tag, points in histograms.items()}
    if dashboard != expected:
        print(
            "error: the Histograms dashboard's data provider disagrees with EventAccumulator:\n"
            "  dashboard: %r\n  accumulator: %r" % (dashboard, expected),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
