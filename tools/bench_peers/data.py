"""The data every loop of `./dev bench-peers` trains on, as NumPy arrays, for every framework.

  digits   scikit-learn's 8x8 digits (the uncompressed CSV the driver writes from
           build/data/digits.csv.gz): every row but every fifth (held out, as in
           examples/torch/train_digits.cpp), pixels scaled to 0..1; batches of 32
  trivial  64 random rows of one feature, labels 0 or 1; batches of 1
  stall    the trivial data; the model also holds a [4096, 4096] float32 state (64 MiB)
"""

import numpy as np

BATCH_SIZE = {"digits": 32, "trivial": 1, "stall": 1}
BIG_STATE_SHAPE = (4096, 4096)  # float32: 64 MiB
LEARNING_RATE, MOMENTUM = 0.05, 0.9


def arrays(kind, csv_path):
    """(inputs float32 [N, F], labels int64 [N]) of a kind."""
    if kind == "digits":
        rows = np.loadtxt(csv_path, delimiter=",", dtype=np.float64, ndmin=2)
        if rows.shape[1] != 65:
            raise ValueError(f"{csv_path}: expected 65 columns, got {rows.shape[1]}")
        train = np.arange(len(rows)) % 5 != 4
        return (rows[train, :64] / 16.0).astype(np.float32), rows[train, 64].astype(np.int64)
    if kind in ("trivial", "stall"):
        rng = np.random.default_rng(2)
        return rng.random((64, 1), dtype=np.float32), rng.integers(0, 2, 64).astype(np.int64)
    raise ValueError(f"unknown kind '{kind}'")


def big_state():
    """The 64 MiB a stall model holds: random, so that no format can compress it."""
    return np.random.default_rng(3).random(BIG_STATE_SHAPE, dtype=np.float32)
