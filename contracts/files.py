"""Durable, atomic file writes and owner-only modes for what stays at a site.

Every writer of a run directory or of a site's own folder goes through these: a write lands
whole or not at all (temp file, ``fsync``, rename, ``fsync`` of the folder, so a power loss
cannot leave a zero-length file behind a completed rename), and a site-local file (records,
DP ledgers, exposed members) is created ``0600`` in a ``0700`` folder whatever the umask.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from panoramia_fl.contracts.errors import RunFileError

PRIVATE_FILE_MODE = 0o600
"""Site-local files: the site's own account only."""
PRIVATE_DIR_MODE = 0o700
"""Site-local folders."""


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it ``0700``; returns it."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    # mkdir's mode is masked by the umask and ignored for existing folders: set it outright.
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], object], *, private: bool = False) -> Path:
    """Write ``path`` through ``write(fh)`` on a temp file, then rename it into place.

    The temp file is fsynced before the rename and the folder after it. ``private``: the
    file is ``0600`` (created so, never readable by others even while written) and its
    folder ``0700``. A directory at ``path`` is a :class:`RunFileError` naming it.
    """
    path = Path(path)
    if path.is_dir():
        raise RunFileError(f"{path} is a directory; a file is written there: move it away")
    if private:
        private_dir(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    mode = PRIVATE_FILE_MODE if private else 0o666
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if private:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # an old temp file keeps its mode otherwise
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: Path, text: str, *, private: bool = False) -> Path:
    """:func:`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda fh: fh.write(text.encode("utf-8")), private=private)


def check_writable(folder: Path) -> Path:
    """Before any work whose result would then be lost: a file can be created in ``folder``
    or, where it does not exist yet, in its nearest existing parent (where it would be
    made). Creates nothing; a :class:`RunFileError` naming ``folder`` otherwise (a
    read-only file system, no permission, a file in the way). Returns ``folder``."""
    folder = Path(folder)
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunFileError(f"cannot write in {folder}: {existing} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        where = "" if existing == folder.absolute() else f" (its parent {existing})"
        raise RunFileError(f"cannot write in {folder}{where}: {err.strerror}") from None
    return folder
