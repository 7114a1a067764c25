#!/usr/bin/env python3
"""TensorFlow graph-mode loops for `./dev bench-peers` (a worker: see protocol.py): a plain
tf.compat.v1.Session loop and tf.compat.v1.train.MonitoredTrainingSession, the API runhooks
follows.

Each loop builds its own graph: data.py's model of its kind from tf.compat.v1.get_variable and
tf.matmul, sparse softmax cross-entropy on logits, MomentumOptimizer(0.05, 0.9).minimize with
the global step, a tf.compat.v1.summary.scalar of the loss, and the batches from a one-shot
iterator over the same tf.data pipeline as keras_peers.py (shuffled on each pass, batched, the
last partial batch dropped, repeated). Sessions run their ops in the calling thread
(intra_op_parallelism_threads=1, inter_op_parallelism_threads=-1).
Every step is one session.run(train_op).
  session        the plain loop: tf.compat.v1.Session, global_variables_initializer
  mts-bare       MonitoredTrainingSession without checkpoint_dir and with every default hook
                 switched off; hooks=[StopAtStepHook(last_step)]
  mts-defaults   MonitoredTrainingSession(checkpoint_dir) with its default hooks at our
                 frequencies: CheckpointSaverHook (save_checkpoint_steps=save_every),
                 SummarySaverHook (save_summaries_steps=summary_every), StepCounterHook
                 (log_step_count_steps=summary_every); and StopAtStepHook. TensorFlow has no
                 progress bar; the step counter's log line is at INFO, which tf's logger drops
and for kind stall (a checkpoint of 64 MiB every save_every steps):
  session-saver  the plain loop, then tf.compat.v1.train.Saver(max_to_keep=1).save
  mts-checkpoint MonitoredTrainingSession(checkpoint_dir, save_checkpoint_steps=save_every) with
                 a Scaffold whose Saver has max_to_keep=1, no summaries, no step counter
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (sets the thread variables before TensorFlow is imported)
import data  # noqa: E402

import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
# One thread: an inter-op pool of one thread would hand every step to a second thread, which
# spins between steps and, on a loaded machine, doubled a step's CPU time from round to round;
# a negative count runs the ops in the calling thread (ConfigProto's documented meaning).
SESSION_CONFIG = v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=-1)


def dense(name, inputs, n_in, n_out):
    kernel = v1.get_variable(name + "/kernel", [n_in, n_out],
                             initializer=v1.glorot_uniform_initializer(seed=1))
    bias = v1.get_variable(name + "/bias", [n_out], initializer=v1.zeros_initializer())
    return tf.matmul(inputs, kernel) + bias


def build_graph(s):
    """(graph, train_op) for a kind."""
    graph = tf.Graph()
    with graph.as_default():
        inputs, labels = data.arrays(s.kind, s.data)
        batches = (tf.data.Dataset.from_tensor_slices((inputs, labels))
                   .shuffle(len(inputs), seed=1, reshuffle_each_iteration=True)
                   .batch(data.BATCH_SIZE[s.kind], drop_remainder=True)
                   .repeat())
        x, y = v1.data.make_one_shot_iterator(batches).get_next()
        global_step = v1.train.get_or_create_global_step()
        if s.kind == "digits":
            logits = dense("dense_1", tf.nn.relu(dense("dense", x, 64, 64)), 64, 10)
        else:
            logits = dense("dense", x, 1, 2)
        if s.kind == "stall":
            v1.get_variable("state", data.BIG_STATE_SHAPE, trainable=False,
                            initializer=v1.random_uniform_initializer(seed=3))
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        v1.summary.scalar("loss", loss)
        train_op = v1.train.MomentumOptimizer(data.LEARNING_RATE, data.MOMENTUM).minimize(
            loss, global_step=global_step)
    return graph, train_op


class SessionLoop:
    def __init__(self, s, save):
        self.graph, self.train_op = build_graph(s)
        with self.graph.as_default():
            self.saver = v1.train.Saver(max_to_keep=1) if save else None
            self.session = v1.Session(graph=self.graph, config=SESSION_CONFIG)
            self.session.run(v1.global_variables_initializer())
        self.prefix = os.path.join(s.dir, "model.ckpt")
        self.step, self.save_every = 0, s.save_every
        self.run(s.warmup)

    def one_step(self):
        self.session.run(self.train_op)
        self.step += 1
        if self.saver is not None and self.step % self.save_every == 0:
            self.saver.save(self.session, self.prefix, global_step=self.step)

    def run(self, n):
        with self.graph.as_default():
            return protocol.timed_steps(self.one_step, n)

    def finish(self):
        self.session.close()


class MonitoredLoop:
    def __init__(self, config, s):
        self.graph, self.train_op = build_graph(s)
        off = dict(save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None)
        with self.graph.as_default():
            hooks = [v1.train.StopAtStepHook(last_step=s.last_step)]
            if config == "mts-bare":
                options = dict(checkpoint_dir=None, save_checkpoint_secs=None, **off)
            elif config == "mts-defaults":
                options = dict(checkpoint_dir=s.dir, save_checkpoint_steps=s.save_every,
                               save_summaries_steps=s.summary_every,
                               log_step_count_steps=s.summary_every)
            else:  # mts-checkpoint
                scaffold = v1.train.Scaffold(saver=v1.train.Saver(sharded=True, max_to_keep=1))
                options = dict(checkpoint_dir=s.dir, save_checkpoint_steps=s.save_every,
                               scaffold=scaffold, **off)
            self.session = v1.train.MonitoredTrainingSession(hooks=hooks, config=SESSION_CONFIG,
                                                             **options)
        self.run(s.warmup)

    def one_step(self):
        if self.session.should_stop():
            raise RuntimeError("the session stopped early")
        self.session.run(self.train_op)

    def run(self, n):
        with self.graph.as_default():
            return protocol.timed_steps(self.one_step, n)

    def finish(self):
        with self.graph.as_default():
            self.session.close()


def make_loop(config, s):
    if s.kind == "stall":
        if config == "session-saver":
            return SessionLoop(s, save=True)
        if config == "mts-checkpoint":
            return MonitoredLoop(config, s)
    elif config == "session":
        return SessionLoop(s, save=False)
    elif config in ("mts-bare", "mts-defaults"):
        return MonitoredLoop(config, s)
    raise ValueError(f"unknown config '{config}' for kind {s.kind}")


def versions():
    return f"tensorflow={tf.__version__}"


if __name__ == "__main__":
    protocol.serve(make_loop, versions)
