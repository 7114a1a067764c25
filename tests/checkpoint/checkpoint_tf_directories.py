#!/usr/bin/env python3
"""runhooks opens, resumes and prunes checkpoint directories that real TensorFlow 2.21 wrote.

Usage: checkpoint_tf_directories.py CHECKPOINT_HELPER

Issue 17, "Real TensorFlow directories". Each scenario makes a directory with TensorFlow, puts
decoy files beside TensorFlow's (names that merely start with a checkpoint prefix, an unnamed
TensorFlow-looking file, a subdirectory) and bait files outside it, then runs
tests/checkpoint/checkpoint_helper (basename model.ckpt, save_steps 3, max_to_keep 3,
--start-fresh for ChiefSessionOptions::start_fresh):
  A. plain start: the latest checkpoint is TensorFlow's, which the demo backend cannot read: the
     helper must fail (exit 3) with an error naming that checkpoint and start_fresh, and leave
     every file as it was;
  B. --start-fresh --steps 3: saves 0 and 3 beside TensorFlow's; retention drops the oldest;
  C. --steps 12: resumes runhooks' model.ckpt-3 and saves up to 12; retention drops the rest;
  D. (Saver and CheckpointManager directories) tf.compat.v1.train.update_checkpoint_state rolls
     the state back to model.ckpt-9, as a TensorFlow tool writes it: absolute paths, no runhooks
     comment lines; --steps 15 resumes 9 (the restored checkpoint must survive its re-save).
The oracle is TensorFlow itself: the same directory, made again elsewhere, gets the same saves
(the steps the helper reported) from the TensorFlow object that wrote it, resumed as TensorFlow
resumes it (Saver.recover_last_checkpoints of the state, as SessionManager does after a restore;
a CheckpointManager re-opened on the directory). After B, C and D:
  - of the files TensorFlow wrote and the decoys, exactly those TensorFlow kept are kept, each
    unchanged (content, mtime, inode); the state lists the checkpoints TensorFlow's does;
  - runhooks' own checkpoints: a listed one has its .arrays, a dropped one has none left, and no
    staging file remains; no other new file than the state, the lock and event files;
  - no file outside the directory is created, changed or removed;
  - TensorFlow reads the state: tf.train.get_checkpoint_state names runhooks' newest checkpoint
    and the list above. tf.train.latest_checkpoint returns None: it requires <prefix>.index (V2)
    or a file <prefix> (V1), and runhooks' demo backend writes <prefix>.arrays, a format
    TensorFlow cannot restore (not expected to).
Scenario "copied" is a Saver directory copied elsewhere (the state names the original's absolute
paths): runhooks must not delete the original's files, which TensorFlow's Saver would
(a deliberate difference: nothing outside the directory), nor the copies, which no entry names.

Exits 77 (Meson's SKIP) when TensorFlow cannot be imported: the default test run never needs it.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MAX_TO_KEEP = 3  # the helper's CheckpointSaverHook, and every TensorFlow object below

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)
    return condition


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def snapshot(root, skip=None, with_ctime=False):
    """Every file and directory under root (not under skip): relative path -> identity."""
    result = {}
    for here, dirs, files in os.walk(root):
        if skip is not None and os.path.abspath(here) == os.path.abspath(skip):
            dirs[:] = []
            result[os.path.relpath(here, root) + "/"] = "dir"
            continue
        for name in dirs:
            result[os.path.relpath(os.path.join(here, name), root) + "/"] = "dir"
        for name in files:
            path = os.path.join(here, name)
            st = os.lstat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            ident = (digest, st.st_size, st.st_mtime_ns, st.st_ino)
            result[os.path.relpath(path, root)] = ident + ((st.st_ctime_ns,) if with_ctime else ())
    return result


# ---- the directories TensorFlow writes ------------------------------------------------------

def saver_dir(tf, directory, global_steps):
    """tf.compat.v1.train.Saver(max_to_keep=3), default absolute paths; global_steps None: one
    save without global_step (the un-stepped prefix model.ckpt)."""
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("v", initializer=1.0)
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(max_to_keep=MAX_TO_KEEP)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = os.path.join(directory, "model.ckpt")
            if global_steps is None:
                saver.save(sess, prefix)
            for step in global_steps or ():
                saver.save(sess, prefix, global_step=step)


def manager_dir(tf, directory):
    """tf.train.CheckpointManager(max_to_keep=3): ckpt-1 .. ckpt-4, relative paths, its own
    timestamps and last_preserved_timestamp; it deleted ckpt-1 itself."""
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), directory,
                                         max_to_keep=MAX_TO_KEEP)
    for _ in range(4):
        manager.save()


DECOYS = {
    # names that start with a checkpoint's prefix but are no file of it; a TensorFlow-looking
    # file that no entry names; a subdirectory named like a checkpoint's file
    "saver": ["model.ckpt.backup", "model.ckpt-notes.txt", "model.ckpt-20.index.bak",
              "model.ckpt-30.data-00000-of-00001.orig", "model.ckpt-40.meta~",
              "model.ckpt-0.arrays.bak", "model.ckpt-33.index", "model.ckpt-3x.arrays",
              "model.ckpt-20.index.d/keep"],
    "unstepped": ["model.ckpt.backup", "model.ckpt-notes.txt", "model.ckpt.index.bak",
                  "model.ckpt.data-00000-of-00001.orig", "model.ckpt.meta~",
                  "model.ckpt-0.arrays.bak", "model.ckpt-33.index"],
    "manager": ["ckpt-1.index.bak", "ckpt-2.index.bak", "ckpt-10.index", "ckpt.backup",
                "ckpt-3.data-00000-of-00001.orig", "model.ckpt.backup", "model.ckpt-notes.txt"],
}


def make_directory(tf, kind, directory):
    if kind in ("saver", "copied"):
        saver_dir(tf, directory, [10, 20, 30, 40])
    elif kind == "unstepped":
        saver_dir(tf, directory, None)
    else:
        manager_dir(tf, directory)
    for name in DECOYS["saver" if kind == "copied" else kind]:
        write(os.path.join(directory, name), "decoy " + name + "\n")


# ---- the oracle: TensorFlow resumes the directory and makes the same saves ------------------

def oracle_saves(tf, kind, directory, steps):
    """Makes the saves `steps` in `directory` as TensorFlow would, resuming its state; returns
    the map from the oracle's checkpoint names to runhooks' (the same but for the manager)."""
    if kind == "manager":
        # Re-opened on the directory, a CheckpointManager recovers its list from the state file.
        # A prefix of its own keeps the oracle's saves apart from ckpt-N.
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), directory,
                                             max_to_keep=MAX_TO_KEEP, checkpoint_name="oracle")
        for step in steps:
            manager.save(checkpoint_number=step)
        return {"oracle-%d" % s: "model.ckpt-%d" % s for s in steps}
    state = tf.train.get_checkpoint_state(directory)
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("v", initializer=1.0)
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(max_to_keep=MAX_TO_KEEP)
        saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for step in steps:
                saver.save(sess, os.path.join(directory, "model.ckpt"), global_step=step)
    return {}


def listed_names(tf, directory, rename=None):
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return None
    names = []
    for path in state.all_model_checkpoint_paths:
        # TensorFlow joins relative entries to the directory; an entry naming another directory
        # (the copied scenario) stays as written.
        name = os.path.basename(path) if os.path.dirname(path) == directory else path
        names.append((rename or {}).get(name, name))
    return names


# ---- one scenario ---------------------------------------------------------------------------

def run_helper(helper, args):
    result = subprocess.run([helper] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=120, check=False)
    return result.returncode, result.stdout.splitlines()


def scenario(tf, helper, root, kind):
    print("== %s" % kind, flush=True)
    ours = os.path.join(root, kind)
    oracle = os.path.join(root, kind + "-oracle")
    if kind == "copied":
        # No oracle: TensorFlow's Saver would delete the original's files through the absolute
        # paths; runhooks must not.
        original = os.path.join(root, "copied-original")
        make_directory(tf, kind, original)
        original_before = snapshot(original)
        shutil.copytree(original, ours)
    else:
        make_directory(tf, kind, ours)
        make_directory(tf, kind, oracle)
    original_files = snapshot(ours)
    tf_latest = tf.train.get_checkpoint_state(ours).model_checkpoint_path
    saved_by_runhooks = []

    def helper_run(phase, args):
        before_outside = snapshot(root, skip=ours, with_ctime=True)
        code, lines = run_helper(helper, ["--checkpoint-dir", ours] + args)
        after_outside = snapshot(root, skip=ours, with_ctime=True)
        changed = sorted(k for k in set(before_outside) | set(after_outside)
                         if before_outside.get(k) != after_outside.get(k))
        check(not changed, "%s %s: no file outside %s created, changed or removed %r"
              % (kind, phase, ours, changed))
        return code, lines

    # A. The latest checkpoint is TensorFlow's: a plain start must refuse it, naming it.
    code, lines = helper_run("A", ["--steps", "12"])
    error = next((line for line in lines if line.startswith("error: ")), "")
    print("     helper: %r" % lines)
    check(code == 3 and ("'%s'" % tf_latest) in error and "start_fresh" in error
          and not any(line.startswith("saved") for line in lines),
          "%s A: a plain start fails naming TensorFlow's latest checkpoint %s and start_fresh"
          % (kind, tf_latest))
    now = snapshot(ours)
    extra = sorted(set(now) - set(original_files))
    check(all(now.get(k) == v for k, v in original_files.items()),
          "%s A: every file is as TensorFlow left it" % kind)
    check(all(n.startswith("events.out.tfevents.") or n == ".runhooks-lock" for n in extra),
          "%s A: nothing new but the lock and event files %r" % (kind, extra))

    # B and C, each against the oracle.
    phases = [("B", 0, ["--start-fresh", "--steps", "3"]), ("C", 3, ["--steps", "12"])]
    if kind in ("saver", "manager"):
        phases.append(("D", 9, ["--steps", "15"]))
    for phase, expected_resume, args in phases:
        if phase == "D":
            # A TensorFlow tool rolls the directory back to model.ckpt-9: the state it writes has
            # absolute paths and no runhooks comment lines. runhooks must see its own checkpoints
            # in them (one slot each, the restored one kept while it re-saves step 9).
            for directory, name in ((ours, "model.ckpt"),
                                    (oracle, "oracle" if kind == "manager" else "model.ckpt")):
                tf.compat.v1.train.update_checkpoint_state(
                    directory, os.path.join(directory, name + "-9"),
                    [os.path.join(directory, name + "-%d" % s) for s in (6, 9)])
        code, lines = helper_run(phase, args)
        print("     helper: %r" % lines)
        steps = [int(line.split()[1]) for line in lines if line.startswith("saved ")]
        saved_by_runhooks += steps
        check(code == 0 and ("resumed %d" % expected_resume) in lines and "finished %s" % args[-1]
              in lines, "%s %s: the helper resumes at %d and finishes at step %s"
              % (kind, phase, expected_resume, args[-1]))
        now = snapshot(ours)
        kept = sorted(k for k in original_files if k in now)
        listed = listed_names(tf, ours)
        if kind == "copied":
            # Every copy stays (no entry names it); the list drops the oldest entries by the rule.
            kept_by_tf = sorted(original_files)
            listed_by_tf = ([os.path.join(original, "model.ckpt-40"), "model.ckpt-0", "model.ckpt-3"]
                            if phase == "B" else ["model.ckpt-6", "model.ckpt-9", "model.ckpt-12"])
        else:
            rename = oracle_saves(tf, kind, oracle, steps)
            theirs = snapshot(oracle)
            kept_by_tf = sorted(k for k in original_files if k in theirs)
            listed_by_tf = listed_names(tf, oracle, rename)
        check(kept == kept_by_tf, "%s %s: of TensorFlow's files and the decoys, runhooks keeps "
              "those TensorFlow keeps: gone %r, TensorFlow removes %r"
              % (kind, phase, sorted(set(original_files) - set(kept)),
                 sorted(set(original_files) - set(kept_by_tf))))
        changed = [k for k in kept if k != "checkpoint" and now[k] != original_files[k]]
        check(not changed, "%s %s: each kept file unchanged (the state file aside) %r"
              % (kind, phase, changed))
        check(listed == listed_by_tf, "%s %s: the state lists %r, TensorFlow's %r"
              % (kind, phase, listed, listed_by_tf))

        own = {"model.ckpt-%d.arrays" % s: "model.ckpt-%d" % s for s in saved_by_runhooks}
        wrong = sorted(name for name, prefix in own.items()
                       if (name in now) != (prefix in (listed or [])))
        check(not wrong, "%s %s: a listed runhooks checkpoint has its .arrays, a dropped one none "
              "(wrong: %r)" % (kind, phase, wrong))
        new = sorted(k for k in set(now) - set(original_files) - set(own)
                     if not k.startswith("events.out.tfevents.") and k != ".runhooks-lock")
        check(not new, "%s %s: no other new file (staging, ...) %r" % (kind, phase, new))

        state = tf.train.get_checkpoint_state(ours)
        newest = os.path.join(ours, "model.ckpt-%s" % args[-1])
        check(state is not None and state.model_checkpoint_path == newest,
              "%s %s: tf.train.get_checkpoint_state names runhooks' newest %s"
              % (kind, phase, newest))
        check(tf.train.latest_checkpoint(ours) is None,
              "%s %s: tf.train.latest_checkpoint is None (no %s.index: a .arrays checkpoint is "
              "not TensorFlow's format)" % (kind, phase, newest))
    if kind == "copied":
        check(snapshot(original) == original_before, "copied: the original directory is untouched")


def main():
    helper = os.path.abspath(sys.argv[1])
    started = time.monotonic()
    try:
        import tensorflow as tf
    except ImportError:
        print("SKIP: TensorFlow is not installed (pip install -r tools/tf_reference/requirements.txt)")
        return 77
    tf.get_logger().setLevel("CRITICAL")  # latest_checkpoint logs "Couldn't match files"
    print("TensorFlow %s imported in %.1f s" % (tf.__version__, time.monotonic() - started))
    if not tf.__version__.startswith("2.21."):
        print("note: written against TensorFlow 2.21, running %s" % tf.__version__)
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.realpath(tmp)
        # Bait outside every checkpoint directory, named like checkpoint files.
        for name in ("model.ckpt", "model.ckpt-40.index", "model.ckpt.backup", "checkpoint",
                     "ckpt-4.index", "elsewhere/model.ckpt-3.arrays"):
            write(os.path.join(root, name), "outside " + name + "\n")
        for kind in ("saver", "unstepped", "manager", "copied"):
            scenario(tf, helper, root, kind)
    print("%d failure(s), %.1f s" % (len(failures), time.monotonic() - started))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
