"""``panoramia-fl bounds``: the audit's bound on scores people bring themselves.

Input: a CSV with header columns ``score,label`` (other columns ignored) or an NPZ with arrays
``scores`` and ``labels``; label 1 = member, 0 = non-member (or generated). Output: one JSON
object on stdout. Errors (missing file, column or array, bad values) go to stderr, exit 2.

``--two-sided`` also tests confident "non-member" guesses: the same Clopper-Pearson bound on
``(-score, 1 - label)`` (:func:`audit.panoramia.sides.oriented`). The two tests share
``--beta``, so each runs at ``beta / 2`` and the larger of the two bounds holds at level ``beta``.

``--one-run steinke|fdp`` reads the labels as inclusion coins (1 = trained on) and prints a
one-run bound (:func:`audit.stats.one_run.one_run_bound`): Steinke et al.'s or the f-DP (Gaussian)
one, eps at ``--delta``. By default the best pair of a grid of guess counts is reported, each
pair tested at ``beta / pairs`` (a union bound: the result is a lower bound at level
``--beta``). ``--guesses K`` makes one pre-set guessing rule, one test at ``--beta``.
``--idealised`` tests every pair at ``--beta`` and reports the best (the paper-style
search, not paid for): its number is printed under ``eps_idealised``, never ``eps_lb``.
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

# The bounds (scipy) are imported where they are computed: the CLI's parser stays light.
from panoramia_fl.audit.stats.one_run_methods import DEFAULT_DELTA, METHOD_LABELS, METHODS
from panoramia_fl.contracts.errors import ERROR_PREFIX, UserError
from panoramia_fl.contracts.json_values import json_safe

EXIT_USAGE = 2
_TRUE = {"1", "1.0", "true"}
_FALSE = {"0", "0.0", "false"}


class InputError(UserError):
    """A problem with the input file; the message names the file and the column."""


def register(subparsers: Any) -> None:
    """Add the ``bounds`` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "bounds",
        help="lower bound (PANORAMIA test, O(1), or a one-run bound) from a file of scores "
        "and labels",
        description=(
            "Read scores and membership labels (CSV with columns score,label or NPZ with "
            "arrays scores,labels; label 1 = member) and print one JSON object with the "
            "Clopper-Pearson lower bound, maximised over thresholds with a union bound. "
            "--two-sided also bounds non-member guesses; the two sides then share beta "
            "(each at beta/2). --one-run steinke|fdp prints a one-run bound on eps at "
            "--delta instead (labels are inclusion coins)."
        ),
    )
    _add_arguments(parser)
    parser.set_defaults(func=run)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of ``bounds``: the test's, then ``--one-run``'s."""
    _add_test_arguments(parser)
    _add_one_run_arguments(parser)


def _add_test_arguments(parser: argparse.ArgumentParser) -> None:
    """The input file and the PANORAMIA / O(1) test's options."""
    parser.add_argument("file", type=Path, help="CSV (score,label) or NPZ (scores, labels)")
    parser.add_argument(
        "--beta",
        type=float,
        default=0.05,
        help="level of this single test; the union bound over thresholds is applied inside "
        "(with --two-sided: shared by the two sides, each tested at beta/2; with --one-run: "
        "the level of each guessing rule, see --guesses)",
    )
    parser.add_argument(
        "--grid",
        type=int,
        default=None,
        help="thresholds: G quantile thresholds instead of every distinct score level "
        "(with --o1 or --one-run: number of guess counts per side, default 20)",
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


def _add_one_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--one-run`` and the options it takes."""
    parser.add_argument(
        "--one-run",
        choices=METHODS,
        default=None,
        help="print a one-run lower bound on eps at --delta (labels: 1 = the record was "
        "trained on by a fair coin, 0 = not): steinke = Steinke et al. 2023, fdp = the "
        "Gaussian f-DP bound of Mahloujifar et al. 2025 (also prints its GDP mu); guesses "
        "on both ends of the scores, abstaining in between",
    )
    parser.add_argument(
        "--delta",
        type=float,
        default=None,
        help=f"with --one-run: the delta at which eps is stated (default {DEFAULT_DELTA:g}; "
        "steinke also takes 0, fdp needs it positive)",
    )
    parser.add_argument(
        "--guesses",
        type=int,
        default=None,
        help="with --one-run: make K guesses, the ceil(K/2) highest scores 'included' and the "
        "floor(K/2) lowest 'excluded': one test, a bound at level --beta. Without it the best "
        "pair of a grid of guess counts is printed, each pair tested at beta / pairs (a union "
        "bound: a lower bound at level --beta)",
    )
    parser.add_argument(
        "--idealised",
        action="store_true",
        help="with --one-run: test every pair of the grid at --beta and print the best under "
        "eps_idealised (the search is not paid for: not a bound at level --beta; how papers "
        "report their best guessing rule)",
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
            if not math.isfinite(score):
                raise InputError(
                    f"{path}: column 'score', line {row_no}: not a finite score: {raw_score!r}"
                )
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
    from panoramia_fl.ml.npz import npz_headers, read_npz

    files = npz_headers(path)
    for key in ("scores", "labels"):
        if key not in files:
            raise InputError(
                f"{path}: missing array '{key}' (file has: {', '.join(files) or 'none'})"
            )
    data = read_npz(path, ["scores", "labels"])
    try:
        scores = np.asarray(data["scores"], dtype=float).ravel()
    except (TypeError, ValueError):
        raise InputError(f"{path}: array 'scores' is not numeric") from None
    raw = np.asarray(data["labels"]).ravel()
    if not np.isfinite(scores).all():
        idx = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise InputError(
            f"{path}: array 'scores': not a finite score at index {idx}: {scores[idx]!r}"
        )
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
    path: Path,
    scores: np.ndarray,
    labels: np.ndarray,
    beta: float,
    grid: int | None,
    *,
    guessed: str = "members",
) -> dict[str, Any]:
    """The PANORAMIA-style bound's JSON fields for one (already oriented) score vector
    (``guessed``: what its label 1 stands for). Never a negative bound: a file whose ceiling
    (a perfect scorer's bound) is not above 0 is refused, naming its counts; a bound below 0
    (no evidence at ``beta``) reads 0, its raw value beside it."""
    from panoramia_fl.audit.stats.bounds import ceiling, lower_bound, thresholds_tried

    summary = lower_bound(scores, labels, beta=beta, threshold_grid=grid)
    top = ceiling(labels, beta=beta, threshold_grid=grid)
    if not top > 0:
        raise InputError(
            f"{path}: {labels.size} rows ({int(labels.sum())} {guessed}) are too few for a "
            f"bound at beta={beta:g}: even a perfect scorer's bound (the ceiling, {top:.2f}) "
            f"is not above 0; a positive ceiling needs more than log2(thresholds / beta) "
            f"{guessed}"
        )
    fields = dataclasses.asdict(summary)
    if fields["lower_bound"] < 0:
        fields["lower_bound_raw"] = fields["lower_bound"]
        fields["lower_bound"] = 0.0
        fields["clamped"] = (
            "the test found no evidence at this beta: its bound (the logit of the precision's "
            "lower confidence limit) is below 0, read as 0 (an epsilon bound is never negative)"
        )
    return {
        "bound": "clopper_pearson",
        **fields,
        "ceiling": top,
        "thresholds_tried": thresholds_tried(scores, threshold_grid=grid),
        "file": str(path),
        "n": int(labels.size),
        "n_members": int(labels.sum()),
    }


def _two_sided(
    path: Path, scores: np.ndarray, labels: np.ndarray, beta: float, grid: int | None
) -> dict[str, Any]:
    """Member and non-member sides, each at ``beta / 2``; ``max_bound`` holds at ``beta``."""
    from panoramia_fl.audit.panoramia.sides import SIDES, oriented

    half = _check_beta(beta) / 2
    sides: dict[str, dict[str, Any]] = {
        side: _clopper_pearson(
            path, *oriented(scores, labels, side), half, grid, guessed=f"{side}s"
        )
        for side in SIDES
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


def _one_run(
    path: Path, scores: np.ndarray, labels: np.ndarray, args: argparse.Namespace
) -> dict[str, Any]:
    """The one-run bound's JSON fields; ``idealised`` says whether the level pays for the
    search over guess counts."""
    from panoramia_fl.audit.stats.one_run import one_run_bound

    kwargs = {} if args.grid is None else {"grid_size": args.grid}
    bound = one_run_bound(
        scores,
        labels,
        method=args.one_run,
        beta=args.beta,
        delta=DEFAULT_DELTA if args.delta is None else args.delta,
        guesses=args.guesses,
        idealised=args.idealised,
        **kwargs,
    )
    if bound.idealised:
        note = (
            f"idealised: the best of {bound.n_pairs_tried} guessing rules, each tested at "
            f"beta={bound.beta!r}; the search over guess counts is not paid for, so this is "
            "not a bound at level beta (drop --idealised for one)"
        )
    elif args.guesses is None:
        note = (
            f"the best of {bound.n_pairs_tried} guessing rules, each tested at "
            f"beta / {bound.n_pairs_tried} (a union bound): a lower bound at level "
            f"beta={bound.beta!r}"
        )
    else:
        note = (
            "one guessing rule fixed before the scores were read: a bound at level "
            f"beta={bound.beta!r}"
        )
    fields = dataclasses.asdict(bound)
    if bound.idealised:
        fields["eps_idealised"] = fields.pop("eps_lb")
    return {
        "bound": f"one_run_{bound.method}",
        "method_label": METHOD_LABELS[bound.method],
        **fields,
        "note": note,
        "file": str(path),
        "n_members": int(labels.sum()),
    }


def run(args: argparse.Namespace) -> int:
    """Compute the bound for ``args.file`` and print one JSON object; return the exit code."""
    path: Path = Path(args.file)
    one_run = getattr(args, "one_run", None)
    if one_run is not None and (args.o1 or getattr(args, "two_sided", False)):
        print(
            f"{ERROR_PREFIX}--one-run cannot be combined with --o1 or --two-sided: it already "
            "counts both kinds of guesses",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if one_run is None and (
        getattr(args, "guesses", None) is not None or getattr(args, "delta", None) is not None
    ):
        print(f"{ERROR_PREFIX}--guesses and --delta need --one-run", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "idealised", False) and (one_run is None or args.guesses is not None):
        print(
            f"{ERROR_PREFIX}--idealised needs --one-run and a search (not --guesses)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if getattr(args, "two_sided", False) and args.o1:
        print(
            f"{ERROR_PREFIX}--two-sided and --o1 cannot be combined: the O(1) bound already counts "
            "both member and non-member guesses",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        scores, labels = read_scores(path)
        if one_run is not None:
            out = _one_run(path, scores, labels, args)
        elif args.o1:
            from panoramia_fl.audit.stats.o1 import o1_lower_bound

            kwargs = {} if args.grid is None else {"grid_size": args.grid}
            o1 = o1_lower_bound(scores, labels, beta=args.beta, **kwargs)
            extra = {"file": str(path), "n": int(labels.size), "n_members": int(labels.sum())}
            out = {"bound": "o1", **dataclasses.asdict(o1), **extra}
        elif getattr(args, "two_sided", False):
            out = _two_sided(path, scores, labels, args.beta, args.grid)
        else:
            out = _clopper_pearson(path, scores, labels, args.beta, args.grid)
    except InputError as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        # bounds' own checks (one label only, beta out of range, ...): name the file too.
        print(f"{ERROR_PREFIX}{path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(json_safe(out), allow_nan=False))
    return 0
