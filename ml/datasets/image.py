"""Image datasets from local files in their real formats.

- IDX (Fashion-MNIST, MNIST): ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``, in the
  Debian layout (``/usr/share/datasets/fashion-mnist``) or torchvision's raw folder layout
  (``<root>/FashionMNIST/raw``, ``<root>/MNIST/raw``).
- CIFAR-10 python pickle batches (``cifar-10-batches-py/data_batch_{1..5}``, ``test_batch``).
- scikit-learn's 8x8 digits (the file behind ``load_digits``), always available, for fast tests.

Records are uint8 arrays of shape ``(n, C, H, W)``. The official test split never reaches a
site: it is the dataset's ``public`` part (central evaluation, reference pools).
"""

from __future__ import annotations

import gzip
import importlib.util
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from panoramia_fl.ml.datasets import DATASETS, DataError, Dataset, LoaderOptions

FASHION_MNIST_DEBIAN = Path("/usr/share/datasets/fashion-mnist")
_IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.int16,
    0x0C: np.int32,
    0x0D: np.float32,
    0x0E: np.float64,
}


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed), checking its header against its size."""
    if not path.exists():
        raise DataError(f"missing data file: {path}")
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            # In one call, which holds no interpreter lock (a run reads its data on a thread
            # beside its start); gzip's stream takes the lock back every 8 KiB or so.
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:  # zlib's: a corrupt compressed stream
        raise DataError(f"corrupt data file {path}: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"corrupt data file {path}: not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"corrupt data file {path}: truncated header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[raw[2]]).newbyteorder(">")
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataError(
            f"corrupt data file {path}: header says {shape} "
            f"({expected} bytes) but {len(raw) - header} bytes follow"
        )
    return (
        np.frombuffer(raw, dtype=dtype, offset=header)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def _find_idx(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).exists():
            return folder / name
    return folder / f"{stem}.gz"


def _idx_folder(root: Path | None, debian: Path | None, torchvision_name: str) -> Path:
    """The folder holding the IDX files: ``root`` itself, its torchvision raw layout, or the
    Debian package's folder."""
    candidates = []
    if root is not None:
        candidates += [root, root / torchvision_name / "raw"]
    elif debian is not None:
        candidates.append(debian)
    for folder in candidates:
        if _find_idx(folder, "train-images-idx3-ubyte").exists():
            return folder
    return candidates[0] if candidates else Path(".")


class IdxOptions(LoaderOptions):
    max_train: int | None = Field(None, ge=1, description="use the first N training images")
    max_test: int | None = Field(None, ge=1, description="use the first N test images")


def load_idx_dataset(name: str, folder: Path, options: IdxOptions, how_to_get: str) -> Dataset:
    try:
        x = read_idx(_find_idx(folder, "train-images-idx3-ubyte"))
        y = read_idx(_find_idx(folder, "train-labels-idx1-ubyte"))
        tx = read_idx(_find_idx(folder, "t10k-images-idx3-ubyte"))
        ty = read_idx(_find_idx(folder, "t10k-labels-idx1-ubyte"))
    except DataError as err:
        raise DataError(f"{err}. {how_to_get}") from None
    if len(x) != len(y) or len(tx) != len(ty):
        raise DataError(f"{folder}: image and label files disagree in length")
    x, y = x[: options.max_train], y[: options.max_train]
    tx, ty = tx[: options.max_test], ty[: options.max_test]
    return Dataset(
        name=name,
        modality="image",
        x=x[:, None],
        y=y.astype(np.int64),
        num_classes=10,
        input_shape=(1, 28, 28),
        public_x=tx[:, None],
        public_y=ty.astype(np.int64),
        info={"source": str(folder)},
    )


@DATASETS.register("fashion_mnist", options=IdxOptions)
def fashion_mnist(root: Path | None, options: IdxOptions) -> Dataset:
    folder = _idx_folder(root, FASHION_MNIST_DEBIAN, "FashionMNIST")
    how = (
        "Install the Debian package with `sudo apt-get install dataset-fashion-mnist` "
        "(files in /usr/share/datasets/fashion-mnist), or point data.root at a folder "
        "with the four *-ubyte.gz files."
    )
    return load_idx_dataset("fashion_mnist", folder, options, how)


@DATASETS.register("mnist", options=IdxOptions)
def mnist(root: Path | None, options: IdxOptions) -> Dataset:
    if root is None:
        raise DataError(
            "data.root: MNIST has no built-in location; set data.root to a folder "
            "with train-images-idx3-ubyte.gz etc. (or torchvision's MNIST/raw)"
        )
    folder = _idx_folder(root, None, "MNIST")
    how = "Place the four MNIST IDX files (from yann.lecun.com mirrors) under data.root."
    return load_idx_dataset("mnist", folder, options, how)


class CifarOptions(LoaderOptions):
    max_train: int | None = Field(None, ge=1)
    max_test: int | None = Field(None, ge=1)


CIFAR_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)
"""The only callables a CIFAR batch may name: what a pickled numpy array needs (at any
protocol) and ``_codecs.encode`` (bytes in a protocol-2 pickle). Dicts, lists, bytes, str
and int need none."""


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles CIFAR's batches and nothing else: a pickle runs whatever callable it names,
    so any other global (``os.system``, ``builtins.eval`` ...) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in CIFAR_GLOBALS:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which a CIFAR batch never does (refused unread)"
            )
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.exists():
        raise DataError(
            f"missing data file: {path}. Extract cifar-10-python.tar.gz under "
            "data.root (folder cifar-10-batches-py)."
        )
    try:
        with open(path, "rb") as fh:
            batch = _CifarUnpickler(fh, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as err:
        raise DataError(f"corrupt data file {path}: {err!r}") from None
    return data, labels


@DATASETS.register("cifar10", options=CifarOptions)
def cifar10(root: Path | None, options: CifarOptions) -> Dataset:
    if root is None:
        raise DataError("data.root: set it to the folder holding cifar-10-batches-py")
    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").exists() else root
    parts = [_read_cifar_batch(folder / f"data_batch_{i}") for i in range(1, 6)]
    x = np.concatenate([p[0] for p in parts])[: options.max_train]
    y = np.concatenate([p[1] for p in parts])[: options.max_train]
    tx, ty = _read_cifar_batch(folder / "test_batch")
    return Dataset(
        name="cifar10",
        modality="image",
        x=x,
        y=y,
        num_classes=10,
        input_shape=(3, 32, 32),
        public_x=tx[: options.max_test],
        public_y=ty[: options.max_test],
        info={"source": str(folder)},
    )


class DigitsOptions(LoaderOptions):
    public_fraction: float = Field(0.2, ge=0, lt=1, description="kept out as the public split")


@DATASETS.register("digits", options=DigitsOptions)
def digits(root: Path | None, options: DigitsOptions) -> Dataset:
    """scikit-learn's 8x8 digits scaled to uint8; a fixed public split for evaluation."""
    table = _digits_table()
    x = np.clip(table[:, :-1].reshape(-1, 1, 8, 8) * 16.0, 0, 255).astype(np.uint8)
    y = table[:, -1].astype(np.int64)
    order = np.random.default_rng(12345).permutation(len(x))
    n_public = int(round(options.public_fraction * len(x)))
    pub, pool = order[:n_public], order[n_public:]
    return Dataset(
        name="digits",
        modality="image",
        x=x[pool],
        y=y[pool],
        num_classes=10,
        input_shape=(1, 8, 8),
        public_x=x[pub],
        public_y=y[pub],
        info={"source": "sklearn.datasets.load_digits"},
    )


def _digits_table() -> np.ndarray:
    """The rows of scikit-learn's ``digits.csv.gz`` (64 pixels in 0..16, then the label), the
    file ``load_digits`` reads, read here without importing scikit-learn: a site process that
    only trains would otherwise spend about a CPU-second importing it for this file alone."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the digits dataset is scikit-learn's: install scikit-learn")
    package = Path(next(iter(spec.submodule_search_locations)))
    with gzip.open(package / "datasets" / "data" / "digits.csv.gz", "rt") as rows:
        return np.loadtxt(rows, delimiter=",")
