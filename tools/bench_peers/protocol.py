"""The worker side of `./dev bench-peers` (tools/bench_peers/run.py drives the workers).

A worker holds training loops, each set up once and then run a few steps at a time when the
driver says so; the driver interleaves the loops of every worker in rounds. The protocol is
bench/peers/libtorch_peers.cpp's, one command per line on stdin and one reply per line:

  version                          `version NAME=VERSION ...`: the frameworks and their versions
  setup CONFIG KIND key=value...   build the loop, run `warmup` steps untimed; `ok`
  run CONFIG N                     run N steps; `ran T d1 ... dK background=B cpu=C`: seconds
                                   in all (wall clock), the steps' own durations when the loop
                                   can time each (K = N; none for a loop timed per epoch),
                                   seconds of background work waited for afterwards, untimed (0
                                   here), and the process's CPU seconds over the N steps (every
                                   thread)
  finish CONFIG                    close the loop; `ok`
  quit
An error is the reply `error CONFIG: TEXT`; the traceback goes to stderr (the driver's log).

Everything the frameworks print on stdout (Keras' and Lightning's progress bars) goes to
/dev/null: the replies use a duplicate of the original stdout.
"""

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

# One thread everywhere, before any framework is imported (OpenMP, MKL, TensorFlow).
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
              "TF_NUM_INTEROP_THREADS"):
    os.environ[_name] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"


@dataclass
class Settings:
    kind: str
    data: str = ""
    dir: str = ""
    warmup: int = 0
    save_every: int = 500
    summary_every: int = 100
    last_step: int = 0


def parse_settings(words):
    if not words:
        raise ValueError("setup needs a kind")
    s = Settings(kind=words[0])
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or key not in Settings.__dataclass_fields__ or key == "kind":
            raise ValueError(f"unknown setting '{word}'")
        setattr(s, key, value if key in ("data", "dir") else int(value))
    if not s.dir:
        raise ValueError("setup needs dir=PATH")
    return s


def serve(make_loop, versions):
    """Answers the driver's commands until `quit` or end of input. make_loop(config, settings)
    returns an object with run(n) -> (stamps, cpu): stamps the wall-clock times [start, after
    step 1, ..., after step n] (or [start, end] when only the total is timed), cpu the process's
    CPU seconds over those steps; and finish(). It has already run settings.warmup steps.
    versions() is the reply to `version`: `NAME=VERSION ...` of the frameworks loaded."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    loops = {}
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        command, config = words[0], (words[1] if len(words) > 1 else "")
        if command == "quit":
            break
        try:
            if command == "version":
                reply = "version " + versions()
            elif command == "setup":
                loops.pop(config, None)
                loops[config] = make_loop(config, parse_settings(words[2:]))
                reply = "ok"
            elif command == "run":
                stamps, cpu = loops[config].run(int(words[2]))
                steps = [] if len(stamps) <= 2 else [
                    f"{b - a:.9f}" for a, b in zip(stamps, stamps[1:])]
                reply = " ".join(["ran", f"{stamps[-1] - stamps[0]:.9f}", *steps, "background=0",
                                  f"cpu={cpu:.9f}"])
            elif command == "finish":
                loops.pop(config).finish()
                reply = "ok"
            else:
                raise ValueError(f"unknown command '{command}'")
        except Exception as e:  # reported to the driver, which skips this loop
            traceback.print_exc()
            message = f"{type(e).__name__}: {e}".replace("\n", " ")
            reply = f"error {config}: {message}"
        replies.write(reply + "\n")


def timed_steps(step, n):
    """Runs step() n times: ([start, after step 1, ..., after step n], CPU seconds)."""
    cpu = time.process_time()
    stamps = [time.perf_counter()]
    for _ in range(n):
        step()
        stamps.append(time.perf_counter())
    return stamps, time.process_time() - cpu


class Gate:
    """Runs fit(gate) on its own thread and lets it take a given number of steps (or epochs) at
    a time, so that one long fit() serves every round, in its steady state. The framework's
    callback calls gate.tick() after each step (or epoch) and asks the framework to stop when it
    returns True. tick() costs a clock read, an append and a compare; it blocks only when the
    round's steps are done, until the driver's next `run` or `finish`. Only one of the two threads
    runs at a time."""

    def __init__(self, fit, warmup):
        self._cv = threading.Condition()
        self._left = warmup
        self._stamps = []
        self._cpu = [0.0, 0.0]
        self._stop = False
        self._paused = False
        self._ended = False
        self._error = None
        self._thread = threading.Thread(target=self._fit, args=(fit,), name="fit", daemon=True)
        self._thread.start()
        self._wait()

    def tick(self):
        if self._stop:
            return True
        self._stamps.append(time.perf_counter())
        self._left -= 1
        if self._left > 0:
            return False
        self._cpu[1] = time.process_time()
        with self._cv:
            self._paused = True
            self._cv.notify_all()
            while self._paused:
                self._cv.wait()
        self._cpu[0] = time.process_time()
        self._stamps = [time.perf_counter()]
        return self._stop

    def run(self, ticks):
        with self._cv:
            self._left = ticks
            self._paused = False
            self._cv.notify_all()
        self._wait()
        return self._stamps, self._cpu[1] - self._cpu[0]

    def finish(self):
        with self._cv:
            self._stop = True
            self._paused = False
            self._cv.notify_all()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"fit failed: {self._error!r}") from self._error

    def _wait(self):
        with self._cv:
            while not self._paused and not self._ended:
                self._cv.wait()
        if self._error is not None:
            raise RuntimeError(f"fit failed: {self._error!r}") from self._error
        if self._ended:
            raise RuntimeError("fit ended before its last round")

    def _fit(self, fit):
        try:
            fit(self)
        except BaseException as e:  # reported by the next run() or finish()
            traceback.print_exc()
            self._error = e
        finally:
            with self._cv:
                self._ended = True
                self._cv.notify_all()
