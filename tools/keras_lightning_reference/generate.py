#!/usr/bin/env python3
"""Record what Keras 3 and PyTorch Lightning 2.6.6 callbacks do on fixed metric sequences, as
fixtures for the C++ tests of issue 27 (tests/hooks/keras_lightning_reference.cpp).

The callbacks are driven directly, with crafted logs and stand-ins for the model, trainer and
fabric they read, so that each sequence is exactly the one written below: plateaus, ties, NaN,
inf, thresholds, min_delta edges, cooldown, min_lr, a restored timer.

  keras.callbacks.EarlyStopping        on_train_begin, then on_epoch_end(epoch, {"val_loss": v})
  keras.callbacks.ReduceLROnPlateau    the same, on a model whose optimizer is a real keras SGD
  keras.callbacks.TerminateOnNaN       on_batch_end(batch, {"loss": v})
  lightning EarlyStopping              _run_early_stopping_check(trainer), the trainer's
                                       callback_metrics holding a float64 tensor
  lightning.fabric SpikeDetection      on_train_batch_end(fabric, loss, batch, batch_idx); the
                                       TrainingSpikeException is caught and the sequence goes on,
                                       so every batch's decision is recorded
  lightning ModelCheckpoint            check_monitor_top_k and _update_best_and_save per value,
                                       the file writes stubbed (saved/removed steps recorded)
  keras.callbacks.ModelCheckpoint      save_best_only, on_epoch_end, model.save recorded
  lightning Timer                      its duration parser, and on_fit_start / on_train_start /
                                       on_train_batch_end with time.monotonic mocked, after
                                       load_state_dict for a restored one

Writes tests/fixtures/keras_lightning_reference/<group>.json (for humans and diffs) and
fixtures.hpp (the same data as constexpr C++). Deterministic: no clock, path or random value
reaches the output, JSON keys are sorted; --check exits 1 if a file would change.

Not a CI dependency. Run it in a virtualenv of its own, never the system Python, so that pip
cannot change the system's torch:

  python3 -m venv --system-site-packages /tmp/klvenv
  /tmp/klvenv/bin/pip install -r tools/keras_lightning_reference/requirements.txt
  KERAS_BACKEND=torch /tmp/klvenv/bin/python tools/keras_lightning_reference/generate.py [--check]
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import types
import warnings
from unittest import mock

os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras 3 on torch: no TensorFlow needed

import numpy as np  # noqa: E402
import torch  # noqa: E402
import keras  # noqa: E402
import lightning  # noqa: E402
from lightning.fabric.utilities import spike as fabric_spike  # noqa: E402
from lightning.pytorch.callbacks import EarlyStopping as LEarlyStopping  # noqa: E402
from lightning.pytorch.callbacks import Timer as LTimer  # noqa: E402
from lightning.pytorch.callbacks import timer as ltimer_module  # noqa: E402

EXPECTED = {"keras": "3.15.1", "lightning": "2.6.6"}
COMMAND = "KERAS_BACKEND=torch python tools/keras_lightning_reference/generate.py"

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "keras_lightning_reference")

NAN = float("nan")
INF = float("inf")

# ------------------------------------------------------------------------------- the sequences
# Values are dyadic fractions where an edge is tested: Keras compares in float32 (ops.less on
# Python floats makes float32 tensors) and runhooks in double, and such values are exact in both.

LIGHTNING_EARLY_STOPPING = [
    dict(name="l01_patience", patience=3, values=[1.0, 0.5, 0.5, 0.75, 0.625, 0.25, 1.0]),
    dict(name="l02_patience_0", patience=0, values=[1.0, 0.5, 0.5, 0.25]),
    dict(name="l03_min_delta_edge", patience=1, min_delta=0.25,
         values=[1.0, 0.75, 0.5, 0.25, 0.125]),
    dict(name="l04_stopping_threshold", patience=5, stopping_threshold=0.25,
         values=[1.0, 0.5, 0.25, 0.125, 0.0]),
    dict(name="l05_stopping_threshold_first", patience=5, stopping_threshold=0.5,
         values=[0.25, 1.0]),
    dict(name="l06_divergence_threshold", patience=5, divergence_threshold=2.0,
         values=[1.0, 1.5, 2.0, 2.5, 0.5]),
    dict(name="l07_nan_check_finite", patience=5, values=[1.0, 0.5, NAN, 0.25]),
    dict(name="l08_inf_check_finite", patience=5, values=[1.0, INF, 0.25]),
    dict(name="l09_neg_inf_check_finite", patience=5, values=[1.0, -INF]),
    dict(name="l10_nan_not_checked", patience=2, check_finite=False,
         values=[1.0, NAN, 0.5, NAN, NAN, 0.25]),
    dict(name="l11_inf_not_checked_divergence", patience=5, check_finite=False,
         divergence_threshold=4.0, values=[1.0, INF, 0.5]),
    dict(name="l12_max_thresholds", mode="max", patience=3, stopping_threshold=0.875,
         divergence_threshold=0.125, values=[0.5, 0.75, 0.75, 0.875, 0.9375]),
    dict(name="l13_max_divergence", mode="max", patience=3, divergence_threshold=0.25,
         values=[0.5, 0.75, 0.25, 0.125]),
    dict(name="l14_max_patience_ties", mode="max", patience=2, min_delta=0.0,
         values=[0.5, 0.5, 0.75, 0.75, 0.75, 1.0]),
    dict(name="l15_order_nonfinite_first", patience=5, stopping_threshold=0.5,
         divergence_threshold=2.0, values=[1.0, NAN]),
    dict(name="l16_threshold_beats_divergence", patience=5, stopping_threshold=3.0,
         divergence_threshold=2.0, values=[2.5]),
    dict(name="l17_never_stops", patience=2, values=[1.0, 0.875, 0.75, 0.75, 0.625, 0.625, 0.5]),
]

KERAS_EARLY_STOPPING = [
    dict(name="k10_nan_mid_sequence", patience=2, values=[1.0, NAN, 0.5, NAN, NAN, 0.25]),
    dict(name="k11_inf_mid_sequence", patience=1, values=[1.0, INF, 0.5, INF, 0.5]),
    dict(name="k12_min_delta_tie", patience=1, min_delta=0.25, values=[1.0, 0.75, 0.5, 0.25]),
    dict(name="k13_max_ties", mode="max", patience=2, values=[0.5, 0.5, 0.5, 0.75, 0.75, 0.75]),
    # Keras >= 3.7 takes the first value as the best whatever it is; runhooks starts at +inf
    # (docs/coming-from-keras-and-lightning.md): these two record the difference.
    dict(name="k14_first_nan", patience=2, values=[NAN, 1.0, 0.5, 0.25], differs=True),
    dict(name="k15_first_inf", patience=1, values=[INF, INF, 1.0], differs=True),
]

KERAS_REDUCE_LR = [
    dict(name="r01_defaults", lr=0.5, values=[1.0] * 24),
    dict(name="r02_patience_2", lr=1.0, patience=2, factor=0.5,
         values=[1.0, 0.75, 0.75, 0.75, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25]),
    dict(name="r03_cooldown", lr=1.0, patience=1, factor=0.5, cooldown=2,
         values=[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5]),
    dict(name="r04_cooldown_improves", lr=1.0, patience=1, factor=0.5, cooldown=2,
         values=[1.0, 1.0, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25]),
    dict(name="r05_min_lr", lr=1.0, patience=1, factor=0.5, min_lr=0.3,
         values=[1.0] * 8),
    dict(name="r06_min_lr_float32", lr=0.25, patience=1, factor=0.5, min_lr=0.1,
         values=[1.0] * 8),
    dict(name="r07_min_delta_edge", lr=1.0, patience=1, factor=0.5, min_delta=0.25,
         values=[1.0, 0.75, 0.5, 0.375, 0.125, 0.125]),
    dict(name="r08_max_mode", mode="max", lr=1.0, patience=2, factor=0.5, min_delta=0.0,
         values=[0.5, 0.75, 0.75, 0.75, 0.875, 0.5, 0.5]),
    dict(name="r09_nan_mid_sequence", lr=1.0, patience=2, factor=0.5,
         values=[1.0, NAN, NAN, 0.5, NAN, NAN, NAN]),
    dict(name="r10_inf_mid_sequence", lr=1.0, patience=1, factor=0.5,
         values=[1.0, INF, 0.5, -INF, 0.25, 0.25]),
    dict(name="r11_factor_zero", lr=1.0, patience=1, factor=0.0, values=[1.0, 1.0, 1.0, 1.0]),
    dict(name="r12_patience_0", lr=1.0, patience=0, factor=0.5, values=[1.0, 1.0, 0.5, 0.5]),
]

KERAS_REDUCE_LR_ERRORS = [dict(factor=1.0), dict(factor=2.5)]

KERAS_TERMINATE_ON_NAN = [
    dict(name="t01_nan", values=[1.0, 0.5, NAN, 0.25]),
    dict(name="t02_inf", values=[1.0, INF, 0.25]),
    dict(name="t03_neg_inf", values=[1.0, -INF]),
    dict(name="t04_finite", values=[1.0, 1e38, -1e38, 0.0]),
]

LIGHTNING_SPIKE = [
    dict(name="s01_defaults", values=[1.0, 1.0, 1.0, 1.0, 3.5, 1.0, 2.0, 3.0, 3.0, 0.5]),
    dict(name="s02_rtol_edge", values=[1.0, 1.0, 2.9375, 3.0, 3.0625, 1.0]),
    dict(name="s03_nonfinite", values=[1.0, 1.0, NAN, 1.0, INF, -INF, 1.0]),
    dict(name="s04_nonfinite_allowed", finite_only=False, values=[1.0, 1.0, NAN, 1.0, INF, 1.0]),
    dict(name="s05_window_3", window=3,
         values=[1.0, 1.0, 1.0, 0.25, 0.25, 0.25, 0.875, 0.25, 1.0]),
    dict(name="s06_atol", atol=1.5, rtol=None, values=[1.0, 1.0, 2.25, 2.5, 2.75, 1.0]),
    dict(name="s07_atol_and_rtol", atol=0.5, rtol=0.25, values=[1.0, 1.0, 1.375, 1.625, 1.0]),
    dict(name="s08_max_mode", mode="max", values=[1.0, 1.0, -2.0, -1.5, 1.0, -4.0]),
    dict(name="s09_warmup_3", warmup=3, values=[1.0, 5.0, 1.0, 5.0, 1.0]),
    dict(name="s10_warmup_0", warmup=0, values=[5.0, 1.0, 1.0]),
    dict(name="s11_negative_loss", values=[-1.0, -1.0, -0.5, 2.0, -1.0]),
    dict(name="s12_improvement_never_spike", values=[10.0, 1.0, 8.0, 7.0, 6.0, 0.5]),
]

LIGHTNING_TIMER_DURATIONS = ["00:00:00:10", "01:02:03:04", "0:00:00:01", "123:23:59:59",
                             " 00:00:01:00 ", "00:00:00:00", "00:24:00:00", "00:00:60:00",
                             "00:00:00", "00:00:00:1", "-1:00:00:00", "00:00:00:0a", "",
                             "1.5:00:00:00", "00:00:00:10:00"]

# clock[0] is time.monotonic() at on_fit_start and on_train_start; clock[i + 1] after batch i.
# Best-k checkpoints. Each value is one save trigger at step i (Lightning's ModelCheckpoint:
# check_monitor_top_k, then _update_best_and_save); Keras' ModelCheckpoint(save_best_only) is
# one epoch each.
LIGHTNING_TOP_K = [
    dict(name="t01_top2_min", save_top_k=2, values=[1.0, 0.5, 0.75, 0.25, 0.875, 0.125]),
    dict(name="t02_ties_never_displace", save_top_k=2, values=[0.5, 0.5, 0.5, 0.25, 0.25, 0.5]),
    dict(name="t03_nan_ranks_worst", save_top_k=2, values=[NAN, 1.0, NAN, 0.5, NAN, 0.25]),
    dict(name="t04_nan_first_fills", save_top_k=3, values=[NAN, NAN, 1.0, 2.0, NAN, 0.5]),
    dict(name="t05_inf_as_numbers", save_top_k=2, values=[INF, 1.0, INF, -INF, 0.5, -INF]),
    dict(name="t06_inf_ties_nan", save_top_k=1, values=[INF, NAN, INF, 4.0]),
    dict(name="t07_max_mode", save_top_k=2, mode="max",
         values=[0.5, 0.75, 0.25, 0.875, NAN, 0.875, INF, -INF]),
    dict(name="t08_save_all", save_top_k=-1, values=[1.0, NAN, 0.5, 2.0]),
    dict(name="t09_top1", save_top_k=1, values=[1.0, 2.0, 0.5, 0.5, 0.75, 0.25]),
    dict(name="t10_worst_tie_oldest_goes", save_top_k=3,
         values=[0.5, 1.0, 1.0, 0.75, 1.0, 0.25, 0.125]),
    dict(name="t11_max_nan_first", save_top_k=2, mode="max", values=[NAN, -INF, 0.0, NAN, 1.0]),
]

# differs: Keras' best starts at None unless initial_value_threshold is given, so a first NaN is
# saved and then nothing ever beats it; runhooks (save_top_k=1) ranks NaN worst, as Lightning.
KERAS_SAVE_BEST_ONLY = [
    dict(name="kb01_min", values=[1.0, 0.5, 0.75, 0.25, 0.25, 0.125]),
    dict(name="kb02_threshold", initial_value_threshold=0.5, values=[1.0, 0.5, 0.75, 0.25, 0.375]),
    dict(name="kb03_threshold_nan", initial_value_threshold=1.0, values=[NAN, 2.0, 0.5, NAN, 0.25]),
    dict(name="kb04_max_threshold", mode="max", initial_value_threshold=0.5,
         values=[0.25, 0.5, 0.75, INF, 1.0]),
    dict(name="kb05_threshold_inf", initial_value_threshold=INF, values=[INF, 2.0, 2.0, 1.0]),
    dict(name="kb06_nan_first", values=[NAN, 1.0, 0.5], differs=True),
]

LIGHTNING_TIMER = [
    dict(name="m01_stops_after_duration", duration="00:00:00:10", offset=None,
         clock=[100.0, 103.0, 106.0, 109.0, 110.0, 113.0]),
    dict(name="m02_restored_continues", duration="00:00:00:10", offset=4.0,
         clock=[50.0, 53.0, 56.0, 59.0]),
    dict(name="m03_restored_exhausted", duration="00:00:00:10", offset=10.0,
         clock=[50.0, 51.0]),
    dict(name="m04_restored_past", duration="00:00:01:00", offset=75.5, clock=[0.0, 1.0]),
    dict(name="m05_just_below", duration="00:00:00:02", offset=None,
         clock=[0.0, 1.0, 1.5, 1.9990234375, 2.0]),
]


# ------------------------------------------------------------------------------------- Keras

class _KerasModel:
    """What Keras' callbacks read of a model: stop_training, and the optimizer."""

    def __init__(self, lr=None):
        self.stop_training = False
        if lr is not None:
            self.optimizer = keras.optimizers.SGD(learning_rate=lr)


def opt_float(x):
    return None if x is None else float(x)


def run_keras_early_stopping(spec):
    kwargs = {k: spec[k] for k in ("patience", "min_delta", "mode") if k in spec}
    cb = keras.callbacks.EarlyStopping(monitor="val_loss", **kwargs)
    model = _KerasModel()
    cb.set_model(model)
    cb.on_train_begin()
    stopped = None
    for epoch, value in enumerate(spec["values"]):
        cb.on_epoch_end(epoch, {"val_loss": value})
        if model.stop_training:
            stopped = epoch
            break
    return dict(stopped_epoch=stopped, best=opt_float(cb.best), best_epoch=cb.best_epoch,
                wait=cb.wait)


def run_keras_reduce_lr(spec):
    kwargs = {k: spec[k] for k in ("patience", "min_delta", "mode", "factor", "cooldown", "min_lr")
              if k in spec}
    kwargs.setdefault("mode", "min")
    cb = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", **kwargs)
    model = _KerasModel(spec["lr"])
    cb.set_model(model)
    cb.on_train_begin()
    lrs, waits, cooldowns = [], [], []
    for epoch, value in enumerate(spec["values"]):
        with contextlib.redirect_stdout(io.StringIO()):
            cb.on_epoch_end(epoch, {"val_loss": value})
        lrs.append(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)))
        waits.append(cb.wait)
        cooldowns.append(cb.cooldown_counter)
    # The options as Keras holds them (its defaults filled in).
    return dict(factor=cb.factor, patience=cb.patience, min_delta=abs(cb.min_delta),
                cooldown=cb.cooldown, min_lr=cb.min_lr, mode=kwargs["mode"],
                initial_lr=float(np.float32(spec["lr"])), lrs=lrs, waits=waits,
                cooldowns=cooldowns, best=opt_float(cb.best))


def run_keras_reduce_lr_error(spec):
    try:
        keras.callbacks.ReduceLROnPlateau(**spec)
    except ValueError as e:
        return dict(spec, error=str(e))
    raise AssertionError("ReduceLROnPlateau accepted %r" % spec)


def run_keras_save_best_only(spec):
    kwargs = {k: spec[k] for k in ("mode", "initial_value_threshold") if k in spec}
    kwargs.setdefault("mode", "min")
    saved = []

    class Model(_KerasModel):
        def save(self, filepath, overwrite=True):
            saved.append(int(os.path.basename(filepath).split("-")[1].split(".")[0]) - 1)

    with tempfile.TemporaryDirectory() as tmp:
        cb = keras.callbacks.ModelCheckpoint(os.path.join(tmp, "m-{epoch}.keras"),
                                             monitor="val_loss", save_best_only=True, **kwargs)
        cb.set_model(Model())
        cb.on_train_begin()
        for epoch, value in enumerate(spec["values"]):
            cb.on_epoch_end(epoch, {"val_loss": value})
    return dict(saved=saved, mode=kwargs["mode"],
                initial_value_threshold=spec.get("initial_value_threshold"))


def run_keras_terminate_on_nan(spec):
    cb = keras.callbacks.TerminateOnNaN()
    model = _KerasModel()
    cb.set_model(model)
    stopped = None
    for batch, value in enumerate(spec["values"]):
        with contextlib.redirect_stdout(io.StringIO()):
            cb.on_batch_end(batch, {"loss": value})
        if model.stop_training:
            stopped = batch
            break
    return dict(stopped_batch=stopped)


# --------------------------------------------------------------------------------- Lightning

class _Strategy:
    def reduce_boolean_decision(self, decision, all=True):
        return bool(decision)

    def broadcast(self, obj, src=0):
        return obj

    def barrier(self, *args, **kwargs):
        pass

    root_device = torch.device("cpu")


def run_lightning_early_stopping(spec):
    kwargs = {k: spec[k] for k in ("patience", "min_delta", "mode", "check_finite",
                                   "stopping_threshold", "divergence_threshold") if k in spec}
    cb = LEarlyStopping(monitor="val_loss", **kwargs)
    trainer = types.SimpleNamespace(fast_dev_run=False, strategy=_Strategy(), should_stop=False,
                                    current_epoch=0, callback_metrics={})
    stopped = None
    for i, value in enumerate(spec["values"]):
        trainer.current_epoch = i
        trainer.callback_metrics = {"val_loss": torch.tensor(value, dtype=torch.float64)}
        cb._run_early_stopping_check(trainer)
        if trainer.should_stop:
            stopped = i
            break
    return dict(stopped_index=stopped, reason=cb.stopping_reason.name,
                best=float(cb.best_score), wait_count=cb.wait_count,
                message=cb.stopping_reason_message or "",
                defaults=dict(patience=cb.patience, check_finite=cb.check_finite))


def run_lightning_top_k(spec):
    from lightning.pytorch.callbacks import ModelCheckpoint as LModelCheckpoint
    mode = spec.get("mode", "min")
    saved, removed, kept = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        cb = LModelCheckpoint(dirpath=tmp, monitor="val_loss", mode=mode,
                              save_top_k=spec["save_top_k"])
        trainer = types.SimpleNamespace(strategy=_Strategy(), ckpt_path=None, global_step=0)
        step = [0]
        cb._get_metric_interpolated_filepath_name = lambda *a, **k: "step=%d" % step[0]
        cb._save_checkpoint = lambda trainer, path: saved.append(int(path.split("=")[1]))
        cb._remove_checkpoint = lambda trainer, path: removed.append(int(path.split("=")[1]))
        cb._should_remove_checkpoint = lambda trainer, previous, current: previous != current
        for i, value in enumerate(spec["values"]):
            step[0] = i
            current = torch.tensor(value, dtype=torch.float64)
            if cb.check_monitor_top_k(trainer, current):
                cb._update_best_and_save(current, trainer, {"val_loss": current})
            kept.append(sorted(int(p.split("=")[1]) for p in cb.best_k_models))
    best = int(cb.best_model_path.split("=")[1]) if cb.best_model_path else None
    return dict(mode=mode, saved=saved, removed=removed, kept=kept[-1], kept_after=kept,
                best_index=best,
                best_score=None if cb.best_model_score is None else float(cb.best_model_score))


class _Fabric:
    global_rank = 0
    strategy = _Strategy()


def run_lightning_spike(spec):
    kwargs = {k: spec[k] for k in ("mode", "window", "warmup", "atol", "rtol", "finite_only")
              if k in spec}
    spikes = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The running mean in float64, as runhooks keeps it (torchmetrics' default is float32).
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            cb = fabric_spike.SpikeDetection(exclude_batches_path=tmp, **kwargs)
            for i, value in enumerate(spec["values"]):
                try:
                    cb.on_train_batch_end(_Fabric(), torch.tensor(value, dtype=torch.float64),
                                          None, i)
                except fabric_spike.TrainingSpikeException:
                    spikes.append(i)
            with open(os.path.join(tmp, "skip_batches.json")) if spikes else contextlib.nullcontext() as f:
                written = json.load(f) if spikes else []
        finally:
            torch.set_default_dtype(previous)
    last = cb.last_val.item() if isinstance(cb.last_val, torch.Tensor) else float(cb.last_val)
    return dict(spikes=spikes, bad_batches=list(cb.bad_batches), written=written,
                last_val=last, mode=cb.mode, warmup=cb.warmup, atol=cb.atol, rtol=cb.rtol,
                window=spec.get("window", 10), finite_only=cb.finite_only)


def run_lightning_timer_duration(text):
    try:
        t = LTimer(duration=text)
    except Exception as e:  # MisconfigurationException
        return dict(text=text, secs=None, error=str(e))
    return dict(text=text, secs=float(t._duration), error="")


def run_lightning_timer(spec):
    t = LTimer(duration=spec["duration"], interval="step", verbose=True)
    if spec["offset"] is not None:
        t.load_state_dict({"time_elapsed": {"train": spec["offset"]}})
    trainer = types.SimpleNamespace(strategy=_Strategy(), should_stop=False)
    clock = list(spec["clock"])
    now = {"t": clock[0]}
    infos = []
    with mock.patch.object(ltimer_module.time, "monotonic", lambda: now["t"]), \
            mock.patch.object(ltimer_module, "rank_zero_info", lambda m: infos.append(m)):
        t.on_fit_start(trainer)
        stop_index = -1 if trainer.should_stop else None
        elapsed_at_stop = t.time_elapsed() if trainer.should_stop else None
        if not trainer.should_stop:
            t.on_train_start(trainer, None)
            for i, c in enumerate(clock[1:]):
                now["t"] = c
                t.on_train_batch_end(trainer, None, None, None, i)
                if trainer.should_stop:
                    stop_index = i
                    elapsed_at_stop = t.time_elapsed()
                    break
    return dict(duration_secs=float(t._duration), stop_index=stop_index,
                elapsed_at_stop=elapsed_at_stop, messages=infos)


# ------------------------------------------------------------------------------- C++ emission

def cpp_str(s):
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append("\\x%02x" % ord(ch))
    return '"' + "".join(out) + '"'


def cpp_f64(x):
    x = float(x)
    if x != x:
        return "nan"
    if x == INF:
        return "inf"
    if x == -INF:
        return "-inf"
    return repr(x)


def opt_f64(x):
    return "std::nullopt" if x is None else "std::optional<double>(%s)" % cpp_f64(x)


def opt_i64(x):
    return "std::nullopt" if x is None else "std::optional<std::int64_t>(%d)" % x


class Emitter:
    def __init__(self):
        self.detail = []
        self.body = []

    def f64s(self, owner, field, xs):
        name = "%s_%s" % (owner, field)
        self.detail.append("inline constexpr double %s[] = {%s};" % (
            name, ", ".join(cpp_f64(x) for x in xs) if xs else "0.0"))
        return "std::span<const double>(detail::%s, %d)" % (name, len(xs))

    def i64s(self, owner, field, xs):
        name = "%s_%s" % (owner, field)
        self.detail.append("inline constexpr std::int64_t %s[] = {%s};" % (
            name, ", ".join(str(int(x)) for x in xs) if xs else "0"))
        return "std::span<const std::int64_t>(detail::%s, %d)" % (name, len(xs))

    def array(self, type_name, name, items):
        self.body.append("inline constexpr %s %s[] = {\n    %s,\n};\n" % (
            type_name, name, ",\n    ".join(items)))


HEADER = """\
// Generated by tools/keras_lightning_reference/generate.py from Keras {keras} and Lightning
// {lightning} (torch {torch}); do not edit. Regenerate with:
//   {command}
// The same data, for humans, is in the .json files beside this one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace runhooks_test::keras_lightning {{

inline constexpr std::string_view keras_version = "{keras}";
inline constexpr std::string_view lightning_version = "{lightning}";
inline constexpr double nan = __builtin_nan("");
inline constexpr double inf = __builtin_inf();

// lightning.pytorch.callbacks.early_stopping.EarlyStoppingReason
enum class LightningReason {{ NOT_STOPPED, STOPPING_THRESHOLD, DIVERGENCE_THRESHOLD, PATIENCE_EXHAUSTED, NON_FINITE_METRIC }};

// Lightning's EarlyStopping(monitor="val_loss", ...) checked once per value; stopped_index: the
// value at which trainer.should_stop became true (the sequence ends there). best: best_score.
struct LightningEarlyStopping {{
  std::string_view name;
  bool max_mode;
  double min_delta;
  std::int64_t patience;
  bool check_finite;
  std::optional<double> stopping_threshold;
  std::optional<double> divergence_threshold;
  std::span<const double> values;
  std::optional<std::int64_t> stopped_index;
  LightningReason reason;
  double best;
  std::int64_t wait_count;
  std::string_view message;
}};

// keras.callbacks.EarlyStopping: as tests/fixtures/tf_reference's early_stopping_fixtures.
// differs: Keras >= 3.7 takes a first NaN or +inf as the best; runhooks does not (documented).
struct KerasEarlyStopping {{
  std::string_view name;
  bool max_mode;
  double min_delta;
  std::int64_t patience;
  std::span<const double> values;
  std::optional<std::int64_t> stopped_epoch;
  std::optional<double> best;
  std::optional<std::int64_t> best_epoch;
  std::int64_t wait;
  bool differs;
}};

// keras.callbacks.ReduceLROnPlateau(monitor="val_loss", ...) on a keras SGD optimizer whose
// learning rate is a float32 variable: lrs[i], waits[i], cooldowns[i] after epoch i.
struct KerasReduceLr {{
  std::string_view name;
  bool max_mode;
  double factor;
  std::int64_t patience;
  double min_delta;
  std::int64_t cooldown;
  double min_lr;
  double initial_lr;
  std::span<const double> values;
  std::span<const double> lrs;
  std::span<const std::int64_t> waits;
  std::span<const std::int64_t> cooldowns;
  std::optional<double> best;
}};

struct KerasReduceLrError {{
  double factor;
  std::string_view message;
}};

// keras.callbacks.TerminateOnNaN: the batch whose loss set model.stop_training.
struct KerasTerminateOnNan {{
  std::string_view name;
  std::span<const double> values;
  std::optional<std::int64_t> stopped_batch;
}};

// lightning.fabric.utilities.spike.SpikeDetection (the running mean in float64): spikes, the
// batch indices at which it raised TrainingSpikeException (the sequence goes on after each);
// bad_batches, what it recorded (and wrote to skip_batches.json).
struct LightningSpike {{
  std::string_view name;
  bool max_mode;
  std::int64_t window;
  std::int64_t warmup;
  std::optional<double> atol;
  std::optional<double> rtol;
  bool finite_only;
  std::span<const double> values;
  std::span<const std::int64_t> spikes;
  std::span<const std::int64_t> bad_batches;
  double last_val;
}};

// lightning.pytorch.callbacks.ModelCheckpoint(monitor="val_loss", mode, save_top_k): value i is
// the save trigger at step i, decided by check_monitor_top_k and _update_best_and_save (the file
// writes stubbed). saved: the steps it saved; removed: those it deleted after a later save; kept:
// best_k_models at the end; best: best_model_path's step and best_model_score (NaN stored as the
// worst infinity, as Lightning does).
struct LightningTopK {{
  std::string_view name;
  bool max_mode;
  std::int64_t save_top_k;
  std::span<const double> values;
  std::span<const std::int64_t> saved;
  std::span<const std::int64_t> removed;
  std::span<const std::int64_t> kept;
  std::optional<std::int64_t> best_index;
  std::optional<double> best_score;
}};

// keras.callbacks.ModelCheckpoint(save_best_only=True, mode, initial_value_threshold): the epochs
// at which it saved. differs: a case where runhooks deliberately differs (documented).
struct KerasSaveBestOnly {{
  std::string_view name;
  bool max_mode;
  std::optional<double> initial_value_threshold;
  std::span<const double> values;
  std::span<const std::int64_t> saved;
  bool differs;
}};

// Lightning's Timer(duration="DD:HH:MM:SS"): the seconds, or the MisconfigurationException.
struct LightningTimerDuration {{
  std::string_view text;
  std::optional<double> secs;
  std::string_view error;
}};

// Lightning's Timer(duration, interval="step") with time.monotonic mocked: clock[0] at
// on_fit_start and on_train_start, clock[i + 1] at on_train_batch_end of batch i. offset: the
// elapsed time restored by load_state_dict. stop_index: -1 at on_fit_start, i after batch i.
struct LightningTimer {{
  std::string_view name;
  double duration_secs;
  std::optional<double> offset;
  std::span<const double> clock;
  std::optional<std::int64_t> stop_index;
  std::optional<double> elapsed_at_stop;
  std::string_view message;
}};
"""


def emit_header(versions, groups):
    e = Emitter()
    items = []
    for s in groups["lightning_early_stopping"]:
        n = s["name"]
        items.append("{%s, %s, %s, %d, %s, %s, %s, %s, %s, LightningReason::%s, %s, %d, %s}" % (
            cpp_str(n), "true" if s.get("mode") == "max" else "false",
            cpp_f64(s.get("min_delta", 0.0)), s["patience"],
            "true" if s["defaults"]["check_finite"] else "false",
            opt_f64(s.get("stopping_threshold")), opt_f64(s.get("divergence_threshold")),
            e.f64s(n, "values", s["values"]), opt_i64(s["stopped_index"]), s["reason"],
            cpp_f64(s["best"]), s["wait_count"], cpp_str(s["message"])))
    e.array("LightningEarlyStopping", "lightning_early_stopping", items)

    items = []
    for s in groups["keras_early_stopping"]:
        n = s["name"]
        items.append("{%s, %s, %s, %d, %s, %s, %s, %s, %d, %s}" % (
            cpp_str(n), "true" if s.get("mode") == "max" else "false",
            cpp_f64(s.get("min_delta", 0.0)), s["patience"], e.f64s(n, "values", s["values"]),
            opt_i64(s["stopped_epoch"]), opt_f64(s["best"]), opt_i64(s["best_epoch"]), s["wait"],
            "true" if s.get("differs") else "false"))
    e.array("KerasEarlyStopping", "keras_early_stopping", items)

    items = []
    for s in groups["keras_reduce_lr"]:
        n = s["name"]
        items.append("{%s, %s, %s, %d, %s, %d, %s, %s, %s, %s, %s, %s, %s}" % (
            cpp_str(n), "true" if s["mode"] == "max" else "false", cpp_f64(s["factor"]),
            s["patience"], cpp_f64(s["min_delta"]), s["cooldown"], cpp_f64(s["min_lr"]),
            cpp_f64(s["initial_lr"]), e.f64s(n, "values", s["values"]), e.f64s(n, "lrs", s["lrs"]),
            e.i64s(n, "waits", s["waits"]), e.i64s(n, "cooldowns", s["cooldowns"]),
            opt_f64(s["best"])))
    e.array("KerasReduceLr", "keras_reduce_lr", items)
    e.array("KerasReduceLrError", "keras_reduce_lr_errors",
            ["{%s, %s}" % (cpp_f64(s["factor"]), cpp_str(s["error"]))
             for s in groups["keras_reduce_lr_errors"]])

    items = []
    for s in groups["keras_terminate_on_nan"]:
        n = s["name"]
        items.append("{%s, %s, %s}" % (cpp_str(n), e.f64s(n, "values", s["values"]),
                                       opt_i64(s["stopped_batch"])))
    e.array("KerasTerminateOnNan", "keras_terminate_on_nan", items)

    items = []
    for s in groups["lightning_spike"]:
        n = s["name"]
        items.append("{%s, %s, %d, %d, %s, %s, %s, %s, %s, %s, %s}" % (
            cpp_str(n), "true" if s["mode"] == "max" else "false", s["window"], s["warmup"],
            opt_f64(s["atol"]), opt_f64(s["rtol"]), "true" if s["finite_only"] else "false",
            e.f64s(n, "values", s["values"]), e.i64s(n, "spikes", s["spikes"]),
            e.i64s(n, "bad_batches", s["bad_batches"]), cpp_f64(s["last_val"])))
    e.array("LightningSpike", "lightning_spike", items)

    items = []
    for s in groups["lightning_top_k"]:
        n = s["name"]
        items.append("{%s, %s, %d, %s, %s, %s, %s, %s, %s}" % (
            cpp_str(n), "true" if s["mode"] == "max" else "false", s["save_top_k"],
            e.f64s(n, "values", s["values"]), e.i64s(n, "saved", s["saved"]),
            e.i64s(n, "removed", s["removed"]), e.i64s(n, "kept", s["kept"]),
            opt_i64(s["best_index"]), opt_f64(s["best_score"])))
    e.array("LightningTopK", "lightning_top_k", items)

    items = []
    for s in groups["keras_save_best_only"]:
        n = s["name"]
        items.append("{%s, %s, %s, %s, %s, %s}" % (
            cpp_str(n), "true" if s["mode"] == "max" else "false",
            opt_f64(s["initial_value_threshold"]), e.f64s(n, "values", s["values"]),
            e.i64s(n, "saved", s["saved"]), "true" if s.get("differs") else "false"))
    e.array("KerasSaveBestOnly", "keras_save_best_only", items)

    e.array("LightningTimerDuration", "lightning_timer_durations",
            ["{%s, %s, %s}" % (cpp_str(s["text"]), opt_f64(s["secs"]), cpp_str(s["error"]))
             for s in groups["lightning_timer_durations"]])

    items = []
    for s in groups["lightning_timer"]:
        n = s["name"]
        items.append("{%s, %s, %s, %s, %s, %s, %s}" % (
            cpp_str(n), cpp_f64(s["duration_secs"]), opt_f64(s["offset"]),
            e.f64s(n, "clock", s["clock"]), opt_i64(s["stop_index"]),
            opt_f64(s["elapsed_at_stop"]), cpp_str(s["messages"][0] if s["messages"] else "")))
    e.array("LightningTimer", "lightning_timer", items)

    text = HEADER.format(command=COMMAND, **versions)
    text += "\nnamespace detail {\n" + "\n".join(e.detail) + "\n}  // namespace detail\n\n"
    text += "\n".join(e.body)
    text += "}  // namespace runhooks_test::keras_lightning\n"
    return text


def json_safe(x):
    if isinstance(x, float):
        if x != x:
            return "nan"
        if x in (INF, -INF):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def generate():
    versions = {"keras": keras.__version__, "lightning": lightning.__version__,
                "torch": torch.__version__}
    for k, v in EXPECTED.items():
        if versions[k] != v:
            sys.exit("generate.py: needs %s %s, found %s" % (k, v, versions[k]))
    if keras.backend.backend() != "torch":
        sys.exit("generate.py: run with KERAS_BACKEND=torch (found %s)" % keras.backend.backend())
    groups = {
        "lightning_early_stopping": [dict(s, **run_lightning_early_stopping(s))
                                     for s in LIGHTNING_EARLY_STOPPING],
        "keras_early_stopping": [dict(s, **run_keras_early_stopping(s))
                                 for s in KERAS_EARLY_STOPPING],
        "keras_reduce_lr": [dict(s, **run_keras_reduce_lr(s)) for s in KERAS_REDUCE_LR],
        "keras_reduce_lr_errors": [run_keras_reduce_lr_error(s) for s in KERAS_REDUCE_LR_ERRORS],
        "keras_terminate_on_nan": [dict(s, **run_keras_terminate_on_nan(s))
                                   for s in KERAS_TERMINATE_ON_NAN],
        "lightning_spike": [dict(s, **run_lightning_spike(s)) for s in LIGHTNING_SPIKE],
        "lightning_timer_durations": [run_lightning_timer_duration(t)
                                      for t in LIGHTNING_TIMER_DURATIONS],
        "lightning_timer": [dict(s, **run_lightning_timer(s)) for s in LIGHTNING_TIMER],
        "lightning_top_k": [dict(s, **run_lightning_top_k(s)) for s in LIGHTNING_TOP_K],
        "keras_save_best_only": [dict(s, **run_keras_save_best_only(s))
                                 for s in KERAS_SAVE_BEST_ONLY],
    }
    files = {}
    for name, group in groups.items():
        files[name + ".json"] = json.dumps(
            {"generated_by": COMMAND, "versions": versions, "scenarios": json_safe(group)},
            indent=2, sort_keys=True) + "\n"
    files["fixtures.hpp"] = emit_header(versions, groups)
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a fixture would change; write nothing")
    args = parser.parse_args()
    files = generate()
    changed = []
    for name, text in sorted(files.items()):
        path = os.path.join(OUT_DIR, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            changed.append(name)
            if not args.check:
                os.makedirs(OUT_DIR, exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if args.check and changed:
        print("would change: " + ", ".join(changed))
        return 1
    print(("unchanged" if not changed else "wrote " + ", ".join(changed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
