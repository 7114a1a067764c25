#!/usr/bin/env python3
"""Reads a TensorFlow event file with TensorBoard's own code and prints what it finds.

Used by tests/summary/event_file.cpp to check that TensorBoard, not just our reader, accepts the
files runhooks::EventFileWriter writes. Needs the `tensorboard` package; TensorFlow is optional.

Output, one item per line, fields separated by a tab:
    reader        tensorflow|stub     which record reader TensorBoard used
    records       N                   records read by TensorBoard's strict record iterator
    file_version  brain.Event:2       from the file's first event
    scalar        TAG STEP WALL_TIME VALUE
WALL_TIME is Python's repr() of the double and VALUE is "%.9g" of the float32, so both parse
back to the exact numbers written.

The scalars are those of EventAccumulator.Scalars(). The script fails (exit 1) unless the
data provider behind TensorBoard's Scalars dashboard returns the same points, and it fails on
any record TensorBoard cannot read: a corrupt or truncated record is an error here, whereas
TensorBoard itself would log it and stop reading the file.
"""

import argparse
import os
import sys
import types


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("event_file")
    parser.add_argument(
        "--no-tensorflow",
        action="store_true",
        help="use TensorBoard's pure-Python record reader even if TensorFlow is installed",
    )
    args = parser.parse_args()

    if args.no_tensorflow:
        # TensorBoard's own switch (tensorboard/compat/__init__.py): if this module imports,
        # tensorboard.compat.tf is the stub. It must exist before anything touches compat.tf.
        sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # keep TensorFlow's banner off stderr

    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.compat import tf
    from tensorboard.compat.proto import event_pb2
    from tensorboard import context

    path = args.event_file
    print("reader\t%s" % ("stub" if tf.__version__ == "stub" else "tensorflow"))

    # Strict pass: the same record iterator TensorBoard's loader uses, but a DataLossError
    # (bad CRC, truncated record) propagates instead of silently ending the file.
    records = list(event_file_loader._make_tf_record_iterator(path))
    print("records\t%d" % len(records))
    first = event_pb2.Event.FromString(records[0]) if records else None
    if first is not None and first.HasField("file_version"):
        print("file_version\t%s" % first.file_version)

    accumulator = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0}  # 0: keep every point
    )
    accumulator.Reload()
    points = {}
    for tag in accumulator.Tags()[event_accumulator.SCALARS]:
        points[tag] = [(s.step, s.wall_time, s.value) for s in accumulator.Scalars(tag)]
        for step, wall_time, value in points[tag]:
            print("scalar\t%s\t%d\t%r\t%.9g" % (tag, step, wall_time, value))

    # What the Scalars dashboard of TensorBoard 2.x actually reads: legacy simple_value
    # summaries are migrated to scalar tensors by data_compat on the way in.
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        {".": path}, tensor_size_guidance={"scalars": 0}
    )
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, os.path.dirname(path))
    served = provider.read_scalars(
        context.RequestContext(),
        experiment_id="",
        plugin_name="scalars",
        downsample=sys.maxsize,
    ).get(".", {})
    dashboard = {
        tag: [(d.step, d.wall_time, d.value) for d in data] for tag, data in served.items()
    }
    if dashboard != points:
        print(
            "error: the Scalars dashboard's data provider disagrees with EventAccumulator:\n"
            "  dashboard: %r\n  accumulator: %r" % (dashboard, points),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
