#!/usr/bin/env python3
"""Record TensorFlow's own hook behaviour as fixtures for the C++ tests.

Runs every scenario below through TensorFlow 2.21.0 (graph mode, a fresh
tf.Graph per scenario, a mocked clock and a mocked time.sleep), records what
happened (hook calls, run results, stop points, summaries, log lines, sleeps,
session creations) and writes:

  tests/fixtures/tf_reference/<scenario>.json   one file per scenario, for humans
  tests/fixtures/tf_reference/fixtures.hpp      the same data as constexpr C++

Usage (from the repository root):
  pip install -r tools/tf_reference/requirements.txt
  python3 tools/tf_reference/generate.py            # writes the fixtures
  python3 tools/tf_reference/generate.py --check    # fails if they would change

The output is deterministic: no wall-clock value, temporary path or random
value reaches the fixtures, and JSON keys are sorted.
"""

import argparse
import json
import logging as py_logging
import os
import shutil
import sys
import tempfile
import types
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import errors  # noqa: E402
from tensorflow.python.ops import state_ops  # noqa: E402
from tensorflow.python.platform import tf_logging  # noqa: E402
from tensorflow.python.summary.writer import writer_cache  # noqa: E402
from tensorflow.python.training import basic_session_run_hooks as bsrh  # noqa: E402
from tensorflow.python.training import monitored_session  # noqa: E402
from tensorflow.python.training import session_run_hook  # noqa: E402
from tensorflow.python.training import training_util  # noqa: E402

import hooks as hook_scenarios  # noqa: E402  (tools/tf_reference/hooks.py: issue 12's hooks)

EXPECTED_TF_VERSION = "2.21.0"
# TensorFlow's own tests use this start time for the mocked clock.
MOCK_START_TIME = 1484695987.209386

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "tf_reference")

BSRH_TEST = "basic_session_run_hooks_test.py"
MS_TEST = "monitored_session_test.py"


# --------------------------------------------------------------------------
# Scenario definitions (inputs only; outputs are recorded by running TF).
# --------------------------------------------------------------------------

def hook(name, kind, **params):
    spec = {"name": name, "kind": kind}
    spec.update(params)
    return spec


def act(kind, value=0, secs=0.0):
    return {"kind": kind, "value": value, "secs": secs}


def runs(n, increment=1, advance=None):
    """n hooked runs of the train op adding `increment`, each preceded by a
    clock advance of `advance` seconds when given."""
    out = []
    for _ in range(n):
        if advance is not None:
            out.append(act("advance_clock", secs=advance))
        out.append(act("run", increment))
    return out


CONSTRUCTION_ERRORS = [
    dict(name="a01_timer_both_secs_and_steps",
         source=BSRH_TEST + " SecondOrStepTimerTest.test_raise_in_both_secs_and_steps",
         type="second_or_step_timer", phase="constructor",
         every_secs=2.0, every_steps=10),
    dict(name="a02_timer_neither_secs_nor_steps",
         source=BSRH_TEST + " SecondOrStepTimerTest.test_raise_in_none_secs_and_steps",
         type="second_or_step_timer", phase="constructor"),
    dict(name="b06_stop_at_step_both_num_steps_and_last_step",
         source=BSRH_TEST + " StopAtStepTest.test_raise_in_both_last_step_and_num_steps",
         type="stop_at_step_hook", phase="constructor", num_steps=10, last_step=20),
    dict(name="b06_stop_at_step_neither_num_steps_nor_last_step",
         source="extra", type="stop_at_step_hook", phase="constructor"),
    dict(name="c00_step_counter_neither_steps_nor_secs",
         source="extra", type="step_counter_hook", phase="constructor",
         every_n_steps=None, every_n_secs=None),
    dict(name="c00_step_counter_default_steps_and_secs",
         source="extra (every_n_steps keeps its default 100)",
         type="step_counter_hook", phase="constructor",
         every_n_steps=100, every_n_secs=0.1),
    dict(name="b00_stop_at_step_begin_without_global_step",
         source="extra", type="stop_at_step_hook", phase="begin", last_step=10),
    dict(name="c00_step_counter_begin_without_global_step",
         source="extra", type="step_counter_hook", phase="begin", every_n_steps=10),
    dict(name="d00_waiter_begin_without_global_step",
         source="extra", type="global_step_waiter_hook", phase="begin",
         wait_until_step=10),
]


def t_should(step):
    return {"kind": "should_trigger_for_step", "step": step}


def t_update(step):
    return {"kind": "update_last_triggered_step", "step": step}


def t_advance(secs):
    return {"kind": "advance_clock", "secs": secs}


def t_last():
    return {"kind": "last_triggered_step"}


TIMER_SCENARIOS = [
    dict(name="a03_timer_every_secs",
         source=BSRH_TEST + " SecondOrStepTimerTest.test_every_secs",
         description="every_secs=1.0: the same step never re-triggers; a new step triggers once 1.0 s passed (>=)",
         every_secs=1.0,
         ops=[t_should(1), t_update(1), t_should(1), t_should(2), t_advance(1.0),
              t_should(1), t_should(2)]),
    dict(name="a04_timer_every_steps",
         source=BSRH_TEST + " SecondOrStepTimerTest.test_every_steps",
         description="every_steps=3: after update(1), steps 1..3 do not trigger, 4 does (>=); plus steps going backwards",
         every_steps=3,
         ops=[t_last(), t_should(1), t_update(1), t_last(), t_should(1), t_should(2),
              t_should(3), t_should(4), t_should(0), t_should(-5), t_update(4),
              t_last()]),
    dict(name="a05_timer_update_last_triggered_step",
         source=BSRH_TEST + " SecondOrStepTimerTest.test_update_last_triggered_step"
                " (real clock upstream; mocked here)",
         description="every_steps=1: update returns (None, None) first, then (elapsed secs, elapsed steps)",
         every_steps=1,
         ops=[t_update(1), t_advance(0.5), t_update(5), t_advance(0.25), t_update(7),
              t_update(7), t_advance(0.125), t_update(3)]),
    dict(name="a06_timer_every_steps_zero",
         source="extra",
         description="every_steps=0 is accepted: any step other than the last triggered one, and not below it, triggers",
         every_steps=0,
         ops=[t_should(1), t_update(1), t_should(1), t_should(2), t_should(0),
              t_update(2), t_should(2), t_should(3)]),
    dict(name="a07_timer_every_secs_edges",
         source="extra",
         description="every_secs=0.5: exact >= boundary, same-step rule beats time, time rule ignores step order",
         every_secs=0.5,
         ops=[t_should(1), t_update(1), t_advance(0.25), t_should(2), t_advance(0.25),
              t_should(2), t_should(1), t_should(0), t_update(3), t_should(4),
              t_advance(0.75), t_should(-1), t_update(-1), t_last()]),
]


SESSION_SCENARIOS = [
    # ---------------- B: StopAtStepHook ----------------
    dict(name="b07_stop_at_step_last_step",
         source=BSRH_TEST + " StopAtStepTest.test_stop_based_on_last_step",
         description="last_step=10, global step assigned 5, 9, 10, 11 before runs that do not change it",
         session="hooked_session",
         hooks=[hook("stop", "stop_at_step", last_step=10)],
         actions=[act("begin"), act("assign_global_step", 5), act("after_create_session"),
                  act("run", 0), act("assign_global_step", 9), act("run", 0),
                  act("assign_global_step", 10), act("run", 0),
                  act("assign_global_step", 11), act("reset_should_stop"), act("run", 0)]),
    dict(name="b08_stop_at_step_num_steps",
         source=BSRH_TEST + " StopAtStepTest.test_stop_based_on_num_step",
         description="num_steps=10 from global step 5 (last_step 15); runs at 5, 13, 14, 15, 16",
         session="hooked_session",
         hooks=[hook("stop", "stop_at_step", num_steps=10)],
         actions=[act("begin"), act("assign_global_step", 5), act("after_create_session"),
                  act("run", 0), act("assign_global_step", 13), act("run", 0),
                  act("assign_global_step", 14), act("run", 0),
                  act("assign_global_step", 15), act("run", 0),
                  act("assign_global_step", 16), act("reset_should_stop"), act("run", 0)]),
    dict(name="b09_stop_at_step_jump",
         source=BSRH_TEST + " StopAtStepTest.test_stop_based_with_multiple_steps",
         description="num_steps=10 from global step 5; the step jumps 5 -> 15 and the hook stops",
         session="hooked_session",
         hooks=[hook("stop", "stop_at_step", num_steps=10)],
         actions=[act("begin"), act("assign_global_step", 5), act("after_create_session"),
                  act("run", 0), act("assign_global_step", 15), act("run", 0)]),
    dict(name="b10a_monitored_last_step",
         source=MS_TEST + " MonitoredSessionTest.test_last_step (first session)",
         description="MonitoredSession, last_step=3 from 0: a read-only run, then +1 runs stop at 3",
         session="monitored_session",
         hooks=[hook("stop", "stop_at_step", last_step=3)],
         actions=[act("create_session"), act("run", 0)] + runs(3) + [act("close")]),
    dict(name="b10b_monitored_last_step_restored",
         source=MS_TEST + " MonitoredSessionTest.test_last_step (restored session)",
         description="MonitoredSession restored at 3 (Scaffold init_fn), last_step=5: stops at 5",
         session="monitored_session", initial_global_step=3,
         hooks=[hook("stop", "stop_at_step", last_step=5)],
         actions=[act("create_session"), act("run", 0)] + runs(2) + [act("close")]),
    dict(name="b11a_monitored_num_steps",
         source=MS_TEST + " MonitoredSessionTest.test_num_steps (first session)",
         description="MonitoredSession, num_steps=3 from 0: stops after the third +1 run",
         session="monitored_session",
         hooks=[hook("stop", "stop_at_step", num_steps=3)],
         actions=[act("create_session")] + runs(3) + [act("close")]),
    dict(name="b11b_monitored_num_steps_restored",
         source=MS_TEST + " MonitoredSessionTest.test_num_steps (restored session)",
         description="MonitoredSession restored at 3, num_steps=4 (last_step 7): stops at 7",
         session="monitored_session", initial_global_step=3,
         hooks=[hook("stop", "stop_at_step", num_steps=4)],
         actions=[act("create_session")] + runs(4) + [act("close")]),
    # ---------------- C: StepCounterHook ----------------
    dict(name="c12_step_counter_every_n_steps",
         source=BSRH_TEST + " StepCounterHookTest.test_step_counter_every_n_steps",
         description="every_n_steps=10, +0.01 s and +1 per run, 30 runs: summaries at 11 and 21",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_steps=10)],
         actions=[act("begin")] + runs(30, 1, 0.01) + [act("end")]),
    dict(name="c13_step_counter_every_n_secs",
         source=BSRH_TEST + " StepCounterHookTest.test_step_counter_every_n_secs",
         description="every_n_secs=0.1: run, +0.2 s, run, +0.2 s, run: summaries at 2 and 3",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_secs=0.1)],
         actions=[act("begin"), act("run", 1), act("advance_clock", secs=0.2), act("run", 1),
                  act("advance_clock", secs=0.2), act("run", 1), act("end")]),
    dict(name="c14_step_counter_global_step_name",
         source=BSRH_TEST + " StepCounterHookTest.test_global_step_name (real clock upstream;"
                " +0.5 s mocked here)",
         description="global step variable bar/foo, every_n_steps=1, 2 runs: one summary at 2 tagged bar/foo/sec",
         session="hooked_session", global_step_name="bar/foo",
         hooks=[hook("counter", "step_counter", every_n_steps=1)],
         actions=[act("begin")] + runs(2, 1, 0.5) + [act("end")]),
    dict(name="c15_step_counter_not_increased_warning",
         source=BSRH_TEST + " StepCounterHookTest.test_log_warning_if_global_step_not_increased",
         description="increment 0, every_n_steps=1, 1 + 30 runs: the warning is logged only 5 times (log_first_n)",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_steps=1)],
         actions=[act("begin")] + runs(31, 0, 0.01) + [act("end")]),
    dict(name="c16_step_counter_steps_per_run_less_than_every_n_steps",
         source=BSRH_TEST + " StepCounterHookTest.test_steps_per_run_less_than_every_n_steps",
         description="every_n_steps=10, steps_per_run=5, +5 per run, 5 runs: summaries at 15 and 25",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_steps=10, steps_per_run=5)],
         actions=[act("begin")] + runs(5, 5, 0.01) + [act("end")]),
    dict(name="c17_step_counter_steps_per_run_equal_every_n_steps",
         source=BSRH_TEST + " StepCounterHookTest.test_steps_per_run_equal_every_n_steps",
         description="every_n_steps=5, steps_per_run=5, +5 per run, 5 runs: summaries at 10, 15, 20, 25",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_steps=5, steps_per_run=5)],
         actions=[act("begin")] + runs(5, 5, 0.01) + [act("end")]),
    dict(name="c18_step_counter_steps_per_run_greater_than_every_n_steps",
         source=BSRH_TEST + " StepCounterHookTest.test_steps_per_run_greater_than_every_n_steps",
         description="every_n_steps=5, steps_per_run=10, +10 per run, 5 runs: summaries at 20, 30, 40, 50",
         session="hooked_session",
         hooks=[hook("counter", "step_counter", every_n_steps=5, steps_per_run=10)],
         actions=[act("begin")] + runs(5, 10, 0.01) + [act("end")]),
    # ---------------- D: GlobalStepWaiterHook ----------------
    dict(name="d21_waiter_step_zero",
         source=BSRH_TEST + " GlobalStepWaiterHookTest.test_not_wait_for_step_zero",
         description="wait_until_step=0: before_run returns at once, no sleep, no log",
         session="hooked_session",
         hooks=[hook("waiter", "global_step_waiter", wait_until_step=0)],
         actions=[act("begin"), act("call_before_run"), act("call_before_run")]),
    dict(name="d22_waiter_wait_for_step",
         source=BSRH_TEST + " GlobalStepWaiterHookTest.test_wait_for_step",
         description="wait_until_step=1000; sleep #1 sets 500, sleep #2 sets 1100: exactly 2 sleeps of 0.5 s",
         session="hooked_session", sleep_schedule=[500, 1100],
         hooks=[hook("waiter", "global_step_waiter", wait_until_step=1000)],
         actions=[act("begin"), act("call_before_run"), act("call_before_run")]),
    dict(name="d23_waiter_progress_log",
         source="extra",
         description="wait_until_step=5000: the progress line is logged only when the step advanced by > 1000",
         session="hooked_session", sleep_schedule=[500, 1000, 1001, 2001, 2002, 5000],
         hooks=[hook("waiter", "global_step_waiter", wait_until_step=5000)],
         actions=[act("begin"), act("call_before_run"), act("call_before_run")]),
    # ---------------- Extra scenarios ----------------
    dict(name="x01_recovery_num_steps_with_checkpoint",
         source="extra (like " + MS_TEST + " test_recover_and_retry_on_aborted_error)",
         description="num_steps=5 from 10 (last_step 15); AbortedError in the 4th before_run of `aborter`;"
                     " the session is re-created from the checkpoint saved at 13 and the run replayed; stop at 15",
         session="monitored_session", initial_global_step=10,
         hooks=[hook("saver", "checkpoint_saver", save_steps=1),
                hook("stop", "stop_at_step", num_steps=5),
                hook("counter", "step_counter", every_n_steps=2),
                hook("aborter", "raise_once", raise_point="before_run", raise_on_call=4,
                     raise_error="AbortedError"),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(5, 1, 0.25) + [act("close")]),
    dict(name="x02_recovery_num_steps_without_checkpoint",
         source="extra (like " + MS_TEST + " test_retry_on_aborted_error)",
         description="num_steps=5 from 10 (last_step 15); AbortedError in the 4th before_run; no checkpoint, so"
                     " the new session starts again at 10 and last_step stays 15: 8 successful runs",
         session="monitored_session", initial_global_step=10,
         hooks=[hook("stop", "stop_at_step", num_steps=5),
                hook("counter", "step_counter", every_n_steps=2),
                hook("aborter", "raise_once", raise_point="before_run", raise_on_call=4,
                     raise_error="AbortedError"),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(8, 1, 0.25) + [act("close")]),
    dict(name="x03_recovery_unavailable_in_after_run",
         source="extra",
         description="UnavailableError in the 3rd after_run of `failer` (after the checkpoint saver saved 3):"
                     " later hooks miss that after_run, the session is restored at 3 and the run replayed (-> 4);"
                     " last_step=6",
         session="monitored_session",
         hooks=[hook("saver", "checkpoint_saver", save_steps=1),
                hook("stop", "stop_at_step", last_step=6),
                hook("failer", "raise_once", raise_point="after_run", raise_on_call=3,
                     raise_error="UnavailableError"),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(5, 1, 0.25) + [act("close")]),
    dict(name="x04_jump_by_seven",
         source="extra",
         description="train op adds 7 per run, StopAtStepHook(last_step=40), StepCounterHook(every_n_steps=10),"
                     " +0.5 s per run: the run reaching 42 does not stop (stale 35 + 1 < 40, so no re-read);"
                     " the stop comes one run later, at 49",
         session="monitored_session",
         hooks=[hook("stop", "stop_at_step", last_step=40),
                hook("counter", "step_counter", every_n_steps=10)],
         actions=[act("create_session")] + runs(7, 7, 0.5) + [act("close")]),
    dict(name="x05_jump_assign_forward_backward",
         source="extra",
         description="hooked runs that assign the global step (stale read semantics): 0 -> 1 -> 2 -> 50 -> 51 -> 20"
                     " (backwards) -> ... -> 32 -> 100 -> 101; StopAtStepHook(last_step=100) stops only at 101,"
                     " StepCounterHook(every_n_steps=10) writes one summary (at 51)",
         session="monitored_session",
         hooks=[hook("stop", "stop_at_step", last_step=100),
                hook("counter", "step_counter", every_n_steps=10),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=([act("create_session")] + runs(2, 1, 0.25)
                  + [act("advance_clock", secs=0.25), act("run_assign", 50)]
                  + runs(1, 1, 0.25)
                  + [act("advance_clock", secs=0.25), act("run_assign", 20)]
                  + runs(12, 1, 0.25)
                  + [act("advance_clock", secs=0.25), act("run_assign", 100)]
                  + runs(1, 1, 0.25) + [act("close")])),
    dict(name="x06_several_hooks",
         source="extra",
         description="hooks [first, stop(last_step=4), counter(every_n_steps=2), last]: full ordered call list;"
                     " `last` sees stop_requested in the stopping run; a run after the stop raises, calling no hook",
         session="monitored_session",
         hooks=[hook("first", "recorder", fetch_global_step=False),
                hook("stop", "stop_at_step", last_step=4),
                hook("counter", "step_counter", every_n_steps=2),
                hook("last", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(5, 1, 0.125) + [act("close")]),
    dict(name="x07_two_stop_hooks",
         source="extra",
         description="StopAtStepHook(last_step=5) and StopAtStepHook(num_steps=3) from 1: the second stops first, at 4",
         session="monitored_session", initial_global_step=1,
         hooks=[hook("stop_last", "stop_at_step", last_step=5),
                hook("stop_num", "stop_at_step", num_steps=3),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(3) + [act("close")]),
    dict(name="x08_waiter_in_monitored_session_with_recovery",
         source="extra",
         description="GlobalStepWaiterHook(2) waits (2 sleeps) only in the first run; after an AbortedError"
                     " resets the step to 0 it does not wait again",
         session="monitored_session", sleep_schedule=[1, 2],
         hooks=[hook("waiter", "global_step_waiter", wait_until_step=2),
                hook("aborter", "raise_once", raise_point="before_run", raise_on_call=3,
                     raise_error="AbortedError"),
                hook("recorder", "recorder", fetch_global_step=True)],
         actions=[act("create_session")] + runs(4) + [act("close")]),
    dict(name="x09_step_counter_every_n_secs_irregular_clock",
         source="extra",
         description="every_n_secs=1.0 with irregular dyadic clock advances (exact in binary), +1 per run",
         session="monitored_session",
         hooks=[hook("counter", "step_counter", every_n_secs=1.0)],
         actions=([act("create_session")]
                  + [a for secs in [0.25, 0.5, 0.25, 0.125, 0.75, 0.25, 1.0, 2.5, 0.5, 0.5]
                     for a in runs(1, 1, secs)]
                  + [act("close")])),
]


# --------------------------------------------------------------------------
# Recording machinery.
# --------------------------------------------------------------------------

class Recording:
    def __init__(self):
        self.action = 0
        self.runs = []
        self.hook_calls = []
        self.summaries = []
        self.logs = []
        self.sleeps = []
        self.session_creations = []


class FakeClock:
    """Stands in for the `time` module inside basic_session_run_hooks.

    time() returns the mocked time; sleep() records the call, assigns the next
    value of the sleep schedule to the global step and does NOT advance the
    clock (as in TF's test_wait_for_step)."""

    def __init__(self, start, rec):
        self.now = start
        self.rec = rec
        self.sleep_schedule = []
        self.on_sleep = None

    def module(self):
        return types.SimpleNamespace(time=self.time, sleep=self.sleep)

    def time(self):
        return self.now

    def sleep(self, secs):
        index = len(self.rec.sleeps)
        if index >= len(self.sleep_schedule):
            raise AssertionError("sleep #%d called but the sleep schedule has only %d entries"
                                 % (index + 1, len(self.sleep_schedule)))
        value = self.sleep_schedule[index]
        self.rec.sleeps.append({"action": self.rec.action, "secs": float(secs),
                                "global_step_set": value})
        self.on_sleep(value)


class LogCapture(py_logging.Handler):
    """Keeps the log records emitted from basic_session_run_hooks.py, except the
    CheckpointSaverHook's (they carry temporary paths and are TF-only)."""

    def __init__(self, rec):
        super().__init__(level=py_logging.DEBUG)
        self.rec = rec

    def emit(self, record):
        if os.path.basename(record.pathname) != "basic_session_run_hooks.py":
            return
        if "checkpoint" in str(record.msg).lower():
            return
        level = {py_logging.INFO: "info", py_logging.WARNING: "warning",
                 py_logging.ERROR: "error"}.get(record.levelno, str(record.levelno))
        self.rec.logs.append({"action": self.rec.action, "level": level,
                              "message": record.getMessage()})


class FakeSummaryWriter:
    def __init__(self, rec, hook_name):
        self.rec = rec
        self.hook_name = hook_name

    def add_summary(self, summary, global_step=None):
        for value in summary.value:
            self.rec.summaries.append({"action": self.rec.action, "hook": self.hook_name,
                                       "step": int(global_step), "tag": value.tag,
                                       # Summary.simple_value is a float32
                                       "value": float(value.simple_value)})

    def add_session_log(self, *args, **kwargs):
        pass

    def flush(self):
        pass


class RecorderHook(session_run_hook.SessionRunHook):
    """A hook that does nothing but optionally fetch the global step read tensor."""

    def __init__(self, fetch_global_step):
        self._fetch = fetch_global_step

    def begin(self):
        self._read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access

    def before_run(self, run_context):
        if self._fetch:
            return session_run_hook.SessionRunArgs(self._read)
        return None


class RaiseOnceHook(session_run_hook.SessionRunHook):
    """Raises `error` once, in its `point` method, on the n-th call of it."""

    def __init__(self, point, n, error):
        self._point = point
        self._remaining = n
        self._error = error

    def _maybe_raise(self, point):
        if point != self._point:
            return
        self._remaining -= 1
        if self._remaining == 0:
            raise getattr(errors, self._error)(None, None, "injected " + self._error)

    def before_run(self, run_context):
        self._maybe_raise("before_run")
        return None

    def after_run(self, run_context, run_values):
        self._maybe_raise("after_run")


def instrument(hook_obj, name, rec):
    """Wraps the five hook points of one hook instance so that each call is
    recorded, in order, with the action it happened in."""

    def wrap(point):
        original = getattr(hook_obj, point)

        def wrapper(*args):
            entry = {"action": rec.action, "hook": name, "point": point,
                     "results": None, "stop_requested": False, "error": ""}
            if point in ("before_run", "after_run"):
                entry["stop_requested"] = bool(args[0].stop_requested)
            if point == "after_run":
                results = args[1].results
                entry["results"] = None if results is None else int(results)
            rec.hook_calls.append(entry)
            try:
                return original(*args)
            except BaseException as e:  # record, then let TF handle it
                entry["error"] = type(e).__name__
                raise

        setattr(hook_obj, point, wrapper)

    for point in ("begin", "after_create_session", "before_run", "after_run", "end"):
        wrap(point)
    return hook_obj


def describe_error(e):
    return "%s: %s" % (type(e).__name__, e)


# --------------------------------------------------------------------------
# Running the scenarios.
# --------------------------------------------------------------------------

def make_global_step(name):
    if name == "global_step":
        return tf.compat.v1.train.get_or_create_global_step()
    scope, var = name.rsplit("/", 1)
    with tf.compat.v1.variable_scope(scope):
        return tf.compat.v1.get_variable(
            var, initializer=0, trainable=False,
            collections=[tf.compat.v1.GraphKeys.GLOBAL_STEP,
                         tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])


def run_construction_error(spec):
    kwargs = {k: spec[k] for k in ("every_secs", "every_steps", "num_steps", "last_step",
                                   "every_n_steps", "every_n_secs", "wait_until_step")
              if k in spec}
    ctor = {"second_or_step_timer": bsrh.SecondOrStepTimer,
            "stop_at_step_hook": bsrh.StopAtStepHook,
            "step_counter_hook": bsrh.StepCounterHook,
            "global_step_waiter_hook": bsrh.GlobalStepWaiterHook}[spec["type"]]
    try:
        with tf.Graph().as_default():
            obj = ctor(**kwargs)
            if spec["phase"] == "begin":
                obj.begin()
    except Exception as e:  # pylint: disable=broad-except
        error, message = type(e).__name__, str(e)
    else:
        raise AssertionError("%s did not raise" % spec["name"])
    out = dict(spec)
    out.update(error=error, message=message)
    if spec["type"] == "step_counter_hook":
        out.setdefault("every_n_steps", 100)
        out.setdefault("every_n_secs", None)
    return out


def run_timer(spec):
    rec = Recording()
    clock = FakeClock(MOCK_START_TIME, rec)
    results = []
    with mock.patch.object(bsrh, "time", clock.module()):
        timer = bsrh.SecondOrStepTimer(every_secs=spec.get("every_secs"),
                                       every_steps=spec.get("every_steps"))
        for op in spec["ops"]:
            r = {"kind": op["kind"], "step": op.get("step", 0), "secs": op.get("secs", 0.0),
                 "triggers": False, "elapsed_secs": None, "elapsed_steps": None,
                 "last_triggered_step": None}
            if op["kind"] == "advance_clock":
                clock.now += op["secs"]
            elif op["kind"] == "should_trigger_for_step":
                r["triggers"] = bool(timer.should_trigger_for_step(op["step"]))
            elif op["kind"] == "update_last_triggered_step":
                secs, steps = timer.update_last_triggered_step(op["step"])
                r["elapsed_secs"] = secs
                r["elapsed_steps"] = steps
            elif op["kind"] == "last_triggered_step":
                r["last_triggered_step"] = timer.last_triggered_step()
            results.append(r)
    return {"name": spec["name"], "source": spec["source"], "description": spec["description"],
            "every_secs": spec.get("every_secs"), "every_steps": spec.get("every_steps"),
            "start_time": MOCK_START_TIME, "ops": results}


class SessionScenario:
    def __init__(self, spec, rec, clock, tmpdir):
        self.spec = spec
        self.rec = rec
        self.clock = clock
        self.tmpdir = tmpdir
        self.kind = spec["session"]
        self.initial = spec.get("initial_global_step", 0)

        self.gs = make_global_step(spec.get("global_step_name", "global_step"))
        self.gs_read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        self.gs_value = tf.identity(self.gs, name="raw_global_step_value")
        self.assign_ph = tf.compat.v1.placeholder(self.gs.dtype.base_dtype, shape=[])
        self.raw_assign = state_ops.assign(self.gs, self.assign_ph)
        self.inc_ops = {}
        self.assign_ops = {}
        for a in spec["actions"]:
            if a["kind"] == "run" and a["value"] not in self.inc_ops:
                self.inc_ops[a["value"]] = training_util._increment_global_step(a["value"])  # pylint: disable=protected-access
            if a["kind"] == "run_assign" and a["value"] not in self.assign_ops:
                # Like _increment_global_step: the assignment waits for the read
                # tensor, so hooks see the value from before the run.
                with tf.control_dependencies([self.gs_read]):
                    self.assign_ops[a["value"]] = state_ops.assign(self.gs, a["value"])

        self.checkpoint_dir = None
        self.scaffold = None
        if self.kind == "monitored_session":
            self.scaffold = tf.compat.v1.train.Scaffold(init_fn=self._init_fn)
        self.hooks = [self._make_hook(h) for h in spec["hooks"]]

        self.sess = None       # raw session (hooked_session mode)
        self.hooked = None     # _HookedSession or MonitoredSession
        self.clock.sleep_schedule = list(spec.get("sleep_schedule", []))
        self.clock.on_sleep = self._assign_raw

    # -- helpers
    def _init_fn(self, scaffold, sess):
        del scaffold
        sess.run(self.raw_assign, {self.assign_ph: self.initial})

    def _raw_session(self):
        if self.kind == "hooked_session":
            return self.sess
        return self.hooked._tf_sess()  # pylint: disable=protected-access

    def _assign_raw(self, value):
        self._raw_session().run(self.raw_assign, {self.assign_ph: value})

    def _read_raw(self):
        return int(self._raw_session().run(self.gs_value))

    def _make_hook(self, h):
        kind = h["kind"]
        if kind == "stop_at_step":
            obj = bsrh.StopAtStepHook(num_steps=h.get("num_steps"), last_step=h.get("last_step"))
        elif kind == "step_counter":
            obj = bsrh.StepCounterHook(every_n_steps=h.get("every_n_steps"),
                                       every_n_secs=h.get("every_n_secs"),
                                       summary_writer=FakeSummaryWriter(self.rec, h["name"]))
            if h.get("steps_per_run", 1) != 1:
                obj._set_steps_per_run(h["steps_per_run"])  # pylint: disable=protected-access
        elif kind == "global_step_waiter":
            obj = bsrh.GlobalStepWaiterHook(wait_until_step=h["wait_until_step"])
        elif kind == "recorder":
            obj = RecorderHook(h.get("fetch_global_step", False))
        elif kind == "raise_once":
            obj = RaiseOnceHook(h["raise_point"], h["raise_on_call"], h["raise_error"])
        elif kind == "checkpoint_saver":
            self.checkpoint_dir = os.path.join(self.tmpdir, "ckpt")
            obj = bsrh.CheckpointSaverHook(self.checkpoint_dir, save_steps=h["save_steps"],
                                           scaffold=self.scaffold)
        else:
            raise ValueError(kind)
        return instrument(obj, h["name"], self.rec)

    def _should_stop(self):
        return bool(self.hooked.should_stop())

    def _record_run(self, error=""):
        self.rec.runs.append({"action": self.rec.action, "global_step": self._read_raw(),
                              "should_stop": self._should_stop(), "error": error})

    # -- the actions
    def setup(self):
        if self.kind == "hooked_session":
            self.sess = tf.compat.v1.Session()
            self.sess.run(tf.compat.v1.global_variables_initializer())
            self.sess.run(self.raw_assign, {self.assign_ph: self.initial})
            self.hooked = monitored_session._HookedSession(self.sess, self.hooks)  # pylint: disable=protected-access

    def do(self, a):
        kind = a["kind"]
        if kind == "advance_clock":
            self.clock.now += a["secs"]
        elif kind == "assign_global_step":
            self._assign_raw(a["value"])
        elif kind == "begin":
            for h in self.hooks:
                h.begin()
        elif kind == "after_create_session":
            for h in self.hooks:
                h.after_create_session(self.sess, None)
        elif kind == "end":
            for h in self.hooks:
                h.end(self.sess)
        elif kind == "call_before_run":
            ctx = session_run_hook.SessionRunContext(original_args=None, session=self.sess)
            for h in self.hooks:
                h.before_run(ctx)
        elif kind == "reset_should_stop":
            self.hooked._should_stop = False  # pylint: disable=protected-access
        elif kind == "create_session":
            rec = self.rec
            outer = self

            class RecordingCreator(monitored_session.SessionCreator):
                def __init__(self, inner):
                    self.inner = inner

                def create_session(self):
                    sess = self.inner.create_session()
                    rec.session_creations.append(
                        {"action": rec.action, "global_step": int(sess.run(outer.gs_value))})
                    return sess

            creator = RecordingCreator(monitored_session.ChiefSessionCreator(
                scaffold=self.scaffold, checkpoint_dir=self.checkpoint_dir))
            self.hooked = monitored_session.MonitoredSession(session_creator=creator,
                                                             hooks=self.hooks)
        elif kind == "close":
            self.hooked.close()
        elif kind in ("run", "run_assign"):
            op = self.inc_ops[a["value"]] if kind == "run" else self.assign_ops[a["value"]]
            try:
                self.hooked.run(op)
            except Exception as e:  # pylint: disable=broad-except
                self._record_run(describe_error(e))
            else:
                self._record_run()
        else:
            raise ValueError(kind)


def run_session_scenario(spec):
    rec = Recording()
    clock = FakeClock(MOCK_START_TIME, rec)
    tmpdir = tempfile.mkdtemp(prefix="tf_reference_")
    tf_logging._log_counter_per_token.clear()  # log_first_n counts per process  # pylint: disable=protected-access
    handler = LogCapture(rec)
    logger = tf.get_logger()
    saved = (logger.level, logger.propagate, list(logger.handlers))
    logger.setLevel(py_logging.DEBUG)
    logger.propagate = False
    logger.handlers = [handler]
    try:
        with tf.Graph().as_default(), mock.patch.object(bsrh, "time", clock.module()):
            s = SessionScenario(spec, rec, clock, tmpdir)
            s.setup()
            for index, a in enumerate(spec["actions"]):
                rec.action = index
                s.do(a)
            if s.sess is not None:
                s.sess.close()
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]
        writer_cache.FileWriterCache.clear()
        shutil.rmtree(tmpdir, ignore_errors=True)

    hooks = []
    for h in spec["hooks"]:
        full = {"name": h["name"], "kind": h["kind"], "num_steps": None, "last_step": None,
                "every_n_steps": None, "every_n_secs": None, "steps_per_run": 1,
                "wait_until_step": 0, "fetch_global_step": False, "raise_point": "before_run",
                "raise_on_call": 0, "raise_error": "", "save_steps": None}
        full.update(h)
        hooks.append(full)
    return {
        "name": spec["name"], "source": spec["source"], "description": spec["description"],
        "session": spec["session"],
        "global_step_name": spec.get("global_step_name", "global_step"),
        "initial_global_step": spec.get("initial_global_step", 0),
        "start_time": MOCK_START_TIME,
        "sleep_schedule": spec.get("sleep_schedule", []),
        "hooks": hooks,
        "actions": spec["actions"],
        "runs": rec.runs,
        "hook_calls": rec.hook_calls,
        "summaries": rec.summaries,
        "logs": rec.logs,
        "sleeps": rec.sleeps,
        "session_creations": rec.session_creations,
    }


# --------------------------------------------------------------------------
# C++ emission.
# --------------------------------------------------------------------------

# field, C++ type, kind of value, default (omitted from initializers when equal;
# REQUIRED fields are always written; every member has a default member
# initializer so that no compiler warns about fields left out of a designated
# initializer)
REQUIRED = object()

CPP_STRUCTS = [
    ("ConstructionError", "A constructor or begin() call that TensorFlow rejects.", [
        ("name", "std::string_view", "str", REQUIRED),
        ("source", "std::string_view", "str", ""),
        ("type", "Constructed", "enum", REQUIRED),
        ("phase", "Phase", "enum", REQUIRED),
        ("every_secs", "std::optional<double>", "opt_f64", None),
        ("every_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("num_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("last_step", "std::optional<std::int64_t>", "opt_i64", None),
        ("every_n_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("every_n_secs", "std::optional<double>", "opt_f64", None),
        ("wait_until_step", "std::optional<std::int64_t>", "opt_i64", None),
        ("error", "std::string_view", "str", REQUIRED),
        ("message", "std::string_view", "str", REQUIRED),
    ]),
    ("TimerOp", "One call on a SecondOrStepTimer (or a clock advance) and what it returned.", [
        ("kind", "TimerOpKind", "enum", REQUIRED),
        ("step", "std::int64_t", "i64", 0),
        ("secs", "double", "f64", 0.0),
        ("triggers", "bool", "bool", False),
        ("elapsed_secs", "std::optional<double>", "opt_f64", None),
        ("elapsed_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("last_triggered_step", "std::optional<std::int64_t>", "opt_i64", None),
    ]),
    ("TimerScenario", "A SecondOrStepTimer driven through a list of ops on a mocked clock.", [
        ("name", "std::string_view", "str", REQUIRED),
        ("source", "std::string_view", "str", ""),
        ("description", "std::string_view", "str", ""),
        ("every_secs", "std::optional<double>", "opt_f64", None),
        ("every_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("start_time", "double", "f64", REQUIRED),
        ("ops", "std::span<const TimerOp>", "span", []),
    ]),
    ("HookSpec", "One hook of a session scenario, in list order.", [
        ("name", "std::string_view", "str", REQUIRED),
        ("kind", "HookKind", "enum", REQUIRED),
        ("num_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("last_step", "std::optional<std::int64_t>", "opt_i64", None),
        ("every_n_steps", "std::optional<std::int64_t>", "opt_i64", None),
        ("every_n_secs", "std::optional<double>", "opt_f64", None),
        ("steps_per_run", "std::int64_t", "i64", 1),
        ("wait_until_step", "std::int64_t", "i64", 0),
        ("fetch_global_step", "bool", "bool", False),
        ("raise_point", "HookPoint", "enum", "before_run"),
        ("raise_on_call", "std::int64_t", "i64", 0),
        ("raise_error", "std::string_view", "str", ""),
        ("save_steps", "std::optional<std::int64_t>", "opt_i64", None),
    ]),
    ("Action", "One input step of a session scenario.", [
        ("kind", "ActionKind", "enum", REQUIRED),
        ("value", "std::int64_t", "i64", 0),
        ("secs", "double", "f64", 0.0),
    ]),
    ("RunResult", "After each run/run_assign action: raw global step, should_stop(), error.", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("global_step", "std::int64_t", "i64", REQUIRED),
        ("should_stop", "bool", "bool", REQUIRED),
        ("error", "std::string_view", "str", ""),
    ]),
    ("HookCall", "One call of a hook point, in the order TensorFlow made them.", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("hook", "std::string_view", "str", REQUIRED),
        ("point", "HookPoint", "enum", REQUIRED),
        ("results", "std::optional<std::int64_t>", "opt_i64", None),
        ("stop_requested", "bool", "bool", False),
        ("error", "std::string_view", "str", ""),
    ]),
    ("SummaryValue", "One value written to a StepCounterHook's summary writer.", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("hook", "std::string_view", "str", REQUIRED),
        ("step", "std::int64_t", "i64", REQUIRED),
        ("tag", "std::string_view", "str", REQUIRED),
        ("value", "double", "f64", REQUIRED),
    ]),
    ("LogLine", "One log record emitted by the hooks.", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("level", "LogLevel", "enum", REQUIRED),
        ("message", "std::string_view", "str", REQUIRED),
    ]),
    ("Sleep", "One time.sleep() call made by GlobalStepWaiterHook.", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("secs", "double", "f64", REQUIRED),
        ("global_step_set", "std::int64_t", "i64", REQUIRED),
    ]),
    ("SessionCreation", "One raw session created by MonitoredSession (first one and recoveries).", [
        ("action", "std::size_t", "i64", REQUIRED),
        ("global_step", "std::int64_t", "i64", REQUIRED),
    ]),
    ("SessionScenario", "Hooks driven through a _HookedSession or a MonitoredSession.", [
        ("name", "std::string_view", "str", REQUIRED),
        ("source", "std::string_view", "str", ""),
        ("description", "std::string_view", "str", ""),
        ("session", "SessionKind", "enum", REQUIRED),
        ("global_step_name", "std::string_view", "str", REQUIRED),
        ("initial_global_step", "std::int64_t", "i64", 0),
        ("start_time", "double", "f64", REQUIRED),
        ("sleep_schedule", "std::span<const std::int64_t>", "span", []),
        ("hooks", "std::span<const HookSpec>", "span", []),
        ("actions", "std::span<const Action>", "span", []),
        ("runs", "std::span<const RunResult>", "span", []),
        ("hook_calls", "std::span<const HookCall>", "span", []),
        ("summaries", "std::span<const SummaryValue>", "span", []),
        ("logs", "std::span<const LogLine>", "span", []),
        ("sleeps", "std::span<const Sleep>", "span", []),
        ("session_creations", "std::span<const SessionCreation>", "span", []),
    ]),
]

CPP_ENUMS = [
    ("Constructed", ["second_or_step_timer", "stop_at_step_hook", "step_counter_hook",
                     "global_step_waiter_hook"]),
    ("Phase", ["constructor", "begin"]),
    ("TimerOpKind", ["advance_clock", "should_trigger_for_step", "update_last_triggered_step",
                     "last_triggered_step"]),
    ("SessionKind", ["hooked_session", "monitored_session"]),
    ("HookKind", ["stop_at_step", "step_counter", "global_step_waiter", "recorder", "raise_once",
                  "checkpoint_saver"]),
    ("HookPoint", ["begin", "after_create_session", "before_run", "after_run", "end"]),
    ("ActionKind", ["create_session", "begin", "after_create_session", "end", "call_before_run",
                    "advance_clock", "assign_global_step", "run", "run_assign",
                    "reset_should_stop", "close"]),
    ("LogLevel", ["info", "warning", "error"]),
]

HEADER_PROLOGUE = """\
// GENERATED FILE - DO NOT EDIT BY HAND.
// Generated by tools/tf_reference/generate.py from TensorFlow {version}
// (tf.compat.v1.train.MonitoredSession and the hooks of
// tensorflow/python/training/basic_session_run_hooks.py, graph mode, mocked clock).
// Regenerate: python3 tools/tf_reference/generate.py   (see tools/tf_reference/README.md)
//
// Conventions:
// - Every output record carries `action`, the 0-based index into the scenario's
//   `actions` during which it happened.
// - Clock: starts at `start_time`; only `advance_clock` moves it. time.sleep()
//   (GlobalStepWaiterHook) does not move it; the i-th sleep assigns
//   sleep_schedule[i] to the global step through the raw session.
// - `run n`: one hooked run of a train op that adds n to the global step and
//   depends on the global-step read tensor, so hooks fetching that tensor get
//   the value from before the run. `run_assign v`: the same, but the op
//   assigns v. `assign_global_step v`: raw assignment, no hook is called.
// - RunResult.global_step: raw read after the run; should_stop: should_stop()
//   after the run; error: "Type: message" if run() raised, else "".
// - HookCall.results: the after_run results when the hook fetched the
//   global-step read tensor (stale value), else nullopt. stop_requested is
//   read on entry to before_run/after_run. error: exception type the call raised.
// - hooked_session scenarios use _HookedSession (no begin/after_create_session/end
//   unless an action calls them on every hook, in order); monitored_session
//   scenarios use MonitoredSession(ChiefSessionCreator(Scaffold(init_fn sets
//   initial_global_step), checkpoint_dir only with a checkpoint_saver hook)).
// - Hook kinds `recorder` (fetches the read tensor iff fetch_global_step),
//   `raise_once` (raises raise_error in raise_point on call number
//   raise_on_call) and `checkpoint_saver` (CheckpointSaverHook; a re-created
//   session restores the last saved global step) are test devices.
// - logs: records from basic_session_run_hooks.py except CheckpointSaverHook's.
// - SummaryValue.value is the float32 stored in the Summary proto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace runhooks_test::tf_reference {{

inline constexpr std::string_view tensorflow_version = "{version}";
"""


def cpp_str(s):
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            raise ValueError("non-ASCII character in %r" % s)
    return '"' + "".join(out) + '"'


def cpp_f64(x):
    r = repr(float(x))
    if r in ("inf", "-inf", "nan"):
        raise ValueError(r)
    return r


def cpp_value(kind, value, cpp_type):
    if kind == "str":
        return cpp_str(value)
    if kind == "i64":
        return str(int(value))
    if kind == "f64":
        return cpp_f64(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "opt_i64":
        return "std::nullopt" if value is None else str(int(value))
    if kind == "opt_f64":
        return "std::nullopt" if value is None else cpp_f64(value)
    if kind == "enum":
        return "%s::%s" % (cpp_type, value)
    raise ValueError(kind)


class CppEmitter:
    def __init__(self):
        self.fields = {name: fields for name, _, fields in CPP_STRUCTS}
        self.lines = []

    def init(self, struct, record, spans, indent):
        parts = []
        for field, cpp_type, kind, default in self.fields[struct]:
            if kind == "span":
                if field in spans:
                    parts.append(".%s = %s" % (field, spans[field]))
                continue
            value = record[field]
            if default is not REQUIRED and value == default and type(value) is type(default):
                continue
            parts.append(".%s = %s" % (field, cpp_value(kind, value, cpp_type)))
        one_line = "{" + ", ".join(parts) + "}"
        if len(one_line) + indent <= 100:
            return one_line
        pad = " " * (indent + 2)
        return "{\n" + ",\n".join(pad + p for p in parts) + ",\n" + " " * indent + "}"

    def array(self, cpp_type, name, items):
        self.lines.append("inline constexpr %s %s[] = {" % (cpp_type, name))
        for item in items:
            self.lines.append("    %s," % item)
        self.lines.append("};")

    def records(self, struct, name, records):
        if not records:
            return None
        self.array(struct, name, [self.init(struct, r, {}, 4) for r in records])
        return name


def emit_header(construction_errors, timers, sessions):
    e = CppEmitter()
    L = e.lines
    L.append(HEADER_PROLOGUE.format(version=tf.__version__))
    for name, values in CPP_ENUMS:
        L.append("enum class %s { %s };" % (name, ", ".join(values)))
    L.append("")
    for name, doc, fields in CPP_STRUCTS:
        L.append("// %s" % doc)
        L.append("struct %s {" % name)
        for field, cpp_type, kind, default in fields:
            if default is REQUIRED or kind == "span":
                L.append("  %s %s{};" % (cpp_type, field))
            else:
                L.append("  %s %s = %s;" % (cpp_type, field, cpp_value(kind, default, cpp_type)))
        L.append("};")
        L.append("")

    L.append("// ---------------------------------------------------------------- construction errors")
    e.array("ConstructionError", "construction_errors",
            [e.init("ConstructionError", dict({"every_secs": None, "every_steps": None,
                                               "num_steps": None, "last_step": None,
                                               "every_n_steps": None, "every_n_secs": None,
                                               "wait_until_step": None}, **r), {}, 4)
             for r in construction_errors])
    L.append("")

    L.append("// ---------------------------------------------------------------- timer scenarios")
    timer_inits = []
    for t in timers:
        ns = "detail::" + t["name"]
        L.append("namespace detail::%s {" % t["name"])
        e.records("TimerOp", "ops", t["ops"])
        L.append("}  // namespace detail::%s" % t["name"])
        timer_inits.append(e.init("TimerScenario", t, {"ops": ns + "::ops"}, 4))
    e.array("TimerScenario", "timer_scenarios", timer_inits)
    L.append("")

    L.append("// ---------------------------------------------------------------- session scenarios")
    session_inits = []
    for s in sessions:
        ns = "detail::" + s["name"]
        L.append("namespace detail::%s {" % s["name"])
        spans = {}
        if s["sleep_schedule"]:
            e.array("std::int64_t", "sleep_schedule", [str(v) for v in s["sleep_schedule"]])
            spans["sleep_schedule"] = ns + "::sleep_schedule"
        for field, struct in [("hooks", "HookSpec"), ("actions", "Action"), ("runs", "RunResult"),
                              ("hook_calls", "HookCall"), ("summaries", "SummaryValue"),
                              ("logs", "LogLine"), ("sleeps", "Sleep"),
                              ("session_creations", "SessionCreation")]:
            if e.records(struct, field, s[field]):
                spans[field] = ns + "::" + field
        L.append("}  // namespace detail::%s" % s["name"])
        L.append("")
        session_inits.append(e.init("SessionScenario", s, spans, 4))
    e.array("SessionScenario", "session_scenarios", session_inits)
    L.append("")
    L.append("}  // namespace runhooks_test::tf_reference")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------
# Main.
# --------------------------------------------------------------------------

def dump_json(obj):
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def generate():
    if tf.__version__ != EXPECTED_TF_VERSION:
        raise SystemExit("TensorFlow %s is installed; the fixtures are made with %s "
                         "(pip install -r tools/tf_reference/requirements.txt)"
                         % (tf.__version__, EXPECTED_TF_VERSION))
    tf.compat.v1.disable_eager_execution()
    construction = [run_construction_error(s) for s in CONSTRUCTION_ERRORS]
    timers = [run_timer(s) for s in TIMER_SCENARIOS]
    sessions = [run_session_scenario(s) for s in SESSION_SCENARIOS]
    for s in timers + sessions:
        s["tensorflow_version"] = tf.__version__
    files = {"construction_errors.json": dump_json(
        {"tensorflow_version": tf.__version__, "construction_errors": construction})}
    for s in timers:
        files[s["name"] + ".json"] = dump_json(dict(s, scenario_type="timer"))
    for s in sessions:
        files[s["name"] + ".json"] = dump_json(dict(s, scenario_type="session"))
    files["fixtures.hpp"] = emit_header(construction, timers, sessions)
    # LoggingTensorHook, SummarySaverHook, ProfilerHook, NanTensorHook, FinalOpsHook, histograms
    # and Keras' EarlyStopping (issue 12): hook_fixtures.hpp and hooks/<scenario>.json.
    files.update(hook_scenarios.generate_files(tf))
    # CheckpointSaverHook: where TensorFlow saves and what its Saver keeps (issue 11).
    import checkpoint_scenarios  # pylint: disable=import-outside-toplevel
    files.update(checkpoint_scenarios.generate(tf, MOCK_START_TIME))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=OUT_DIR, help="output directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any fixture would change")
    args = parser.parse_args()
    files = generate()
    stale = []
    for name, text in sorted(files.items()):
        path = os.path.join(args.out, name)
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if old != text:
            stale.append(name)
            if not args.check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8", newline="\n") as f:
                    f.write(text)
    known = set(files)
    extra = sorted(os.path.relpath(os.path.join(d, n), args.out)
                   for d, _, names in os.walk(args.out) for n in names
                   if os.path.relpath(os.path.join(d, n), args.out) not in known)
    if args.check:
        if stale or extra:
            print("out of date: %s" % ", ".join(stale + ["(unexpected) " + n for n in extra]))
            return 1
        print("fixtures up to date (%d files)" % len(files))
        return 0
    for n in extra:
        print("note: %s is not produced by this script" % os.path.join(args.out, n))
    print("wrote %d of %d files to %s" % (len(stale), len(files), os.path.relpath(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
