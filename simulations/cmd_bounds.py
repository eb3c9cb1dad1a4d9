"""``panoramia-fl bounds``: the audit's bound on scores people bring themselves.

Input: a CSV with header columns ``score,label`` (other columns ignored) or an NPZ with arrays
``scores`` and ``labels``; label 1 = member, 0 = non-member (or generated). Output: one JSON
object on stdout. Errors (missing file, column or array, bad values) go to stderr, exit 2.

``--two-sided`` also tests confident "non-member" guesses: the same Clopper-Pearson bound on
``(-score, 1 - label)`` (:func:`audit.sides.oriented`). The two tests share ``--beta``, so each
runs at ``beta / 2`` and the larger of the two bounds holds at level ``beta``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from audit.bounds import ceiling, lower_bound, thresholds_tried
from audit.o1 import o1_lower_bound
from audit.sides import SIDES, oriented
from contracts.errors import UserError

EXIT_USAGE = 2
_TRUE = {"1", "1.0", "true"}
_FALSE = {"0", "0.0", "false"}


class InputError(UserError):
    """A problem with the input file; the message names the file and the column."""


def register(subparsers: Any) -> None:
    """Add the ``bounds`` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "bounds",
        help="lower bound (PANORAMIA test, or O(1)) from a file of scores and labels",
        description=(
            "Read scores and membership labels (CSV with columns score,label or NPZ with "
            "arrays scores,labels; label 1 = member) and print one JSON object with the "
            "Clopper-Pearson lower bound, maximised over thresholds with a union bound. "
            "--two-sided also bounds non-member guesses; the two sides then share beta "
            "(each at beta/2)."
        ),
    )
    _add_arguments(parser)
    parser.set_defaults(func=run)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="CSV (score,label) or NPZ (scores, labels)")
    parser.add_argument(
        "--beta",
        type=float,
        default=0.05,
        help="level of this single test; the union bound over thresholds is applied inside "
        "(with --two-sided: shared by the two sides, each tested at beta/2)",
    )
    parser.add_argument(
        "--grid",
        type=int,
        default=None,
        help="thresholds: G quantile thresholds instead of every distinct score level "
        "(with --o1: number of counts per side, default 20)",
    )
    parser.add_argument(
        "--o1",
        action="store_true",
        help="print the O(1) bound (Steinke et al. 2023, abstention, delta=0) instead; "
        "labels 0 must then be real non-members",
    )
    parser.add_argument(
        "--two-sided",
        action="store_true",
        help="also bound confident non-member guesses (the same test on -score, 1 - label) "
        "and print both sides; the two tests share --beta, so each side runs at beta/2. "
        "Not with --o1, which already counts both kinds of guesses",
    )


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        for col in ("score", "label"):
            if col not in header:
                raise InputError(
                    f"{path}: missing column '{col}' (header has: {', '.join(header) or 'none'})"
                )
        reader.fieldnames = header
        scores: list[float] = []
        labels: list[int] = []
        for row_no, row in enumerate(reader, start=2):  # line 1 is the header
            raw_score = (row.get("score") or "").strip()
            raw_label = (row.get("label") or "").strip().lower()
            try:
                score = float(raw_score)
            except ValueError:
                raise InputError(
                    f"{path}: column 'score', line {row_no}: not a number: {raw_score!r}"
                ) from None
            if math.isnan(score):
                raise InputError(f"{path}: column 'score', line {row_no}: NaN score")
            if raw_label in _TRUE:
                labels.append(1)
            elif raw_label in _FALSE:
                labels.append(0)
            else:
                raise InputError(
                    f"{path}: column 'label', line {row_no}: label must be 0 or 1, "
                    f"got {raw_label!r}"
                )
            scores.append(score)
    return np.asarray(scores, dtype=float), np.asarray(labels, dtype=np.int64)


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read NPZ file: {exc}") from None
    with data:
        for key in ("scores", "labels"):
            if key not in data.files:
                raise InputError(
                    f"{path}: missing array '{key}' (file has: {', '.join(data.files) or 'none'})"
                )
        try:
            scores = np.asarray(data["scores"], dtype=float).ravel()
        except (TypeError, ValueError):
            raise InputError(f"{path}: array 'scores' is not numeric") from None
        raw = np.asarray(data["labels"]).ravel()
    if np.isnan(scores).any():
        idx = int(np.flatnonzero(np.isnan(scores))[0])
        raise InputError(f"{path}: array 'scores': NaN score at index {idx}")
    try:
        labels_f = raw.astype(float)
    except (TypeError, ValueError):
        raise InputError(f"{path}: array 'labels' is not numeric") from None
    bad = ~np.isin(labels_f, (0.0, 1.0))
    if bad.any():
        idx = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: array 'labels': label must be 0 or 1, got {raw[idx]!r} at index {idx}"
        )
    return scores, labels_f.astype(np.int64)


def read_scores(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Scores and 0/1 labels from a CSV or NPZ file (by suffix; ``.npz`` is NPZ)."""
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if path.suffix.lower() == ".npz":
        return _read_npz(path)
    return _read_csv(path)


def _check_beta(beta: float) -> float:
    beta = float(beta)
    if math.isnan(beta) or not (0.0 < beta < 1.0):
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    return beta


def _clopper_pearson(
    path: Path, scores: np.ndarray, labels: np.ndarray, beta: float, grid: int | None
) -> dict[str, Any]:
    """The PANORAMIA-style bound's JSON fields for one (already oriented) score vector."""
    summary = lower_bound(scores, labels, beta=beta, threshold_grid=grid)
    return {
        "bound": "clopper_pearson",
        **dataclasses.asdict(summary),
        "ceiling": ceiling(labels, beta=beta, threshold_grid=grid),
        "thresholds_tried": thresholds_tried(scores, threshold_grid=grid),
        "file": str(path),
        "n": int(labels.size),
        "n_members": int(labels.sum()),
    }


def _two_sided(
    path: Path, scores: np.ndarray, labels: np.ndarray, beta: float, grid: int | None
) -> dict[str, Any]:
    """Member and non-member sides, each at ``beta / 2``; ``max_bound`` holds at ``beta``."""
    half = _check_beta(beta) / 2
    sides = {
        side: _clopper_pearson(path, *oriented(scores, labels, side), half, grid) for side in SIDES
    }
    return {
        "two_sided": True,
        "beta": half,
        **sides,
        "max_bound": max(sides[side]["lower_bound"] for side in SIDES),
        "note": (
            f"two tests (member, nonmember) share beta={beta!r}: each side runs at "
            f"beta/2={half!r}; the nonmember side is the member test on (-score, 1 - label), "
            "so its threshold is on -score and its n_members counts label-0 records"
        ),
    }


def _jsonable(obj: Any) -> Any:
    """Non-finite floats become null (JSON has no inf/nan), in nested dicts too."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def run(args: argparse.Namespace) -> int:
    """Compute the bound for ``args.file`` and print one JSON object; return the exit code."""
    path: Path = Path(args.file)
    if getattr(args, "two_sided", False) and args.o1:
        print(
            "error: --two-sided and --o1 cannot be combined: the O(1) bound already counts "
            "both member and non-member guesses",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        scores, labels = read_scores(path)
        if args.o1:
            kwargs = {} if args.grid is None else {"grid_size": args.grid}
            o1 = o1_lower_bound(scores, labels, beta=args.beta, **kwargs)
            extra = {"file": str(path), "n": int(labels.size), "n_members": int(labels.sum())}
            out = {"bound": "o1", **dataclasses.asdict(o1), **extra}
        elif getattr(args, "two_sided", False):
            out = _two_sided(path, scores, labels, args.beta, args.grid)
        else:
            out = _clopper_pearson(path, scores, labels, args.beta, args.grid)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        # bounds' own checks (one label only, beta out of range, ...): name the file too.
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(_jsonable(out), allow_nan=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m simulations.cmd_bounds FILE [...]``."""
    parser = argparse.ArgumentParser(prog="panoramia-fl bounds")
    _add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
