#!/usr/bin/env python3
"""PyTorch and PyTorch Lightning loops for `./dev bench-peers` (a worker: see protocol.py).

Configurations (every one trains data.py's model of its kind with SGD, lr 0.05, momentum 0.9,
cross-entropy, torch.set_num_threads(1)):
  pytorch              the plain loop: zero_grad, forward, loss, backward, step
  lightning-bare       Trainer.fit with no logger, no checkpointing, no progress bar, no model
                       summary; training_step returns the loss and logs nothing
  lightning-callbacks  Trainer.fit with ModelCheckpoint(every_n_train_steps=save_every),
                       TensorBoardLogger (log_every_n_steps=summary_every; training_step calls
                       self.log("loss", loss, prog_bar=True)) and TQDMProgressBar, Lightning's
                       bar when rich is not installed (refresh_rate 1: tqdm redraws it after
                       every step, terminal or not; stdout is /dev/null here)
and for kind stall (a checkpoint of 64 MiB every save_every steps):
  pytorch-save         the plain loop, then torch.save of {model, optimizer, step} over one file
  lightning-checkpoint Trainer.fit with ModelCheckpoint(every_n_train_steps=save_every) only
Every loop draws its batches from the same stream: each pass over the rows in a new random order,
a batch an index_select of the stacked tensors (no DataLoader: its per-sample collation would
weigh more than the MLP). Lightning gets them as an iterable whose epoch is save_every batches,
so that its per-epoch work happens once per round. The timing callback (protocol.Gate) is the
last callback that Lightning calls after each step but its ModelCheckpoint.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (sets the thread variables before torch is imported)
import data  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)

try:
    import lightning.pytorch as L
except ImportError:
    try:
        import pytorch_lightning as L
    except ImportError:
        L = None


class BigState(torch.nn.Module):
    """The trivial model plus 64 MiB that every checkpoint holds and no step touches."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(1, 2)
        self.register_buffer("state", torch.from_numpy(data.big_state()))

    def forward(self, x):
        return self.fc(x)


def make_model(kind):
    torch.manual_seed(1)
    if kind == "digits":
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 10))
    if kind == "trivial":
        return torch.nn.Sequential(torch.nn.Linear(1, 2))
    return BigState()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=data.LEARNING_RATE, momentum=data.MOMENTUM)


def batch_stream(s):
    """Endless batches: each pass over the rows in a new order, the last partial batch dropped."""
    inputs, labels = (torch.from_numpy(a) for a in data.arrays(s.kind, s.data))
    size = data.BATCH_SIZE[s.kind]
    generator = torch.Generator().manual_seed(1)
    while True:
        order = torch.randperm(len(inputs), generator=generator)
        for start in range(0, len(inputs) - size + 1, size):
            rows = order[start:start + size]
            yield inputs.index_select(0, rows), labels.index_select(0, rows)


class Epochs:
    """An iterable of `length` batches of a stream per iteration, for Lightning's epochs."""

    def __init__(self, stream, length):
        self.stream, self.length = stream, length

    def __len__(self):
        return self.length

    def __iter__(self):
        for _ in range(self.length):
            yield next(self.stream)


class PlainLoop:
    def __init__(self, s, save):
        self.model, self.step = make_model(s.kind), 0
        self.optimizer = make_optimizer(self.model)
        self.batches = batch_stream(s)
        self.save_every = s.save_every if save else 0
        self.path = os.path.join(s.dir, "model.pt")
        self.run(s.warmup)

    def one_step(self):
        inputs, labels = next(self.batches)
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(inputs), labels)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        if self.save_every and self.step % self.save_every == 0:
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "step": self.step}, self.path)

    def run(self, n):
        return protocol.timed_steps(self.one_step, n)

    def finish(self):
        pass


def lightning_loop(config, s):
    if L is None:
        raise RuntimeError("lightning is not installed")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make_model(s.kind)

        def training_step(self, batch, batch_idx):
            inputs, labels = batch
            loss = F.cross_entropy(self.net(inputs), labels)
            if config == "lightning-callbacks":
                self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return make_optimizer(self)

    class Timing(L.Callback):
        def __init__(self, gate):
            self.gate = gate

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.gate.tick():
                trainer.should_stop = True

    def fit(gate):
        common = dict(accelerator="cpu", devices=1, max_steps=s.last_step, max_epochs=-1,
                      enable_model_summary=False, num_sanity_val_steps=0)
        checkpoint = L.callbacks.ModelCheckpoint(dirpath=os.path.join(s.dir, "checkpoints"),
                                                every_n_train_steps=s.save_every)
        if config == "lightning-bare":
            trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                callbacks=[Timing(gate)], **common)
        elif config == "lightning-callbacks":
            logger = L.loggers.TensorBoardLogger(save_dir=s.dir, name="lightning")
            trainer = L.Trainer(logger=logger, log_every_n_steps=s.summary_every,
                                callbacks=[L.callbacks.TQDMProgressBar(), checkpoint, Timing(gate)],
                                **common)
        else:  # lightning-checkpoint
            trainer = L.Trainer(logger=False, enable_progress_bar=False,
                                callbacks=[checkpoint, Timing(gate)], **common)
        trainer.fit(Module(), train_dataloaders=Epochs(batch_stream(s), s.save_every))

    return protocol.Gate(fit, s.warmup)


def make_loop(config, s):
    if s.kind == "stall":
        if config == "pytorch-save":
            return PlainLoop(s, save=True)
        if config == "lightning-checkpoint":
            return lightning_loop(config, s)
    elif config == "pytorch":
        return PlainLoop(s, save=False)
    elif config in ("lightning-bare", "lightning-callbacks"):
        return lightning_loop(config, s)
    raise ValueError(f"unknown config '{config}' for kind {s.kind}")


def versions():
    loaded = f"torch={torch.__version__}"
    return loaded + (f" lightning={L.__version__}" if L is not None else "")


if __name__ == "__main__":
    protocol.serve(make_loop, versions)
