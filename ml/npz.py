"""Reading NPZ archives with their arrays' headers checked first.

``np.load`` decompresses an array whole when it is read: a forged or mistaken archive (one
that expands to gigabytes, or whose arrays disagree in length) would be read before any
check could fail. :func:`npz_headers` reads each array's shape and dtype only (a few bytes
of it); :func:`read_npz` reads the arrays once their expanded size fits the machine's
memory. A damaged archive (truncated, bad CRC, not a zip) is a :class:`DataError` naming
the file.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from panoramia_fl.contracts.errors import UserError


class NpzError(UserError, ValueError):
    """An NPZ file that cannot be read as one; the message names it."""


@dataclass(frozen=True)
class NpzArray:
    """One array of an archive, by its header."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


_DAMAGED = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)
"""What numpy and zipfile raise on a truncated, corrupted or foreign file."""


def npz_headers(path: Path) -> dict[str, NpzArray]:
    """Each array's shape and dtype, without reading its data."""
    headers = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
                    else:
                        raise ValueError(f"array {info.filename}: .npy format {version}")
                headers[info.filename[: -len(".npy")]] = NpzArray(tuple(shape), np.dtype(dtype))
    except _DAMAGED as err:
        raise NpzError(f"corrupt NPZ file {path}: {type(err).__name__}: {err}") from None
    return headers


def memory_bytes() -> int:
    """The machine's physical memory: no archive expanding beyond it can be read."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def read_npz(path: Path, keys: list[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays ``keys`` (default: all) of ``path``, no pickles; refused before any is
    decompressed when together they would expand beyond :func:`memory_bytes`."""
    headers = npz_headers(path)
    keys = list(headers) if keys is None else keys
    total = sum(headers[k].nbytes for k in keys if k in headers)
    if total > memory_bytes():
        raise NpzError(
            f"{path}: its arrays expand to {total / 2**30:.1f} GiB, more than this machine's "
            f"{memory_bytes() / 2**30:.1f} GiB of memory"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in keys if k in headers}
    except _DAMAGED as err:
        raise NpzError(f"corrupt NPZ file {path}: {type(err).__name__}: {err}") from None
