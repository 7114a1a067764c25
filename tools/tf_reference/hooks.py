"""Scenarios for the hooks of issue 12, recorded from TensorFlow 2.21 (and Keras, for
EarlyStopping) by generate.py: LoggingTensorHook, SummarySaverHook (with TensorFlow's own
histograms), ProfilerHook, NanTensorHook, FinalOpsHook, and Keras' EarlyStopping.

generate.py calls generate_files(tf) and writes what it returns next to the other fixtures:
  tests/fixtures/tf_reference/hooks/<scenario>.json   one per scenario, for humans
  tests/fixtures/tf_reference/hook_fixtures.hpp      the same as constexpr C++

Conventions (also at the top of hook_fixtures.hpp):
  - Graph mode, a fresh graph per scenario, TensorFlow's mocked clock (MOCK_START_TIME, moved
    only by advance_clock actions), the hooks driven by a _HookedSession as TensorFlow's own
    tests do (begin() first; `end` calls hook.end(session)), a train op from
    training_util._increment_global_step(1), so tensors built on the global-step read tensor
    hold the value from before the run.
  - Logged tensors: foo = 42.0 (float32), x = read * 0.25 (float32), n = read (int64), c = 1e-5
    (float64); they are logged under their tensor names "foo:0", "x:0", ...
  - Summaries: my_summary = assign_add(var, 1.0) (so its value counts the runs that fetched
    it), my_summary2 = 2 * my_summary, and the histogram `h` of [var, -var, 0.5].
"""

import json
import math
import os
import shutil
import tempfile
import types
from unittest import mock

MOCK_START_TIME = 1484695987.209386
BSRH_TEST = "basic_session_run_hooks_test.py"


def act(kind, secs=0.0):
    return {"kind": kind, "secs": secs}


def runs(n, advance=None):
    out = []
    for _ in range(n):
        if advance is not None:
            out.append(act("advance_clock", advance))
        out.append(act("run"))
    return out


# --------------------------------------------------------------------------------- scenarios

LOGGING = [
    dict(name="j88a_logging_every_n_iter",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_every_n_steps",
         description="every_n_iter=10, foo and x, 32 runs (+0.25 s each), then end: logs at local "
                     "iterations 0, 10, 20, 30, with the seconds since the previous log",
         every_n_iter=10, tensors=["foo", "x"],
         actions=runs(32, 0.25) + [act("end")]),
    dict(name="j88b_logging_every_n_iter_at_end",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_every_n_steps_and_end",
         description="every_n_iter=10 and at_end: the end logs too, after 12 runs",
         every_n_iter=10, at_end=True, tensors=["n", "x"],
         actions=runs(12, 0.5) + [act("end")]),
    dict(name="j88c_logging_at_end_only",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_at_end_only",
         description="at_end only: no log during 3 runs, one at end without seconds",
         at_end=True, tensors=["foo"],
         actions=runs(3, 1.0) + [act("end")]),
    dict(name="j88d_logging_first_step",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_first_step",
         description="every_n_iter=1: the first log has no seconds",
         every_n_iter=1, tensors=["foo", "n", "c"],
         actions=runs(3, 0.125)),
    dict(name="j88e_logging_every_n_secs",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_every_n_secs",
         description="every_n_secs=1.0: run 1 logs, run 2 not, +1.0 s, run 3 logs; then irregular "
                     "advances",
         every_n_secs=1.0, tensors=["foo"],
         actions=(runs(2) + [act("advance_clock", 1.0)] + runs(1)
                  + [a for secs in [0.25, 0.5, 0.25, 0.125, 0.875, 2.5, 0.5]
                     for a in runs(1, secs)] + [act("end")])),
    dict(name="j88f_logging_formatter",
         source=BSRH_TEST + " LoggingTensorHookTest.test_print_formatter",
         description="formatter lambda items: 'qqq=%s' % items['foo:0']: 'qqq=42.0'",
         every_n_iter=10, tensors=["foo"], formatter=True,
         actions=runs(11)),
]

SUMMARY = [
    dict(name="j90a_summary_save_steps",
         source=BSRH_TEST + " SummarySaverHookTest.test_save_steps",
         description="save_steps=8, 30 runs: my_summary {1: 1.0, 9: 2.0, 17: 3.0, 25: 4.0}",
         save_steps=8, summaries=["my_summary"], actions=runs(30) + [act("end")]),
    dict(name="j90b_summary_multiple",
         source=BSRH_TEST + " SummarySaverHookTest.test_multiple_summaries",
         description="save_steps=8, two scalars and the histogram h, 10 runs",
         save_steps=8, summaries=["my_summary", "my_summary2", "h"],
         actions=runs(10) + [act("end")]),
    dict(name="j90c_summary_save_secs_every_step",
         source=BSRH_TEST + " SummarySaverHookTest.test_save_secs_saving_once_every_step",
         description="save_secs=0.5, +0.5 s after each of 4 runs: steps 1, 2, 3, 4",
         save_secs=0.5, summaries=["my_summary"],
         actions=[a for _ in range(4) for a in (act("run"), act("advance_clock", 0.5))]
         + [act("end")]),
    dict(name="j90d_summary_save_secs_every_three_steps",
         source=BSRH_TEST + " SummarySaverHookTest.test_save_secs_saving_once_every_three_steps",
         description="save_secs=9, +3.1 s after each of 8 runs: steps 1, 4, 7",
         save_secs=9.0, summaries=["my_summary", "h"],
         actions=[a for _ in range(8) for a in (act("run"), act("advance_clock", 3.1))]
         + [act("end")]),
]

PROFILER = [
    dict(name="j91a_profiler_save_steps",
         source=BSRH_TEST + " ProfilerHookTest.test_save_steps_saves_periodically",
         description="save_steps=2: timeline files after runs 1-7: 0, 1, 1, 2, 2, 3, 3",
         save_steps=2, actions=runs(7)),
    dict(name="j91b_profiler_save_secs",
         source=BSRH_TEST + " ProfilerHookTest.test_save_secs_saves_periodically",
         description="save_secs=2: T none, T+2.5 one, T+2.6 and T+4.4 none, T+4.5 the second",
         save_secs=2.0,
         actions=(runs(1) + [act("set_clock", 2.5)] + runs(1) + [act("set_clock", 2.6)]
                  + runs(1) + [act("set_clock", 4.4)] + runs(1)
                  + [act("set_clock", 4.5)] + runs(1))),
    dict(name="j91c_profiler_save_steps_one",
         source=BSRH_TEST + " ProfilerHookTest.test_run_metadata_saves",
         description="save_steps=1: nothing in the first run, then every run (step_2, step_3, ...)",
         save_steps=1, actions=runs(4)),
]

NAN = [
    dict(name="x10_nan_fail",
         source="extra (NanTensorHook, fail_on_nan_loss=True)",
         description="loss 1.0, 0.5, NaN: the third run raises NanLossDuringTrainingError",
         fail_on_nan_loss=True, losses=[1.0, 0.5, float("nan"), 0.25]),
    dict(name="x11_nan_stop",
         source="extra (NanTensorHook, fail_on_nan_loss=False)",
         description="loss 1.0, inf, NaN: inf is not NaN; the third run logs and requests a stop",
         fail_on_nan_loss=False, losses=[1.0, float("inf"), float("nan"), 0.25]),
]

FINAL_OPS = [
    dict(name="j92a_final_ops_values",
         source=BSRH_TEST + " FinalOpsHookTest.test_final_ops_is_scalar_tensor / _is_tensor",
         description="final ops [constant 4, the global-step read, constant [1, 6, 3, 5, 2, 4]] "
                     "after 3 runs",
         runs_before_end=3, out_of_range=False),
    dict(name="j92b_final_ops_out_of_range",
         source=BSRH_TEST + " FinalOpsHookTest.test_final_ops_triggers_out_of_range_error",
         description="final op reads an exhausted Dataset.range(1): OutOfRangeError, with the "
                     "'dependency back to some input source' warning",
         runs_before_end=0, out_of_range=True),
]

HISTOGRAMS = [
    dict(name="h01_histogram_mixed", values=[0.0, 1.0, 1.0, -2.5, 1e-13, 3.0], dtype="float32"),
    dict(name="h02_histogram_empty", values=[], dtype="float32"),
    dict(name="h03_histogram_wide", values=[1e-20, -1e-20, 1e-12, 1e19, -3e19, 7.25, 7.25, 7.25,
                                            123456.789, -0.001], dtype="float64"),
    dict(name="h04_histogram_limits", values=[1.1, 1.21, 0.9090909090909091, 2.0, 2.0000001],
         dtype="float64"),
    dict(name="h05_histogram_ramp", values=[i * 0.37 - 5.0 for i in range(40)], dtype="float32"),
]

EARLY_STOPPING = [
    dict(name="k01_early_stopping_docstring", patience=3,
         values=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),
    dict(name="k02_early_stopping_patience_0", patience=0, values=[5.0, 4.0, 3.0, 3.0, 1.0]),
    dict(name="k03_early_stopping_min_delta", patience=1, min_delta=0.25,
         values=[1.0, 0.5, 0.375, 0.0]),
    dict(name="k04_early_stopping_max", mode="max", patience=2,
         values=[0.5, 0.75, 0.875, 0.75, 0.875, 0.5, 0.25]),
    dict(name="k05_early_stopping_baseline", patience=2, baseline=0.5,
         values=[0.9, 0.95, 0.95, 0.95]),
    dict(name="k06_early_stopping_baseline_improving", patience=2, baseline=0.5,
         values=[0.9, 0.8, 0.7, 0.6, 0.55]),
    dict(name="k07_early_stopping_start_from_epoch", patience=0, start_from_epoch=2,
         values=[1.0, 2.0, 3.0, 4.0, 5.0]),
    dict(name="k08_early_stopping_plateau", patience=3, min_delta=0.0625,
         values=[1.0, 0.75, 0.7, 0.69, 0.5, 0.46, 0.45, 0.44, 0.43, 0.1]),
    dict(name="k09_early_stopping_max_baseline", mode="max", patience=1, baseline=0.75,
         values=[0.5, 0.625, 0.8, 0.7, 0.9, 0.85, 0.85]),
]


# --------------------------------------------------------------------------------- recording

class FakeTime:
    """Stands in for `time` inside basic_session_run_hooks (TensorFlow's mocked time.time)."""

    def __init__(self):
        self.now = MOCK_START_TIME

    def module(self):
        return types.SimpleNamespace(time=lambda: self.now, sleep=lambda secs: None)


class LogCapture:
    def __init__(self, py_logging, records):
        self.py_logging = py_logging
        self.records = records
        self.action = 0

    def handler(self):
        capture = self
        logging = self.py_logging

        class Handler(logging.Handler):
            def emit(self, record):
                if os.path.basename(record.pathname) != "basic_session_run_hooks.py":
                    return
                level = {logging.INFO: "info", logging.WARNING: "warning",
                         logging.ERROR: "error"}.get(record.levelno, str(record.levelno))
                capture.records.append({"action": capture.action, "level": level,
                                        "message": record.getMessage()})

        return Handler(level=logging.DEBUG)


class Env:
    """Graph-mode TensorFlow with the mocked clock and the log capture of one scenario."""

    def __init__(self, tf):
        import logging as py_logging
        from tensorflow.python.training import basic_session_run_hooks as bsrh
        from tensorflow.python.summary.writer import writer_cache
        self.tf, self.bsrh, self.writer_cache = tf, bsrh, writer_cache
        self.py_logging = py_logging
        self.time = FakeTime()
        self.logs = []
        self.capture = LogCapture(py_logging, self.logs)

    def __enter__(self):
        tf = self.tf
        self.graph_ctx = tf.Graph().as_default()
        self.graph_ctx.__enter__()
        self.patch = mock.patch.object(self.bsrh, "time", self.time.module())
        self.patch.__enter__()
        logger = tf.get_logger()
        self.saved = (logger.level, logger.propagate, list(logger.handlers))
        logger.setLevel(self.py_logging.DEBUG)
        logger.propagate = False
        logger.handlers = [self.capture.handler()]
        return self

    def __exit__(self, *exc):
        logger = self.tf.get_logger()
        logger.setLevel(self.saved[0])
        logger.propagate = self.saved[1]
        logger.handlers = self.saved[2]
        self.patch.__exit__(*exc)
        self.graph_ctx.__exit__(*exc)
        self.writer_cache.FileWriterCache.clear()
        return False


def hooked_session(tf, sess, hooks):
    from tensorflow.python.training import monitored_session
    return monitored_session._HookedSession(sess, hooks)  # pylint: disable=protected-access


def run_logging(tf, spec):
    from tensorflow.python.training import training_util
    with Env(tf) as env:
        gs = tf.compat.v1.train.get_or_create_global_step()
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        tensors = {
            "foo": tf.constant(42.0, name="foo"),
            "x": tf.multiply(tf.cast(read, tf.float32), 0.25, name="x"),
            "n": tf.identity(read, name="n"),
            "c": tf.constant(1e-5, dtype=tf.float64, name="c"),
        }
        del gs
        names = [tensors[t].name for t in spec["tensors"]]
        train_op = training_util._increment_global_step(1)  # pylint: disable=protected-access
        formatter = (lambda items: "qqq=%s" % items[names[0]]) if spec.get("formatter") else None
        hook = env.bsrh.LoggingTensorHook(
            tensors=names, every_n_iter=spec.get("every_n_iter"),
            every_n_secs=spec.get("every_n_secs"), at_end=spec.get("at_end", False),
            formatter=formatter)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            hook.begin()
            mon = hooked_session(tf, sess, [hook])
            for index, a in enumerate(spec["actions"]):
                env.capture.action = index
                if a["kind"] == "advance_clock":
                    env.time.now += a["secs"]
                elif a["kind"] == "run":
                    mon.run(train_op)
                elif a["kind"] == "end":
                    hook.end(sess)
        return dict(logs=env.logs)


def histogram_record(histo):
    return {"min": histo.min, "max": histo.max, "num": histo.num, "sum": histo.sum,
            "sum_squares": histo.sum_squares, "bucket_limit": list(histo.bucket_limit),
            "bucket": list(histo.bucket)}


class FakeSummaryWriter:
    def __init__(self, record):
        self.record = record
        self.action = 0

    def add_summary(self, summary, global_step=None):
        from tensorflow.core.framework import summary_pb2
        if isinstance(summary, bytes):
            summary = summary_pb2.Summary.FromString(summary)
        for value in summary.value:
            if value.HasField("histo"):
                self.record["histograms"].append(
                    dict(histogram_record(value.histo), action=self.action,
                         step=int(global_step), tag=value.tag))
            else:
                self.record["summaries"].append(
                    {"action": self.action, "step": int(global_step), "tag": value.tag,
                     "value": float(value.simple_value)})

    def add_session_log(self, session_log, global_step=None):
        from tensorflow.core.util import event_pb2
        self.record["session_logs"].append(
            {"action": self.action, "step": int(global_step),
             "status": event_pb2.SessionLog.SessionStatus.Name(session_log.status)})

    def flush(self):
        self.record["flushes"].append(self.action)


def run_summary(tf, spec):
    from tensorflow.python.training import training_util
    with Env(tf) as env:
        tf.compat.v1.train.get_or_create_global_step()
        var = tf.Variable(0.0)
        tensor = tf.compat.v1.assign_add(var, 1.0)
        ops = {
            "my_summary": lambda: tf.compat.v1.summary.scalar("my_summary", tensor),
            "my_summary2": lambda: tf.compat.v1.summary.scalar("my_summary2", tensor * 2),
            "h": lambda: tf.compat.v1.summary.histogram("h", tf.stack([tensor, -tensor, 0.5])),
        }
        summary_op = [ops[s]() for s in spec["summaries"]]
        train_op = training_util._increment_global_step(1)  # pylint: disable=protected-access
        record = {"summaries": [], "histograms": [], "session_logs": [], "flushes": []}
        writer = FakeSummaryWriter(record)
        hook = env.bsrh.SummarySaverHook(
            save_steps=spec.get("save_steps"), save_secs=spec.get("save_secs"),
            summary_writer=writer, summary_op=summary_op)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            hook.begin()
            mon = hooked_session(tf, sess, [hook])
            for index, a in enumerate(spec["actions"]):
                env.capture.action = writer.action = index
                if a["kind"] == "advance_clock":
                    env.time.now += a["secs"]
                elif a["kind"] == "run":
                    mon.run(train_op)
                elif a["kind"] == "end":
                    hook.end(sess)
        return record


def run_profiler(tf, spec):
    from tensorflow.python.training import monitored_session
    from tensorflow.python.training import training_util
    out = tempfile.mkdtemp(prefix="tf_reference_profiler_")
    try:
        with Env(tf) as env:
            tf.compat.v1.train.get_or_create_global_step()
            train_op = training_util._increment_global_step(1)  # pylint: disable=protected-access
            hook = env.bsrh.ProfilerHook(save_steps=spec.get("save_steps"),
                                         save_secs=spec.get("save_secs"), output_dir=out)
            files = []
            with monitored_session.SingularMonitoredSession(hooks=[hook]) as sess:
                for index, a in enumerate(spec["actions"]):
                    env.capture.action = index
                    if a["kind"] == "advance_clock":
                        env.time.now += a["secs"]
                    elif a["kind"] == "set_clock":
                        env.time.now = MOCK_START_TIME + a["secs"]
                    elif a["kind"] == "run":
                        sess.run(train_op)
                        names = sorted(n for n in os.listdir(out) if n.startswith("timeline-"))
                        files.append({"action": index, "count": len(names),
                                      "names": ",".join(names)})
        logs = [dict(log, message=log["message"].replace(out + os.sep, "")) for log in env.logs]
        return dict(files=files, logs=logs)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_nan(tf, spec):
    from tensorflow.python.training import training_util
    with Env(tf) as env:
        gs = tf.compat.v1.train.get_or_create_global_step()
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        del gs
        losses = tf.constant(spec["losses"], dtype=tf.float32)
        loss = tf.gather(losses, read)  # the loss of run k is losses[k - 1]
        train_op = training_util._increment_global_step(1)  # pylint: disable=protected-access
        hook = env.bsrh.NanTensorHook(loss, fail_on_nan_loss=spec["fail_on_nan_loss"])
        results = []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            hook.begin()
            mon = hooked_session(tf, sess, [hook])
            for index in range(len(spec["losses"])):
                env.capture.action = index
                error = ""
                try:
                    mon.run(train_op)
                except Exception as e:  # pylint: disable=broad-except
                    error = "%s: %s" % (type(e).__name__, e)
                results.append({"action": index, "should_stop": bool(mon.should_stop()),
                                "error": error})
                if error or mon.should_stop():
                    break
        return dict(runs=results, logs=env.logs)


def run_final_ops(tf, spec):
    from tensorflow.python.training import training_util
    with Env(tf) as env:
        tf.compat.v1.train.get_or_create_global_step()
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        train_op = training_util._increment_global_step(1)  # pylint: disable=protected-access
        if spec["out_of_range"]:
            dataset = tf.data.Dataset.range(1)
            iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
            final_ops = iterator.get_next()
        else:
            final_ops = [tf.constant(4), read, tf.constant([1, 6, 3, 5, 2, 4])]
        hook = env.bsrh.FinalOpsHook(final_ops)
        result = {"values": [], "error": ""}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            hook.begin()
            mon = hooked_session(tf, sess, [hook])
            for _ in range(spec["runs_before_end"]):
                mon.run(train_op)
            if spec["out_of_range"]:
                sess.run(final_ops)  # the one element
            env.capture.action = 1
            try:
                hook.end(sess)
            except Exception as e:  # pylint: disable=broad-except
                result["error"] = type(e).__name__
            if hook.final_ops_values is not None:
                v = hook.final_ops_values
                result["values"] = [int(v[0]), int(v[1])] + [int(x) for x in v[2]]
        result["logs"] = [dict(log, message=log["message"][:120]) for log in env.logs]
        return result


def run_histogram(tf, spec):
    from tensorflow.core.framework import summary_pb2
    with tf.Graph().as_default():
        dtype = {"float32": tf.float32, "float64": tf.float64}[spec["dtype"]]
        values = tf.constant(spec["values"], dtype=dtype, shape=[len(spec["values"])])
        op = tf.compat.v1.summary.histogram("h", values)
        with tf.compat.v1.Session() as sess:
            serialized = sess.run(op)
    summary = summary_pb2.Summary.FromString(serialized)
    # The values as TensorFlow held them (float32 rounding included), as doubles.
    import numpy as np
    held = [float(x) for x in np.asarray(spec["values"], dtype=spec["dtype"])]
    return dict(histogram_record(summary.value[0].histo), held=held,
                summary_hex=serialized.hex())


KERAS_EARLY_STOPPING = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras

class Model:
    stop_training = False

out = []
for spec in json.load(sys.stdin):
    kwargs = {k: spec[k] for k in ("patience", "min_delta", "mode", "baseline",
                                   "start_from_epoch") if k in spec}
    callback = keras.callbacks.EarlyStopping(monitor="val_loss", **kwargs)
    model = Model()
    callback.set_model(model)
    callback.on_train_begin()
    stopped = None
    for epoch, value in enumerate(spec["values"]):
        callback.on_epoch_end(epoch, {"val_loss": value})
        if model.stop_training:
            stopped = epoch
            break
    out.append({"stopped_epoch": stopped, "best": float(callback.best),
                "best_epoch": callback.best_epoch, "wait": callback.wait})
json.dump({"keras_version": keras.__version__, "results": out}, sys.stdout)
"""


def run_early_stopping(specs):
    """Keras' EarlyStopping on each spec's values, in a fresh Python: Keras runs eagerly, and
    generate.py has switched TensorFlow to graph mode."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", KERAS_EARLY_STOPPING], input=json.dumps(specs),
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    return result["keras_version"], [dict(s, **r) for s, r in zip(specs, result["results"])]


# --------------------------------------------------------------------------------- C++ emission

def cpp_str(s):
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            raise ValueError("non-ASCII character in %r" % s)
    return '"' + "".join(out) + '"'


def cpp_f64(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def opt_i64(x):
    return "std::nullopt" if x is None else str(int(x))


def opt_f64(x):
    return "std::nullopt" if x is None else cpp_f64(x)


def f64_array(name, xs, lines):
    lines.append("inline constexpr double %s[] = {%s};" % (name, ", ".join(cpp_f64(x) for x in xs) or "0.0"))
    return "std::span<const double>(%s, %d)" % (name, len(xs))


def action_list(name, actions, lines):
    kinds = {"run": "ActionKind::run", "advance_clock": "ActionKind::advance_clock",
             "set_clock": "ActionKind::set_clock", "end": "ActionKind::end"}
    lines.append("inline constexpr Action %s[] = {" % name)
    for a in actions:
        lines.append("    {%s, %s}," % (kinds[a["kind"]], cpp_f64(a["secs"])))
    lines.append("};")


def log_list(name, logs, lines):
    lines.append("inline constexpr LogLine %s[] = {" % name)
    for log in logs:
        lines.append("    {%d, LogLevel::%s, %s}," % (log["action"], log["level"], cpp_str(log["message"])))
    lines.append("    {},  // not part of the span: an array cannot be empty\n};")
    return "std::span<const LogLine>(%s, %d)" % (name, len(logs))


HEADER = """\
// GENERATED FILE - DO NOT EDIT BY HAND.
// Generated by tools/tf_reference/generate.py (tools/tf_reference/hooks.py) from TensorFlow
// {version} and Keras {keras}: LoggingTensorHook, SummarySaverHook, ProfilerHook, NanTensorHook,
// FinalOpsHook, tf.compat.v1.summary.histogram and keras.callbacks.EarlyStopping.
// Regenerate: python3 tools/tf_reference/generate.py   (see tools/tf_reference/README.md)
//
// Conventions:
// - Hooks run in a _HookedSession as TensorFlow's tests drive them: begin() first, `end` calls
//   hook.end(session); ProfilerHook runs in a SingularMonitoredSession. The train op adds 1 to
//   the global step after the global-step read, so a tensor of the read holds the step before
//   the run. The clock starts at start_time and moves only on advance_clock (by secs) and
//   set_clock (to start_time + secs, as TensorFlow's tests set their mocked time).
// - Logged tensors (LoggingTensorHook, under their names "foo:0", ...): foo = 42.0 (float32),
//   x = read * 0.25 (float32), n = read (int64), c = 1e-5 (float64).
// - Summaries: my_summary = assign_add(var, 1.0) (its value counts the runs that fetched it),
//   my_summary2 = 2 * that, histogram h of [var, -var, 0.5] after the add.
// - Every output record has `action`: the index of the action during which it happened.
// - Histograms: `held` are the values as TensorFlow held them (after float32 rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

namespace runhooks_test::tf_reference::hooks {{

inline constexpr std::string_view tensorflow_version = "{version}";
inline constexpr std::string_view keras_version = "{keras}";
inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double inf = std::numeric_limits<double>::infinity();
inline constexpr double start_time = {start};

enum class ActionKind {{ run, advance_clock, set_clock, end }};  // set_clock: start_time + secs
enum class LogLevel {{ info, warning, error }};

struct Action {{
  ActionKind kind{{}};
  double secs = 0.0;
}};
struct LogLine {{
  std::size_t action = 0;
  LogLevel level{{}};
  std::string_view message{{}};
}};
struct LoggingScenario {{
  std::string_view name{{}}, source{{}}, description{{}};
  std::optional<std::int64_t> every_n_iter{{}};
  std::optional<double> every_n_secs{{}};
  bool at_end = false;
  bool formatter = false;  // formatter=lambda items: 'qqq=%s' % items[<first tensor>]
  std::string_view tensors{{}};  // comma-separated: foo, x, n, c
  std::span<const Action> actions{{}};
  std::span<const LogLine> logs{{}};
}};
struct SummaryValue {{
  std::size_t action = 0;
  std::int64_t step = 0;
  std::string_view tag{{}};
  double value = 0.0;  // the float32 simple_value
}};
struct HistogramValue {{
  std::size_t action = 0;
  std::int64_t step = 0;
  std::string_view tag{{}};
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::span<const double> bucket_limit{{}}, bucket{{}};
}};
struct SessionLogRecord {{
  std::size_t action = 0;
  std::int64_t step = 0;
  std::string_view status{{}};
}};
struct SummaryScenario {{
  std::string_view name{{}}, source{{}}, description{{}};
  std::optional<std::int64_t> save_steps{{}};
  std::optional<double> save_secs{{}};
  std::string_view summaries{{}};  // comma-separated: my_summary, my_summary2, h
  std::span<const Action> actions{{}};
  std::span<const SummaryValue> values{{}};
  std::span<const HistogramValue> histograms{{}};
  std::span<const SessionLogRecord> session_logs{{}};
  std::span<const std::size_t> flushes{{}};
}};
struct TimelineCount {{
  std::size_t action = 0;
  int count = 0;
  std::string_view names{{}};  // comma-separated file names
}};
struct ProfilerScenario {{
  std::string_view name{{}}, source{{}}, description{{}};
  std::optional<std::int64_t> save_steps{{}};
  std::optional<double> save_secs{{}};
  std::span<const Action> actions{{}};
  std::span<const TimelineCount> files{{}};
  std::span<const LogLine> logs{{}};
}};
struct NanRun {{
  std::size_t action = 0;
  bool should_stop = false;
  std::string_view error{{}};
}};
struct NanScenario {{
  std::string_view name{{}}, source{{}}, description{{}};
  bool fail_on_nan_loss = true;
  std::span<const double> losses{{}};
  std::span<const NanRun> runs{{}};
  std::span<const LogLine> logs{{}};
}};
struct FinalOpsScenario {{
  std::string_view name{{}}, source{{}}, description{{}};
  int runs_before_end = 0;
  bool out_of_range = false;
  std::span<const double> values{{}};  // 4, the global-step read, then [1, 6, 3, 5, 2, 4]
  std::string_view error{{}};
  std::span<const LogLine> logs{{}};  // messages cut at 120 characters
}};
struct HistogramFixture {{
  std::string_view name{{}}, dtype{{}};
  std::span<const double> held{{}};
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::span<const double> bucket_limit{{}}, bucket{{}};
  std::string_view summary_hex{{}};  // the serialized Summary{{value {{tag: "h" histo}}}}
}};
struct EarlyStoppingFixture {{
  std::string_view name{{}}, mode{{}};
  int patience = 0;
  double min_delta = 0.0;
  std::optional<double> baseline{{}};
  int start_from_epoch = 0;
  std::span<const double> values{{}};
  std::optional<std::int64_t> stopped_epoch{{}};
  double best = 0.0;
  std::int64_t best_epoch = 0;
  std::int64_t wait = 0;
}};
"""


def emit_header(version, keras_version, logging, summary, profiler, nan, final_ops, histos, early):
    L = [HEADER.format(version=version, keras=keras_version, start=repr(MOCK_START_TIME))]

    def ns(name, body):
        L.append("namespace detail::%s {" % name)
        out = body()
        L.append("}  // namespace detail::%s" % name)
        return out

    items = []
    for s in logging:
        def body(s=s):
            action_list("actions", s["actions"], L)
            logs = log_list("logs", s["logs"], L)
            return logs
        logs = ns(s["name"], body)
        d = "detail::%s::" % s["name"]
        items.append("{%s, %s, %s, %s, %s, %s, %s, %s, std::span<const Action>(%sactions), %s}" % (
            cpp_str(s["name"]), cpp_str(s["source"]), cpp_str(s["description"]),
            opt_i64(s.get("every_n_iter")), opt_f64(s.get("every_n_secs")),
            "true" if s.get("at_end") else "false", "true" if s.get("formatter") else "false",
            cpp_str(",".join(s["tensors"])), d, logs.replace("std::span<const LogLine>(logs", "std::span<const LogLine>(" + d + "logs")))
    L.append("inline constexpr LoggingScenario logging_scenarios[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in summary:
        d = "detail::%s::" % s["name"]

        def body(s=s):
            action_list("actions", s["actions"], L)
            L.append("inline constexpr SummaryValue values[] = {")
            for v in s["summaries_out"]:
                L.append("    {%d, %d, %s, %s}," % (v["action"], v["step"], cpp_str(v["tag"]), cpp_f64(v["value"])))
            L.append("    {},\n};")
            spans = []
            for i, h in enumerate(s["histograms"]):
                f64_array("limit_%d" % i, h["bucket_limit"], L)
                f64_array("bucket_%d" % i, h["bucket"], L)
            L.append("inline constexpr HistogramValue histograms[] = {")
            for i, h in enumerate(s["histograms"]):
                L.append("    {%d, %d, %s, %s, %s, %s, %s, %s, std::span<const double>(limit_%d, %d), "
                         "std::span<const double>(bucket_%d, %d)}," % (
                             h["action"], h["step"], cpp_str(h["tag"]), cpp_f64(h["min"]), cpp_f64(h["max"]),
                             cpp_f64(h["num"]), cpp_f64(h["sum"]), cpp_f64(h["sum_squares"]),
                             i, len(h["bucket_limit"]), i, len(h["bucket"])))
            L.append("    {},\n};")
            L.append("inline constexpr SessionLogRecord session_logs[] = {")
            for v in s["session_logs"]:
                L.append("    {%d, %d, %s}," % (v["action"], v["step"], cpp_str(v["status"])))
            L.append("    {},\n};")
            L.append("inline constexpr std::size_t flushes[] = {%s};" % (", ".join(str(x) for x in s["flushes"]) or "0"))
            return spans
        ns(s["name"], body)
        items.append(
            "{%s, %s, %s, %s, %s, %s, std::span<const Action>(%sactions), "
            "std::span<const SummaryValue>(%svalues, %d), std::span<const HistogramValue>(%shistograms, %d), "
            "std::span<const SessionLogRecord>(%ssession_logs, %d), std::span<const std::size_t>(%sflushes, %d)}" % (
                cpp_str(s["name"]), cpp_str(s["source"]), cpp_str(s["description"]),
                opt_i64(s.get("save_steps")), opt_f64(s.get("save_secs")), cpp_str(",".join(s["summaries"])),
                d, d, len(s["summaries_out"]), d, len(s["histograms"]), d, len(s["session_logs"]),
                d, len(s["flushes"])))
    L.append("inline constexpr SummaryScenario summary_scenarios[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in profiler:
        d = "detail::%s::" % s["name"]

        def body(s=s):
            action_list("actions", s["actions"], L)
            L.append("inline constexpr TimelineCount files[] = {")
            for f in s["files"]:
                L.append("    {%d, %d, %s}," % (f["action"], f["count"], cpp_str(f["names"])))
            L.append("};")
            return log_list("logs", s["logs"], L)
        logs = ns(s["name"], body)
        items.append("{%s, %s, %s, %s, %s, std::span<const Action>(%sactions), std::span<const TimelineCount>(%sfiles), %s}" % (
            cpp_str(s["name"]), cpp_str(s["source"]), cpp_str(s["description"]),
            opt_i64(s.get("save_steps")), opt_f64(s.get("save_secs")), d, d,
            logs.replace("std::span<const LogLine>(logs", "std::span<const LogLine>(" + d + "logs")))
    L.append("inline constexpr ProfilerScenario profiler_scenarios[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in nan:
        d = "detail::%s::" % s["name"]

        def body(s=s):
            losses = f64_array("losses", s["losses"], L)
            L.append("inline constexpr NanRun runs[] = {")
            for r in s["runs"]:
                L.append("    {%d, %s, %s}," % (r["action"], "true" if r["should_stop"] else "false", cpp_str(r["error"])))
            L.append("};")
            return losses, log_list("logs", s["logs"], L)
        losses, logs = ns(s["name"], body)
        items.append("{%s, %s, %s, %s, %s, std::span<const NanRun>(%sruns), %s}" % (
            cpp_str(s["name"]), cpp_str(s["source"]), cpp_str(s["description"]),
            "true" if s["fail_on_nan_loss"] else "false",
            losses.replace("std::span<const double>(losses", "std::span<const double>(" + d + "losses"), d,
            logs.replace("std::span<const LogLine>(logs", "std::span<const LogLine>(" + d + "logs")))
    L.append("inline constexpr NanScenario nan_scenarios[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in final_ops:
        d = "detail::%s::" % s["name"]

        def body(s=s):
            return f64_array("values", s["values"], L), log_list("logs", s["logs"], L)
        values, logs = ns(s["name"], body)
        items.append("{%s, %s, %s, %d, %s, %s, %s, %s}" % (
            cpp_str(s["name"]), cpp_str(s["source"]), cpp_str(s["description"]), s["runs_before_end"],
            "true" if s["out_of_range"] else "false",
            values.replace("std::span<const double>(values", "std::span<const double>(" + d + "values"),
            cpp_str(s["error"]),
            logs.replace("std::span<const LogLine>(logs", "std::span<const LogLine>(" + d + "logs")))
    L.append("inline constexpr FinalOpsScenario final_ops_scenarios[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in histos:
        d = "detail::%s::" % s["name"]

        def body(s=s):
            return (f64_array("held", s["held"], L), f64_array("bucket_limit", s["bucket_limit"], L),
                    f64_array("bucket", s["bucket"], L))
        held, limits, buckets = ns(s["name"], body)
        fix = lambda span, n: span.replace("std::span<const double>(" + n, "std::span<const double>(" + d + n)
        items.append("{%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s}" % (
            cpp_str(s["name"]), cpp_str(s["dtype"]), fix(held, "held"), cpp_f64(s["min"]), cpp_f64(s["max"]),
            cpp_f64(s["num"]), cpp_f64(s["sum"]), cpp_f64(s["sum_squares"]), fix(limits, "bucket_limit"),
            fix(buckets, "bucket"), cpp_str(s["summary_hex"])))
    L.append("inline constexpr HistogramFixture histogram_fixtures[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    items = []
    for s in early:
        d = "detail::%s::" % s["name"]
        values = ns(s["name"], lambda s=s: f64_array("values", s["values"], L))
        items.append("{%s, %s, %d, %s, %s, %d, %s, %s, %s, %d, %d}" % (
            cpp_str(s["name"]), cpp_str(s.get("mode", "min")), s["patience"], cpp_f64(s.get("min_delta", 0.0)),
            opt_f64(s.get("baseline")), s.get("start_from_epoch", 0),
            values.replace("std::span<const double>(values", "std::span<const double>(" + d + "values"),
            opt_i64(s["stopped_epoch"]), cpp_f64(s["best"]), s["best_epoch"], s["wait"]))
    L.append("inline constexpr EarlyStoppingFixture early_stopping_fixtures[] = {\n    %s,\n};\n" % ",\n    ".join(items))

    L.append("}  // namespace runhooks_test::tf_reference::hooks")
    return "\n".join(L) + "\n"


def dump(obj):
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def generate_files(tf):
    """{relative file name: text}: the JSON files under hooks/ and hook_fixtures.hpp."""
    keras_version, early = run_early_stopping(EARLY_STOPPING)
    tf.compat.v1.disable_eager_execution()
    files = {}
    logging = [dict(s, **run_logging(tf, s)) for s in LOGGING]
    summary = []
    for s in SUMMARY:
        r = run_summary(tf, s)
        summary.append(dict(s, summaries_out=r["summaries"], histograms=r["histograms"],
                            session_logs=r["session_logs"], flushes=r["flushes"]))
    profiler = [dict(s, **run_profiler(tf, s)) for s in PROFILER]
    nan = [dict(s, **run_nan(tf, s)) for s in NAN]
    final_ops = [dict(s, **run_final_ops(tf, s)) for s in FINAL_OPS]
    histos = [dict(s, **run_histogram(tf, s)) for s in HISTOGRAMS]
    for group in (logging, summary, profiler, nan, final_ops, histos, early):
        for s in group:
            files[os.path.join("hooks", s["name"] + ".json")] = dump(
                dict(s, tensorflow_version=tf.__version__))
    files["hook_fixtures.hpp"] = emit_header(tf.__version__, keras_version, logging, summary,
                                             profiler, nan, final_ops, histos, early)
    return files
