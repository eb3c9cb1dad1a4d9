"""Seconds to read a gzip-compressed IDX file alone and beside a thread that runs Python.

    python benchmarks/data_read_beside_python.py [FILE]   # default: Fashion-MNIST's training images

A run reads its data on a thread while the rest of its start runs Python on another
(``simulations.ray_start.ray_started_ahead``). Prints the read's seconds both ways for
gzip's stream (``gzip.open(...).read()``, which takes the interpreter lock back for every
8 KiB it decompresses) and for one call (``gzip.decompress``, which ``ml.datasets.image``
uses: zlib holds no lock while it runs).
"""

from __future__ import annotations

import gzip
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def _streamed(path: Path) -> None:
    with gzip.open(path, "rb") as fh:
        fh.read()


def _one_call(path: Path) -> None:
    gzip.decompress(path.read_bytes())


def _beside_python(read: Callable[[Path], None], path: Path) -> float:
    """The read's seconds on a thread while this one runs a Python loop until it is done."""
    took: list[float] = []

    def timed() -> None:
        start = time.perf_counter()
        read(path)
        took.append(time.perf_counter() - start)

    thread = threading.Thread(target=timed)
    thread.start()
    spins = 0
    while thread.is_alive():
        spins += 1
    return took[0]


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    if not path.exists():
        raise SystemExit(f"no file {path}: give a .gz IDX file")
    for name, read in (("gzip's stream", _streamed), ("one call", _one_call)):
        start = time.perf_counter()
        read(path)
        alone = time.perf_counter() - start
        print(f"{name}: alone {alone:.2f} s, beside Python {_beside_python(read, path):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
