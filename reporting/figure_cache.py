"""Draw a report's figures once each, in parallel, before its pages are written.

Matplotlib's drawing is most of the report stage's time (about 0.2-0.35 s of CPU a figure,
five figures a site), so the stage grew with sites. Writing a run's report now goes:

1. *plan*: the pages are rendered once with :func:`planning` active; every call of a
   :func:`cached` plot function records its arguments instead of drawing (and returns None);
2. *draw*: :meth:`FigureCache.draw_planned` draws each distinct call once (the consortium
   page's ROC of a site is the site page's too), spread over worker processes;
3. *write*: the pages are rendered again with :func:`serving` active: the same calls return
   the drawn figures.

A call the plan missed is drawn on the spot, so pages never lose a figure. Outside these
contexts (a site rebuilding its own page, sweep reports) the plot functions draw directly.
The figures are the same bytes either way: the same functions draw them.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec

P = ParamSpec("P")
Plot = Callable[..., str | None]

MAX_WORKERS = 8
"""Worker processes at most: beyond this, forking and shipping the inputs cost more than the
figures left to each."""
FIGURES_PER_WORKER = 8
"""A worker is forked for every this many figures only: a fork costs about as much CPU as a
few figures (a 2-site report of 12 figures was slower over two processes than in one)."""

_PLOTS: dict[str, Plot] = {}
_ACTIVE: ContextVar[FigureCache | None] = ContextVar("figure_cache", default=None)


def cached(fn: Callable[P, str | None]) -> Callable[P, str | None]:
    """Decorator: route calls of plot ``fn`` through the active :class:`FigureCache`."""
    _PLOTS[fn.__qualname__] = fn

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> str | None:
        cache = _ACTIVE.get()
        if cache is None or kwargs:
            return fn(*args, **kwargs)
        return cache.get(fn.__qualname__, args)

    return wrapper


def _draw(job: tuple[str, tuple[Any, ...]]) -> str | None:
    name, args = job
    return _PLOTS[name](*args)


class FigureCache:
    """Figures (base64 PNG or None) by plot function and pickled arguments."""

    def __init__(self) -> None:
        self._figures: dict[bytes, str | None] = {}
        self._planned: dict[bytes, tuple[str, tuple[Any, ...]]] = {}
        self._recording = False

    @staticmethod
    def _key(name: str, args: tuple[Any, ...]) -> bytes:
        # Equal inputs pickle to equal bytes: a cheap identity for frozen report values.
        return pickle.dumps((name, args), protocol=pickle.HIGHEST_PROTOCOL)

    def get(self, name: str, args: tuple[Any, ...]) -> str | None:
        key = self._key(name, args)
        if key in self._figures:
            return self._figures[key]
        if self._recording:
            self._planned.setdefault(key, (name, args))
            return None
        figure = self._figures[key] = _PLOTS[name](*args)
        return figure

    @property
    def planned(self) -> int:
        """Distinct figures planned and not drawn yet."""
        return len(self._planned)

    def draw_planned(self, workers: int | None = None) -> None:
        """Draw every planned figure, over ``workers`` processes (None: one per usable CPU,
        at most :data:`MAX_WORKERS`); one process draws them when that is all there is."""
        jobs = list(self._planned.items())
        self._planned = {}
        if workers is None:
            workers = min(len(os.sched_getaffinity(0)), MAX_WORKERS)
        workers = max(1, min(workers, len(jobs) // FIGURES_PER_WORKER))
        if workers == 1 or "fork" not in _start_methods():
            figures = [_draw(job) for _, job in jobs]
        else:
            figures = _draw_in_processes([job for _, job in jobs], workers)
        self._figures.update(zip((key for key, _ in jobs), figures, strict=True))


def _start_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def _draw_in_processes(jobs: list[tuple[str, tuple[Any, ...]]], workers: int) -> list[str | None]:
    import multiprocessing

    # fork: the workers start with the plot code and matplotlib already imported (a fresh
    # interpreter would spend seconds importing them), and only draw.
    context = multiprocessing.get_context("fork")
    # Frozen objects are skipped by the workers' garbage collector: fewer pages of the
    # writer's heap are touched, and so copied, in each worker.
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            # Small chunks: the big consortium grids do not all land on one worker.
            return list(pool.map(_draw, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
    finally:
        gc.unfreeze()


@contextmanager
def planning(cache: FigureCache) -> Iterator[FigureCache]:
    """Plot calls inside record what to draw and return None."""
    cache._recording = True
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)
        cache._recording = False


@contextmanager
def serving(cache: FigureCache) -> Iterator[FigureCache]:
    """Plot calls inside return the figures drawn (drawing any the plan missed)."""
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)
