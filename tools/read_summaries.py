#!/usr/bin/env python3
"""Reads a TensorFlow event file or a run directory with TensorBoard's own code.

Scalars, histograms and session logs. Used by tests/hooks/summary_saver_hook.cpp to check that
TensorBoard reads what SummarySaverHook writes (tools/read_events.py does the same for scalars
alone), and by tests/outputs/run_directory.cpp and tests/session/training_session.cpp to read a
run directory as `tensorboard --logdir` does: every event file in it, in TensorBoard's order,
through one EventAccumulator, where a SessionLog START in a later file drops the earlier files'
events at and after its step. Needs the `tensorboard` package; uses TensorBoard's pure-Python
record reader, never TensorFlow (whose import takes seconds).

Output, one item per line, fields separated by a tab:
    files        N                           event files read (1 for a file)
    records      N                           records in all of them
    session_log  STEP STATUS [PATH]          STATUS as SessionLog.SessionStatus's name; PATH is
                                             checkpoint_path, when set
    scalar       TAG STEP VALUE                  VALUE: "%.9g" of the float32
    histogram    TAG STEP MIN MAX NUM SUM SUM_SQUARES LIMITS COUNTS
                 numbers as Python's repr(); LIMITS and COUNTS comma-separated
    distribution TAG STEP N                      N: basis points of TensorBoard's compressed
                                                 histogram (the Distributions dashboard)

Scalars and histograms are those of EventAccumulator. The script fails (exit 1) unless the
data providers of the Scalars and Histograms dashboards (legacy `simple_value` and `histo`
values are migrated to tensors on the way in) return the same steps, values and bucket counts,
and on any record TensorBoard cannot read.
"""

import argparse
import os
import sys
import types


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="an event file, or a run directory")
    args = parser.parse_args()
    # TensorBoard's own switch (tensorboard/compat/__init__.py): with this module present it uses
    # its pure-Python record reader instead of importing TensorFlow, which takes seconds.
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")

    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.backend.event_processing import io_wrapper
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.compat.proto import event_pb2

    path = args.path
    if os.path.isdir(path):
        # TensorBoard's DirectoryWatcher reads a directory's event files in this order.
        files = sorted(
            p for p in io_wrapper.ListDirectoryAbsolute(path) if io_wrapper.IsTensorFlowEventsFile(p)
        )
        logdir = path
    else:
        files = [path]
        logdir = os.path.dirname(path)
    print("files\t%d" % len(files))
    records = [r for f in files for r in event_file_loader._make_tf_record_iterator(f)]
    print("records\t%d" % len(records))
    for record in records:
        event = event_pb2.Event.FromString(record)
        if event.HasField("session_log"):
            log = event.session_log
            status = event_pb2.SessionLog.SessionStatus.Name(log.status)
            suffix = "\t" + log.checkpoint_path if log.checkpoint_path else ""
            print("session_log\t%d\t%s%s" % (event.step, status, suffix))

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
    scalars = {}
    for tag in tags[event_accumulator.SCALARS]:
        for s in accumulator.Scalars(tag):
            scalars.setdefault(tag, []).append((s.step, s.value))
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

    # What the dashboards read: the plugins' tensors, migrated from `simple_value` and `histo`.
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        {".": path}, tensor_size_guidance={"scalars": 0, "histograms": 0}
    )
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    served_scalars = provider.read_scalars(
        context.RequestContext(),
        experiment_id="",
        plugin_name="scalars",
        downsample=sys.maxsize,
    ).get(".", {})
    # A tag whose points a SessionLog START purged stays in the dashboard's list with no points
    # (an empty chart) but leaves EventAccumulator's: compare the points, which the caller checks.
    dashboard_scalars = {
        tag: [(d.step, d.value) for d in data] for tag, data in served_scalars.items() if data
    }
    if dashboard_scalars != scalars:
        print(
            "error: the Scalars dashboard's data provider disagrees with EventAccumulator:\n"
            "  dashboard: %r\n  accumulator: %r" % (dashboard_scalars, scalars),
            file=sys.stderr,
        )
        return 1
    served = provider.read_tensors(
        context.RequestContext(),
        experiment_id="",
        plugin_name="histograms",
        downsample=sys.maxsize,
    ).get(".", {})
    dashboard = {}
    for tag, data in served.items():
        if not data:
            continue  # purged: see the scalars above
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
