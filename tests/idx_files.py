"""Fashion-MNIST's IDX files, small and random, written where a test needs a dataset folder
(the loaders read the real format; nothing is downloaded)."""

from __future__ import annotations

import gzip
import struct

import numpy as np


def write_idx(path, array, *, compress):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def make_idx_folder(folder, *, n=20, n_test=8, compress=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    x = rng.integers(0, 256, (n, 28, 28))
    y = rng.integers(0, 10, n)
    tx, ty = rng.integers(0, 256, (n_test, 28, 28)), rng.integers(0, 10, n_test)
    write_idx(folder / "train-images-idx3-ubyte", x, compress=compress)
    write_idx(folder / "train-labels-idx1-ubyte", y, compress=compress)
    write_idx(folder / "t10k-images-idx3-ubyte", tx, compress=compress)
    write_idx(folder / "t10k-labels-idx1-ubyte", ty, compress=compress)
    return x, y, tx, ty
