"""The one base class of errors a user causes and can fix; imports nothing of ours.

``panoramia-fl`` prints a :class:`UserError` as one line ``error: <message>`` and exits 2;
any other exception is a bug and keeps its traceback. Subclasses keep their historical
built-in bases (``ValueError``, ``KeyError``, ``FileNotFoundError``) so callers that catch
those still do.
"""

from __future__ import annotations


class UserError(Exception):
    """A bad config value, argument or input file; the message says which and why."""


class UnknownNameError(UserError, KeyError):
    """A name that is not in a registry (``data.name``, ``model.name``, ...)."""

    def __str__(self) -> str:
        # KeyError quotes its message; this one is meant to be read.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named (or a run directory should hold) does not exist."""


class RunFileError(UserError, ValueError):
    """A run directory's file is missing or malformed; the message names it (and the line
    or key)."""
