#!/usr/bin/env python3
"""TensorFlow reads runhooks' checkpoint state file, and runhooks reads TensorFlow's.

Usage: checkpoint_tf_interop.py CHECKPOINT_HELPER

1. tests/checkpoint/checkpoint_helper trains 10 steps with save_steps 2 and max_to_keep 3 into a
   temporary directory; tf.train.get_checkpoint_state() must read its state file: the latest
   checkpoint model.ckpt-10, the list model.ckpt-6, -8, -10 (absolute, as TensorFlow joins
   them), three timestamps, oldest first.
2. TensorFlow's own Saver saves a variable at steps 1..4 (max_to_keep 2); the helper's
   --print-state must read the same state and find the latest checkpoint's files.

Exits 77 (Meson's SKIP) when TensorFlow cannot be imported: the default test run never needs it.
"""

import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    helper = sys.argv[1]
    try:
        import tensorflow as tf  # noqa: F401
    except ImportError:
        print("SKIP: TensorFlow is not installed (pip install -r tools/tf_reference/requirements.txt)")
        return 77

    failures = []

    def check(condition, what):
        print(("ok   " if condition else "FAIL ") + what)
        if not condition:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        ours = os.path.join(tmp, "ours")
        subprocess.run([helper, "--checkpoint-dir", ours, "--steps", "10", "--save-steps", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        state = tf.train.get_checkpoint_state(ours)
        check(state is not None, "tf.train.get_checkpoint_state reads runhooks' state file")
        if state is not None:
            check(state.model_checkpoint_path == os.path.join(ours, "model.ckpt-10"),
                  "model_checkpoint_path %r" % state.model_checkpoint_path)
            check(list(state.all_model_checkpoint_paths)
                  == [os.path.join(ours, "model.ckpt-%d" % s) for s in (6, 8, 10)],
                  "all_model_checkpoint_paths %r" % list(state.all_model_checkpoint_paths))
            stamps = list(state.all_model_checkpoint_timestamps)
            check(len(stamps) == 3 and stamps == sorted(stamps) and stamps[0] > 1.6e9,
                  "all_model_checkpoint_timestamps %r" % stamps)

        theirs = os.path.join(tmp, "theirs")
        tf.compat.v1.disable_eager_execution()
        with tf.Graph().as_default():
            v = tf.compat.v1.get_variable("v", initializer=1.0)
            saver = tf.compat.v1.train.Saver(max_to_keep=2, save_relative_paths=True)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for step in range(1, 5):
                    saver.save(sess, os.path.join(theirs, "model.ckpt"), global_step=step)
        del v
        result = subprocess.run([helper, "--print-state", theirs], check=False,
                                stdout=subprocess.PIPE, text=True)
        lines = result.stdout.splitlines()
        check(result.returncode == 0, "--print-state exits 0 (%s)" % result.stdout.strip())
        check(lines == ["model_checkpoint_path " + os.path.join(theirs, "model.ckpt-4"),
                        "all_model_checkpoint_paths " + os.path.join(theirs, "model.ckpt-3"),
                        "all_model_checkpoint_paths " + os.path.join(theirs, "model.ckpt-4"),
                        "latest " + os.path.join(theirs, "model.ckpt-4")],
              "runhooks reads TensorFlow's state file: %r" % lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
