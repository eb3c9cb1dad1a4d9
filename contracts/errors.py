"""The one base class of errors a user causes and can fix, and how to recognise Ray's memory
killer in an error; imports nothing of ours.

``panoramia-fl`` prints a :class:`UserError` as one line ``panoramia-fl: error: <message>``
(:data:`ERROR_PREFIX`) and exits 2;
any other exception is a bug and keeps its traceback. Subclasses keep their historical
built-in bases (``ValueError``, ``KeyError``, ``FileNotFoundError``) so callers that catch
those still do.
"""

from __future__ import annotations

ERROR_PREFIX = "panoramia-fl: error: "
"""How every error line of the ``panoramia-fl`` command opens."""


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


class NameTakenError(UserError, ValueError):
    """A name registered twice: by two plugins, or by a plugin and a built-in."""


RAY_MEMORY_KILLER = ("ray.exceptions.OutOfMemoryError", "running low on memory")
"""What Ray's memory killer leaves in the errors it causes: its exception's name (Flower's
error reply of a killed site quotes it) or its message ("Task was killed due to the node
running low on memory ...")."""


def memory_killer_line(error: str | BaseException) -> str | None:
    """The first line of ``error`` (a site's error text, or an exception and its causes)
    that shows Ray's memory killer ended a process of the run; None when none does."""
    if isinstance(error, BaseException):
        texts, seen = [], set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            kind = type(current)
            texts.append(f"{kind.__module__}.{kind.__qualname__}: {current}")
            current = current.__cause__ or current.__context__
        error = "\n".join(texts)
    lines = (line.strip() for line in error.splitlines())
    return next((line for line in lines if any(m in line for m in RAY_MEMORY_KILLER)), None)


def memory_killed(error: str | BaseException) -> bool:
    """Whether ``error`` shows Ray's memory killer ended a process of the run."""
    return memory_killer_line(error) is not None
