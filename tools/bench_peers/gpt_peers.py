#!/usr/bin/env python3
"""PyTorch and Lightning loops of nanoGPT's character-level GPT for `./dev bench-peers gpt`
(a worker: see protocol.py; the driver is gpt_run.py, the model gpt_model.py).

Configurations (kind `gpt`, data=PATH of tiny Shakespeare; torch.set_num_threads(1) as every
worker of bench-peers; each one builds the model from seed 1337, nanoGPT's):
  pytorch-gpt          nanoGPT's train.py step without its extras: the learning rate of the
                       step set in both parameter groups (100 warm-up steps, cosine to 1e-4 at
                       step 2000), a batch, forward and loss, backward, clip_grad_norm_(1.0),
                       AdamW's step, zero_grad(set_to_none=True); no .item() on silent steps
  lightning-gpt        Trainer.fit of a LightningModule whose training_step returns the same
                       loss, configure_optimizers the same AdamW and the schedule as a LambdaLR
                       stepped every step, gradient_clip_val=1.0 (norm); no logger, checkpoint,
                       progress bar or model summary
  lightning-gpt-callbacks  the same with ModelCheckpoint(every_n_train_steps=save_every),
                       TensorBoardLogger(log_every_n_steps=summary_every; training_step calls
                       self.log("loss", loss, prog_bar=True)), LearningRateMonitor and
                       TQDMProgressBar
Lightning gets the batches as an iterable whose epoch is save_every batches; the timing callback
(protocol.Gate) comes after the others but ModelCheckpoint, as in torch_peers.py.
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (sets the thread variables before torch is imported)
import gpt_model  # noqa: E402

import torch  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)

try:
    import lightning.pytorch as L
except ImportError:
    try:
        import pytorch_lightning as L
    except ImportError:
        L = None

WARMUP_ITERS, LR_DECAY_ITERS, MIN_LR = 100, 2000, 1e-4


def learning_rate(step, c):
    """nanoGPT's get_lr: linear warm-up, then cosine decay to MIN_LR, then MIN_LR."""
    if step < WARMUP_ITERS:
        return c.learning_rate * (step + 1) / (WARMUP_ITERS + 1)
    if step > LR_DECAY_ITERS:
        return MIN_LR
    ratio = (step - WARMUP_ITERS) / (LR_DECAY_ITERS - WARMUP_ITERS)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c.learning_rate - MIN_LR)


class Epochs:
    def __init__(self, stream, length):
        self.stream, self.length = stream, length

    def __len__(self):
        return self.length

    def __iter__(self):
        for _ in range(self.length):
            yield next(self.stream)


class PlainLoop:
    def __init__(self, s):
        self.c = gpt_model.Config()
        train, _, vocab = gpt_model.load_text(s.data)
        if vocab != self.c.vocab:
            raise ValueError(f"{s.data}: {vocab} characters, expected {self.c.vocab}")
        self.model = gpt_model.make_model(self.c)
        self.optimizer = gpt_model.make_optimizer(self.model, self.c)
        self.batches = gpt_model.batch_stream(train, self.c)
        self.step = 0
        self.run(s.warmup)

    def one_step(self):
        lr = learning_rate(self.step, self.c)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = next(self.batches)
        loss = self.model.loss(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.c.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

    def run(self, n):
        return protocol.timed_steps(self.one_step, n)

    def finish(self):
        pass


def lightning_loop(config, s):
    if L is None:
        raise RuntimeError("lightning is not installed")
    c = gpt_model.Config()
    train, _, vocab = gpt_model.load_text(s.data)
    if vocab != c.vocab:
        raise ValueError(f"{s.data}: {vocab} characters, expected {c.vocab}")
    callbacks_on = config == "lightning-gpt-callbacks"

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = gpt_model.make_model(c)

        def training_step(self, batch, batch_idx):
            loss = self.net.loss(*batch)
            if callbacks_on:
                self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            optimizer = gpt_model.make_optimizer(self.net, c)
            # LambdaLR multiplies the groups' initial rate (c.learning_rate) by the factor.
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: learning_rate(step, c) / c.learning_rate)
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    class Timing(L.Callback):
        def __init__(self, gate):
            self.gate = gate

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.gate.tick():
                trainer.should_stop = True

    def fit(gate):
        common = dict(accelerator="cpu", devices=1, max_steps=s.last_step, max_epochs=-1,
                      enable_model_summary=False, num_sanity_val_steps=0,
                      gradient_clip_val=c.clip, gradient_clip_algorithm="norm")
        if callbacks_on:
            checkpoint = L.callbacks.ModelCheckpoint(dirpath=os.path.join(s.dir, "checkpoints"),
                                                    every_n_train_steps=s.save_every)
            logger = L.loggers.TensorBoardLogger(save_dir=s.dir, name="lightning")
            trainer = L.Trainer(logger=logger, log_every_n_steps=s.summary_every,
                                callbacks=[L.callbacks.TQDMProgressBar(),
                                           L.callbacks.LearningRateMonitor("step"), checkpoint,
                                           Timing(gate)], **common)
        else:
            trainer = L.Trainer(logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, callbacks=[Timing(gate)], **common)
        trainer.fit(Module(), train_dataloaders=Epochs(gpt_model.batch_stream(train, c),
                                                       s.save_every))

    return protocol.Gate(fit, s.warmup)


def make_loop(config, s):
    if s.kind != "gpt":
        raise ValueError(f"unknown kind '{s.kind}' (this worker has kind gpt only)")
    if not s.data:
        raise ValueError("kind gpt needs data=PATH (tiny Shakespeare)")
    if config == "pytorch-gpt":
        return PlainLoop(s)
    if config in ("lightning-gpt", "lightning-gpt-callbacks"):
        return lightning_loop(config, s)
    raise ValueError(f"unknown config '{config}' for kind gpt")


def versions():
    loaded = f"torch={torch.__version__}"
    return loaded + (f" lightning={L.__version__}" if L is not None else "")


if __name__ == "__main__":
    protocol.serve(make_loop, versions)
