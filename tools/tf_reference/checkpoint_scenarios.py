"""CheckpointSaverHook scenarios for generate.py: where TensorFlow saves, and what it keeps.

Each scenario drives a real tf.compat.v1.train.CheckpointSaverHook (with a real Saver writing
real checkpoints into a temporary directory) through _HookedSession, as TensorFlow's own
CheckpointSaverHookTest does, or through MonitoredSession(ChiefSessionCreator) with a restore on
recovery. The clock of basic_session_run_hooks (save_secs) and of saver.py (checkpoint
timestamps, keep_checkpoint_every_n_hours) is mocked. A CheckpointSaverListener records every
save's global step; afterwards the state file's list and the checkpoints left on disk are read.

generate.py calls generate(tf, mock_start_time) and writes what it returns:
  <scenario>.json                     one file per scenario, for humans and diffs
  checkpoint_saver_hook.hpp           the same as constexpr C++
                                      (tests/checkpoint/checkpoint_tf_reference.cpp)
"""

import glob
import json
import os
import re
import shutil
import tempfile
import types
from unittest import mock

SOURCE = "basic_session_run_hooks_test.py"


def act(op, value=0, secs=0.0):
    return {"op": op, "value": value, "secs": secs}


def runs(n, increment=1):
    return [act("run", increment) for _ in range(n)]


def at(secs, increment=1):
    """Set the clock to start + secs, then run."""
    return [act("set_clock", secs=secs), act("run", increment)]


SCENARIOS = [
    dict(name="k01_save_steps_periodically",
         source=SOURCE + " CheckpointSaverHookTest.test_save_steps_saves_periodically",
         description="save_steps=2, no after_create_session: saves at runs 1, 3, 5 (steps 1, 3, 5)",
         mode="hooked_session", save_steps=2,
         actions=[act("begin")] + runs(5)),
    dict(name="k02_save_steps_before_first_train_step",
         source=SOURCE + " CheckpointSaverHookTest.test_save_checkpoint_before_first_train_step",
         description="save_steps=2, after_create_session at 0 saves 0; then 2, 4; end saves 5",
         mode="hooked_session", save_steps=2,
         actions=[act("begin"), act("after_create_session")] + runs(5) + [act("end")]),
    dict(name="k03_save_secs_periodically",
         source=SOURCE + " CheckpointSaverHookTest.test_save_secs_saves_periodically",
         description="save_secs=2, runs at T, T+0.5, T+2.5, T+2.6, T+2.7, T+10: saves 1, 3, 6",
         mode="hooked_session", save_secs=2.0,
         actions=[act("begin")] + at(0) + at(0.5) + at(2.5) + at(2.6) + at(2.7) + at(10)),
    dict(name="k04_save_secs_listeners_periodically",
         source=SOURCE + " CheckpointSaverHookTest.test_save_secs_calls_listeners_periodically",
         description="save_secs=2, runs at T+0.5, 0.5, 3.0, 3.5, 4.0, 6.5, 7.0, end at 7.5: 4 saves",
         mode="hooked_session", save_secs=2.0,
         actions=[act("begin")] + at(0.5) + at(0.5) + at(3.0) + at(3.5) + at(4.0) + at(6.5)
         + at(7.0) + [act("set_clock", secs=7.5), act("end")]),
    dict(name="k05_multi_step_steps_per_run_5",
         source=SOURCE + " CheckpointSaverHookMultiStepTest (steps_per_run=5, save_steps=10)",
         description="+5 per run, _set_steps_per_run(5), save_steps=10: saves 5, 15, 25; end at 30",
         mode="hooked_session", save_steps=10, steps_per_run=5,
         actions=[act("begin")] + runs(6, 5) + [act("end")]),
    dict(name="k06_stale_step_default_steps_per_run",
         source="extra (stale step: +7 per run, TensorFlow's default steps_per_run=1000000)",
         description="+7 per run, save_steps=10: the pre-check stale + 1000000 always re-reads,"
                     " so saves come at the first step at or past each threshold: 7, 21, 35, 49",
         mode="hooked_session", save_steps=10,
         actions=[act("begin")] + runs(8, 7) + [act("end")]),
    dict(name="k07_stale_step_steps_per_run_1",
         source="extra (stale step: +7 per run, _set_steps_per_run(1))",
         description="+7 per run, save_steps=10, steps_per_run=1: the pre-check stale + 1 misses"
                     " 21 (14 + 1 < 17) and saves at 28, then 42 (35 + 1 >= 38), 56",
         mode="hooked_session", save_steps=10, steps_per_run=1,
         actions=[act("begin")] + runs(8, 7) + [act("end")]),
    dict(name="k08_stale_step_save_secs",
         source="extra (stale step with save_secs)",
         description="+3 per run, save_secs=1, clock +0.4 s per run: saves at the first run"
                     " and then whenever 1 s has passed since the last save",
         mode="hooked_session", save_secs=1.0,
         actions=[act("begin")] + [a for i in range(10) for a in at(0.4 * i, 3)] + [act("end")]),
    dict(name="k09_recovery_restores_and_saves_again",
         source="extra (like monitored_session_test.py test_recover_and_retry_on_aborted_error)",
         description="MonitoredSession(ChiefSessionCreator), save_steps=3; AbortedError in the 6th"
                     " before_run: restored at 3, saved at 3 again, the run replayed",
         mode="monitored_session", save_steps=3, abort_on_run=6,
         actions=[act("create_session")] + runs(8) + [act("close")]),
    dict(name="k10_retention_max_to_keep_and_every_n_hours",
         source="extra (Saver(max_to_keep=2, keep_checkpoint_every_n_hours=1), clock +1000 s per run)",
         description="save_steps=1, 10 runs 1000 s apart: the checkpoints kept past max_to_keep"
                     " are the first ones dated after each hour mark",
         mode="hooked_session", save_steps=1, max_to_keep=2, keep_checkpoint_every_n_hours=1.0,
         actions=[act("begin")] + [a for i in range(1, 11) for a in at(1000.0 * i)]),
    dict(name="k11_retention_default_max_to_keep",
         source="extra (the default Saver: max_to_keep=5)",
         description="save_steps=1, 8 runs: the state names the last 5, the others are deleted",
         mode="hooked_session", save_steps=1,
         actions=[act("begin")] + runs(8)),
]


class _Clock:
    def __init__(self, start):
        self.start = start
        self.now = start

    def module(self):
        return types.SimpleNamespace(time=lambda: self.now, sleep=lambda secs: None)


def _run(tf, spec, start_time):
    from tensorflow.python.framework import errors
    from tensorflow.python.training import basic_session_run_hooks as bsrh
    from tensorflow.python.training import monitored_session
    from tensorflow.python.training import saver as saver_lib
    from tensorflow.python.training import session_run_hook
    from tensorflow.python.training import training_util
    from tensorflow.python.summary.writer import writer_cache

    clock = _Clock(start_time)
    tmp = tempfile.mkdtemp(prefix="tf_checkpoints_")
    model_dir = os.path.join(tmp, "model")
    state = {"action": 0}
    saves, creations, counts = [], [], {"begin": 0, "before_save": 0, "after_save": 0, "end": 0}

    class Listener(bsrh.CheckpointSaverListener):
        def begin(self):
            counts["begin"] += 1

        def before_save(self, session, global_step_value):
            counts["before_save"] += 1

        def after_save(self, session, global_step_value):
            counts["after_save"] += 1
            saves.append({"action": state["action"], "step": int(global_step_value)})

        def end(self, session, global_step_value):
            counts["end"] += 1

    class Aborter(session_run_hook.SessionRunHook):
        def __init__(self, n):
            self.left = n

        def before_run(self, run_context):
            self.left -= 1
            if self.left == 0:
                raise errors.AbortedError(None, None, "injected AbortedError")

    try:
        with tf.Graph().as_default(), \
                mock.patch.object(bsrh, "time", clock.module()), \
                mock.patch.object(saver_lib, "time", clock.module()):
            gs = tf.compat.v1.train.get_or_create_global_step()
            inc = {}
            for a in spec["actions"]:
                if a["op"] == "run" and a["value"] not in inc:
                    inc[a["value"]] = training_util._increment_global_step(a["value"])  # pylint: disable=protected-access
            saver = tf.compat.v1.train.Saver(
                max_to_keep=spec.get("max_to_keep", 5),
                keep_checkpoint_every_n_hours=spec.get("keep_checkpoint_every_n_hours", 10000.0),
                save_relative_paths=True)
            scaffold = tf.compat.v1.train.Scaffold(saver=saver)
            hook = bsrh.CheckpointSaverHook(model_dir, save_steps=spec.get("save_steps"),
                                            save_secs=spec.get("save_secs"), scaffold=scaffold,
                                            listeners=[Listener()], save_graph_def=False)
            if "steps_per_run" in spec:
                hook._set_steps_per_run(spec["steps_per_run"])  # pylint: disable=protected-access
            sess = hooked = None
            final_step = 0
            if spec["mode"] == "hooked_session":
                hook.begin()
                scaffold.finalize()
                sess = tf.compat.v1.Session()
                sess.run(scaffold.init_op)
                hooked = monitored_session._HookedSession(sess, [hook])  # pylint: disable=protected-access
            for index, a in enumerate(spec["actions"]):
                state["action"] = index
                op = a["op"]
                if op == "begin":
                    pass  # done above, before the graph was finalized
                elif op == "after_create_session":
                    hook.after_create_session(sess, None)
                elif op == "end":
                    hook.end(sess)
                elif op == "set_clock":
                    clock.now = start_time + a["secs"]
                elif op == "run":
                    hooked.run(inc[a["value"]])
                    raw = sess if sess is not None else hooked._tf_sess()  # pylint: disable=protected-access
                    final_step = int(raw.run(gs))
                elif op == "create_session":
                    class Recording(monitored_session.SessionCreator):
                        def __init__(self, inner):
                            self.inner = inner

                        def create_session(self):
                            s = self.inner.create_session()
                            creations.append({"action": state["action"],
                                              "step": int(s.run(gs))})
                            return s

                    hooks = [hook]
                    if spec.get("abort_on_run"):
                        hooks = [Aborter(spec["abort_on_run"]), hook]
                    hooked = monitored_session.MonitoredSession(
                        session_creator=Recording(monitored_session.ChiefSessionCreator(
                            scaffold=scaffold, checkpoint_dir=model_dir)),
                        hooks=hooks)
                elif op == "close":
                    hooked.close()
                else:
                    raise ValueError(op)
            if sess is not None:
                sess.close()
        ckpt = tf.train.get_checkpoint_state(model_dir)
        named = [os.path.basename(p) for p in ckpt.all_model_checkpoint_paths] if ckpt else []
        kept = sorted(int(re.search(r"-(\d+)\.index$", f).group(1))
                      for f in glob.glob(os.path.join(model_dir, "*.index")))
    finally:
        writer_cache.FileWriterCache.clear()
        shutil.rmtree(tmp, ignore_errors=True)

    return {
        "name": spec["name"], "source": spec["source"], "description": spec["description"],
        "mode": spec["mode"],
        "save_steps": spec.get("save_steps"), "save_secs": spec.get("save_secs"),
        "steps_per_run": spec.get("steps_per_run", 1000000),
        "max_to_keep": spec.get("max_to_keep", 5),
        "keep_checkpoint_every_n_hours": spec.get("keep_checkpoint_every_n_hours"),
        "abort_on_run": spec.get("abort_on_run", 0),
        "start_time": start_time,
        "actions": spec["actions"],
        "saves": saves, "session_creations": creations, "listener_counts": counts,
        "named": named, "kept": kept, "final_global_step": final_step,
    }


def _cpp_str(s):
    return json.dumps(s)  # ASCII only here: JSON string syntax is C++ string syntax


def _opt(v, kind):
    if v is None:
        return "std::nullopt"
    return repr(float(v)) if kind == "f" else str(int(v))


HEADER = """\
// GENERATED FILE - DO NOT EDIT BY HAND.
// Generated by tools/tf_reference/generate.py (checkpoint_scenarios.py) from TensorFlow {version}:
// tf.compat.v1.train.CheckpointSaverHook with a real Saver, driven through _HookedSession (as in
// TensorFlow's CheckpointSaverHookTest) or MonitoredSession(ChiefSessionCreator), with the clock
// of basic_session_run_hooks and saver.py mocked (start_time, moved only by set_clock).
//
// - actions: begin / after_create_session / end call that point of the hook; run n runs a train
//   op adding n to the global step (depending on the global-step read, so the hook sees the stale
//   value, and re-reads it when stale + steps_per_run passes its timer); set_clock t sets the
//   clock to start_time + t; create_session builds the MonitoredSession, close closes it.
// - saves: every save, by a listener's after_save: the action during which it happened and the
//   global step saved. session_creations: the global step of each session made (after restore).
// - named: the state file's all_model_checkpoint_paths at the end; kept: the steps whose
//   checkpoint files are left on disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace runhooks_test::tf_reference::checkpoints {{

inline constexpr std::string_view tensorflow_version = "{version}";

enum class Op {{ begin, after_create_session, end, set_clock, run, create_session, close }};
struct Action {{
  Op op{{}};
  std::int64_t value = 0;
  double secs = 0.0;
}};
struct Save {{
  std::size_t action = 0;
  std::int64_t step = 0;
}};
struct ListenerCounts {{
  int begin = 0, before_save = 0, after_save = 0, end = 0;
}};
struct Scenario {{
  std::string_view name{{}};
  std::string_view source{{}};
  std::string_view description{{}};
  bool monitored_session = false;
  std::optional<std::int64_t> save_steps{{}};
  std::optional<double> save_secs{{}};
  std::int64_t steps_per_run = 1000000;
  int max_to_keep = 5;
  std::optional<double> keep_checkpoint_every_n_hours{{}};
  int abort_on_run = 0;
  double start_time = 0.0;
  std::span<const Action> actions{{}};
  std::span<const Save> saves{{}};
  std::span<const Save> session_creations{{}};
  ListenerCounts listener_counts{{}};
  std::span<const std::string_view> named{{}};
  std::span<const std::int64_t> kept{{}};
  std::int64_t final_global_step = 0;
}};
"""


def _emit(results, version):
    out = [HEADER.format(version=version)]
    inits = []
    for r in results:
        ns = "detail::" + r["name"]
        out.append("namespace detail::%s {" % r["name"])
        out.append("inline constexpr Action actions[] = {")
        for a in r["actions"]:
            out.append("    {Op::%s, %d, %r}," % (a["op"], a["value"], float(a["secs"])))
        out.append("};")
        spans = {"actions": ns + "::actions"}
        for field in ("saves", "session_creations"):
            if r[field]:
                out.append("inline constexpr Save %s[] = {" % field)
                out.extend("    {%d, %d}," % (s["action"], s["step"]) for s in r[field])
                out.append("};")
                spans[field] = ns + "::" + field
        if r["named"]:
            out.append("inline constexpr std::string_view named[] = {%s};"
                       % ", ".join(_cpp_str(n) for n in r["named"]))
            spans["named"] = ns + "::named"
        if r["kept"]:
            out.append("inline constexpr std::int64_t kept[] = {%s};"
                       % ", ".join(str(k) for k in r["kept"]))
            spans["kept"] = ns + "::kept"
        out.append("}  // namespace detail::%s" % r["name"])
        out.append("")
        c = r["listener_counts"]
        fields = [
            ".name = " + _cpp_str(r["name"]),
            ".source = " + _cpp_str(r["source"]),
            ".description = " + _cpp_str(r["description"]),
            ".monitored_session = " + ("true" if r["mode"] == "monitored_session" else "false"),
            ".save_steps = " + _opt(r["save_steps"], "i"),
            ".save_secs = " + _opt(r["save_secs"], "f"),
            ".steps_per_run = %d" % r["steps_per_run"],
            ".max_to_keep = %d" % r["max_to_keep"],
            ".keep_checkpoint_every_n_hours = " + _opt(r["keep_checkpoint_every_n_hours"], "f"),
            ".abort_on_run = %d" % r["abort_on_run"],
            ".start_time = %r" % float(r["start_time"]),
            ".actions = " + spans["actions"],
        ]
        for field in ("saves", "session_creations"):
            if field in spans:
                fields.append(".%s = %s" % (field, spans[field]))
        fields.append(".listener_counts = {%d, %d, %d, %d}"
                      % (c["begin"], c["before_save"], c["after_save"], c["end"]))
        for field in ("named", "kept"):
            if field in spans:
                fields.append(".%s = %s" % (field, spans[field]))
        fields.append(".final_global_step = %d" % r["final_global_step"])
        inits.append("    {\n" + "".join("        %s,\n" % f for f in fields) + "    },")
    out.append("inline constexpr Scenario scenarios[] = {")
    out.extend(inits)
    out.append("};")
    out.append("")
    out.append("}  // namespace runhooks_test::tf_reference::checkpoints")
    return "\n".join(out) + "\n"


def generate(tf, mock_start_time):
    """{file name: text} for tests/fixtures/tf_reference/."""
    results = [_run(tf, spec, mock_start_time) for spec in SCENARIOS]
    files = {}
    for r in results:
        files[r["name"] + ".json"] = json.dumps(
            dict(r, scenario_type="checkpoint", tensorflow_version=tf.__version__),
            indent=2, sort_keys=True) + "\n"
    files["checkpoint_saver_hook.hpp"] = _emit(results, tf.__version__)
    return files
