"""The digest of a model's weights: the one value sites compare to see that they all
received the same model."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

DIGEST_NAME = "sha256"


def model_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every array in name order: its name, dtype, shape and bytes (C order,
    little-endian), so equal digests mean bit-identical weights under the same names."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        header = f"{name}\0{little.dtype.str}\0{list(little.shape)}\0"
        digest.update(header.encode("utf-8"))
        digest.update(little.tobytes())
    return digest.hexdigest()
