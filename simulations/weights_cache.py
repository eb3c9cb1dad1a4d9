"""A content-keyed cache of model weights that depend only on public data and settings.

The shared reference models (:mod:`simulations.reference_models`) see no site record: the
same public records, model, training settings, seed, code and machine give the same
weights, so a run, a sweep point or a replicate that would train them again loads them
from here instead. Each entry is one file named by its key, a SHA-256 of everything that
decides the weights (:func:`fingerprint`); it holds the key, what went into it, a digest of
the weights and the weights.

The folder: ``--cache DIR`` (run, sweep), else ``$PANORAMIA_FL_CACHE``, else
``$XDG_CACHE_HOME/panoramia-fl`` (``~/.cache/panoramia-fl``); ``off`` turns it off. An
entry is written to a temporary file and renamed into place, under a lock per key, so two
processes filling the cache at once neither tear an entry nor train it twice; an entry that
does not read back whole (torn, edited, another key's) is trained again with a warning.
``panoramia-fl cache clear`` empties the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from panoramia_fl.contracts.files import atomic_write

log = logging.getLogger("panoramia_fl")

CACHE_ENV = "PANORAMIA_FL_CACHE"
"""The cache folder, or ``off``; ``--cache`` sets it for the command."""
CACHE_OFF = "off"
ENTRY_FORMAT = 1
"""Bumped when an entry's layout changes: older entries then miss (and are trained again)."""

State = dict[str, torch.Tensor]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/panoramia-fl``, else ``~/.cache/panoramia-fl``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "panoramia-fl"


def cache_dir_setting() -> Path | None:
    """The cache folder this process uses (:data:`CACHE_ENV` or the default); None: off."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() == CACHE_OFF:
        return None
    return Path(value).expanduser() if value else default_cache_dir()


def digest_arrays(arrays: Iterable[np.ndarray | None]) -> str:
    """SHA-256 of arrays' dtypes, shapes and bytes (None counts as an absent array)."""
    h = hashlib.sha256()
    for array in arrays:
        if array is None:
            h.update(b"none;")
            continue
        data = np.ascontiguousarray(array)
        h.update(f"{data.dtype.str}{data.shape};".encode())
        h.update(data.tobytes())
    return h.hexdigest()


def digest_paths(paths: Iterable[Path]) -> str:
    """SHA-256 of files' contents (a folder: every file below it, by relative path)."""
    h = hashlib.sha256()
    for path in sorted({Path(p).resolve() for p in paths}):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            h.update(f"{file.relative_to(path) if path.is_dir() else file.name};".encode())
            h.update(hashlib.sha256(file.read_bytes()).digest())
    return h.hexdigest()


def device_fingerprint(device: torch.device) -> dict[str, Any]:
    """What about the machine changes trained weights: torch and numpy versions, the device
    kind and, on the CPU, the instruction set torch's kernels use."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "device": device.type,
    }
    if device.type == "cuda":
        info["cuda_device"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


def fingerprint(parts: dict[str, Any]) -> str:
    """The key of an entry: SHA-256 of ``parts`` as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _state_digest(state: State) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class CacheEntryError(Exception):
    """An entry that does not read back as the weights of its key."""


@dataclass(frozen=True)
class WeightsCache:
    """Entries of one kind (``reference-models``) under ``root``."""

    root: Path
    kind: str

    @classmethod
    def from_env(cls, kind: str) -> WeightsCache | None:
        """The cache of this process's folder (:func:`cache_dir_setting`); None when off,
        or when the folder cannot be written (with a warning: the run goes on without)."""
        root = cache_dir_setting()
        if root is None:
            return None
        cache = cls(root, kind)
        try:
            cache.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=cache.folder):
                pass
        except OSError as err:
            log.warning("weights cache %s cannot be written (%s); not used", root, err)
            return None
        return cache

    @property
    def folder(self) -> Path:
        return self.root / self.kind

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.pt"

    @contextlib.contextmanager
    def locked(self, keys: Sequence[str]) -> Iterator[None]:
        """Hold the lock of every key (taken in sorted order: two holders never deadlock)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            for key in sorted(set(keys)):
                stack.enter_context(FileLock(self.folder / f"{key}.lock"))
            yield

    def load(self, key: str) -> State | None:
        """The weights stored under ``key``; None when there are none or they do not read
        back whole (logged: they are trained again and the entry replaced)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            return _read_entry(path, key)
        except CacheEntryError as err:
            log.warning("%s: %s; trained again and replaced", path, err)
            return None

    def store(self, key: str, state: State, *, about: dict[str, Any]) -> None:
        """Write the entry of ``key`` (a temporary file renamed into place)."""
        entry = {
            "format": ENTRY_FORMAT,
            "key": key,
            "about": json.dumps(about, sort_keys=True, default=str),
            "digest": _state_digest(state),
            "state": state,
        }
        # Private, as mkstemp made it; the key's lock (held by the caller) keeps one writer.
        atomic_write(self.path(key), lambda fh: torch.save(entry, fh), private=True)


def _read_entry(path: Path, key: str) -> State:
    try:
        entry = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
    except Exception as err:  # torch raises several kinds for a torn or foreign file
        raise CacheEntryError(f"unreadable ({type(err).__name__}: {err})") from None
    if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT:
        raise CacheEntryError("not a cache entry of this version")
    if entry.get("key") != key:
        raise CacheEntryError(f"holds key {str(entry.get('key'))[:16]}..., not its own")
    state = entry.get("state")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CacheEntryError("holds no weights")
    if entry.get("digest") != _state_digest(state):
        raise CacheEntryError("its weights do not match their digest")
    return state


def clear_cache(root: Path) -> tuple[int, int]:
    """Remove every entry (and lock) under ``root``: ``(files removed, bytes freed)``.
    Only the cache's own files are removed; anything else in the folder stays."""
    files = bytes_freed = 0
    if not root.is_dir():
        return 0, 0
    for path in sorted(root.glob("*/*")):
        if path.is_file() and path.suffix in (".pt", ".lock", ".tmp"):
            bytes_freed += path.stat().st_size
            path.unlink(missing_ok=True)
            files += 1
    for folder in root.iterdir():
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return files, bytes_freed


def cache_summary(root: Path) -> tuple[int, int]:
    """``(entries, bytes)`` under ``root``."""
    entries = [p for p in root.glob("*/*.pt") if p.is_file()] if root.is_dir() else []
    return len(entries), sum(p.stat().st_size for p in entries)
