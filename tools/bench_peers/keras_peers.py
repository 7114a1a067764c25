#!/usr/bin/env python3
"""TensorFlow 2 and Keras 3 loops for `./dev bench-peers` (a worker: see protocol.py).

Configurations (every one trains data.py's model of its kind as a keras.Sequential with
keras.optimizers.SGD(0.05, momentum=0.9) and sparse categorical cross-entropy on logits; TF's
intra- and inter-op thread pools of one thread; XLA off, as Keras' jit_compile="auto" has it on
a CPU):
  tf2               the plain TF2 loop: a tf.function step (GradientTape, apply_gradients) called
                    from Python on each batch of the tf.data iterator
  keras-bare        model.fit(verbose=0), no callbacks but the timing one
  keras-callbacks   model.fit(verbose=1: ProgbarLogger) with ModelCheckpoint(save_freq=save_every,
                    a .keras file) and TensorBoard(update_freq=summary_every). The bar redraws at
                    most every 0.05 s; Keras treats any stdout as a terminal on Linux (its
                    "posix" test), so it writes \\r-redraws to the pipe (/dev/null here)
and for kind stall (a checkpoint of 64 MiB every save_every steps):
  tf2-checkpoint    the plain loop, then tf.train.CheckpointManager(max_to_keep=1).save()
  keras-checkpoint  model.fit with ModelCheckpoint(save_freq=save_every) only (model.keras)
Every loop reads the same tf.data pipeline: the rows shuffled on each pass, batched, the last
partial batch dropped, repeated; model.fit gets it with steps_per_epoch = save_every, so that its
per-epoch work happens once per round.

The timing callback: Keras 3 runs batch-end callbacks on a background thread when no callback
overrides on_train_batch_end (and then skips converting the logs to NumPy on the training
thread); a callback of ours there would switch that off. So keras-bare and keras-callbacks are
timed by epoch: the callback's on_epoch_end closes the round (one epoch = one round). The stall
configurations are timed after every batch (ModelCheckpoint(save_freq=N) already switches the
asynchronous dispatch off).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (sets the thread variables before TensorFlow is imported)
import data  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras  # noqa: E402


class BigState(keras.layers.Layer):
    """64 MiB that every checkpoint holds and no step touches (a non-trainable weight)."""

    def build(self, input_shape):
        self.state = self.add_weight(shape=data.BIG_STATE_SHAPE, trainable=False, name="state",
                                     initializer="zeros")

    def call(self, inputs):
        return inputs


def make_model(kind):
    keras.utils.set_random_seed(1)
    if kind == "digits":
        layers = [keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                  keras.layers.Dense(10)]
    elif kind == "trivial":
        layers = [keras.Input((1,)), keras.layers.Dense(2)]
    else:
        big = BigState()
        model = keras.Sequential([keras.Input((1,)), big, keras.layers.Dense(2)])
        big.state.assign(data.big_state())
        return model
    return keras.Sequential(layers)


def make_optimizer():
    return keras.optimizers.SGD(learning_rate=data.LEARNING_RATE, momentum=data.MOMENTUM)


def make_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def dataset(s):
    inputs, labels = data.arrays(s.kind, s.data)
    return (tf.data.Dataset.from_tensor_slices((inputs, labels))
            .shuffle(len(inputs), seed=1, reshuffle_each_iteration=True)
            .batch(data.BATCH_SIZE[s.kind], drop_remainder=True)
            .repeat())


class PlainLoop:
    def __init__(self, s, save):
        self.model, optimizer, loss_fn = make_model(s.kind), make_optimizer(), make_loss()
        model = self.model

        @tf.function
        def train_step(inputs, labels):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(inputs, training=True))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        self.train_step = train_step
        self.batches = iter(dataset(s))
        self.step = 0
        self.save_every = s.save_every if save else 0
        if save:
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
            self.manager = tf.train.CheckpointManager(checkpoint, s.dir, max_to_keep=1)
        self.run(s.warmup)

    def one_step(self):
        inputs, labels = next(self.batches)
        self.train_step(inputs, labels)
        self.step += 1
        if self.save_every and self.step % self.save_every == 0:
            self.manager.save(checkpoint_number=self.step)

    def run(self, n):
        return protocol.timed_steps(self.one_step, n)

    def finish(self):
        pass


class FitLoop:
    """model.fit on a protocol.Gate, timed by epoch or by batch."""

    def __init__(self, config, s):
        self.per_batch = s.kind == "stall"
        self.steps_per_epoch = s.save_every
        if not self.per_batch and s.warmup % self.steps_per_epoch:
            raise ValueError("warmup must be a whole number of epochs (save_every steps)")

        class TimeEpochs(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if self.gate.tick():
                    self.model.stop_training = True

        class TimeBatches(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if self.gate.tick():
                    self.model.stop_training = True

        def fit(gate):
            model = make_model(s.kind)
            model.compile(optimizer=make_optimizer(), loss=make_loss())
            timing = TimeBatches() if self.per_batch else TimeEpochs()
            timing.gate = gate
            verbose, callbacks = 0, []
            if config == "keras-callbacks":
                verbose = 1
                callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(s.dir, "model.keras"),
                                                             save_freq=s.save_every),
                             keras.callbacks.TensorBoard(os.path.join(s.dir, "logs"),
                                                         update_freq=s.summary_every)]
            elif config == "keras-checkpoint":
                callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(s.dir, "model.keras"),
                                                             save_freq=s.save_every)]
            epochs = s.last_step // self.steps_per_epoch + 2
            model.fit(dataset(s), epochs=epochs, steps_per_epoch=self.steps_per_epoch,
                      verbose=verbose, callbacks=callbacks + [timing])

        warmup = s.warmup if self.per_batch else s.warmup // self.steps_per_epoch
        self.gate = protocol.Gate(fit, warmup)

    def run(self, n):
        if self.per_batch:
            return self.gate.run(n)
        if n != self.steps_per_epoch:
            raise ValueError(f"timed by epoch: run {self.steps_per_epoch} steps, not {n}")
        return self.gate.run(1)

    def finish(self):
        self.gate.finish()


def make_loop(config, s):
    if s.kind == "stall":
        if config == "tf2-checkpoint":
            return PlainLoop(s, save=True)
        if config == "keras-checkpoint":
            return FitLoop(config, s)
    elif config == "tf2":
        return PlainLoop(s, save=False)
    elif config in ("keras-bare", "keras-callbacks"):
        return FitLoop(config, s)
    raise ValueError(f"unknown config '{config}' for kind {s.kind}")


def versions():
    return f"tensorflow={tf.__version__} keras={keras.__version__}"


if __name__ == "__main__":
    protocol.serve(make_loop, versions)
