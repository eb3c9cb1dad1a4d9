"""Properties of the PANORAMIA bounds (audit.stats.bounds) and the ``bounds`` CLI command."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from panoramia_fl.audit.stats import bounds
from panoramia_fl.audit.stats.bounds import (
    approx_dp_lower_bound,
    bound_curve,
    ceiling,
    closeness_relaxed_lower_bound,
    hoeffding_lower_bound,
    lower_bound,
    thresholds_tried,
)
from panoramia_fl.audit.stats.o1 import o1_lower_bound
from panoramia_fl.simulations import cmd_bounds

REPO = Path(__file__).resolve().parents[1]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return -math.inf if p <= 0 else math.log(p / (1 - p))


def _cp_by_root(tp: int, r: int, level: float) -> float:
    """Largest p with P[Bin(r, p) >= tp] <= level, by root finding on the binomial tail."""
    if tp == 0:
        return 0.0
    return optimize.brentq(lambda p: stats.binom.sf(tp - 1, r, p) - level, 0.0, 1.0, xtol=1e-14)


def _reference(scores: np.ndarray, s: np.ndarray, beta: float) -> float:
    """Brute force: a loop over distinct levels, exact binomial tail, beta / n_levels."""
    levels = np.unique(scores)
    level = beta / levels.size
    best = -math.inf
    for thr in levels:
        pred = scores >= thr
        best = max(best, _logit(_cp_by_root(int(s[pred].sum()), int(pred.sum()), level)))
    return best


def _game(rng: np.random.Generator, m: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, 2, m)
    s[:2] = [0, 1]  # both labels always present
    return rng.normal(size=m) + shift * s, s


# ---------------------------------------------------------------------------- correctness


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t, s = _game(rng, 120, 1.0)
    t = np.round(t, 1)  # many ties
    got = lower_bound(t, s, beta=0.05)
    assert got.lower_bound == pytest.approx(_reference(t, s, 0.05), abs=1e-7)
    pred = t >= got.threshold
    assert got.predictions == pred.sum()
    assert got.true_positives == s[pred].sum()
    assert got.precision == pytest.approx(got.true_positives / got.predictions)
    assert got.recall == pytest.approx(got.true_positives / s.sum())
    assert got.beta == 0.05
    assert thresholds_tried(t) == np.unique(t).size


def test_monotone_in_beta() -> None:
    rng = np.random.default_rng(1)
    t, s = _game(rng, 500, 1.5)
    values = [lower_bound(t, s, beta=b).lower_bound for b in (1e-6, 1e-3, 0.01, 0.05, 0.2, 0.9)]
    assert all(a < b for a, b in zip(values, values[1:]))


def test_invariant_to_increasing_transforms() -> None:
    rng = np.random.default_rng(2)
    t, s = _game(rng, 400, 1.0)
    t = np.round(t, 1)
    base = lower_bound(t, s, beta=0.05)
    for f in (lambda x: 3 * x + 7, np.exp, lambda x: x**3, lambda x: stats.rankdata(x)):
        other = lower_bound(f(t), s, beta=0.05)
        assert other.lower_bound == pytest.approx(base.lower_bound, abs=1e-12)
        assert (other.predictions, other.true_positives) == (
            base.predictions,
            base.true_positives,
        )
        grid_base = lower_bound(t, s, beta=0.05, threshold_grid=7)
        grid_other = lower_bound(f(t), s, beta=0.05, threshold_grid=7)
        assert grid_other.lower_bound == pytest.approx(grid_base.lower_bound, abs=1e-12)


def test_perfect_scorer_and_ceiling() -> None:
    m, r, beta = 300, 140, 0.05
    s = np.zeros(m, dtype=int)
    s[:r] = 1
    np.random.default_rng(3).shuffle(s)
    scores = s * 10.0 + np.random.default_rng(4).random(m)  # members first, distinct scores
    expected = _logit((beta / m) ** (1 / r))
    got = lower_bound(scores, s, beta=beta)
    assert got.lower_bound == pytest.approx(expected, rel=1e-10)
    assert (got.predictions, got.true_positives) == (r, r)
    assert ceiling(s, beta=beta) == pytest.approx(expected, rel=1e-10)
    # With a grid of G thresholds, the largest grid rank <= r: ceil(7 * 300 / 16) = 132.
    assert ceiling(s, beta=beta, threshold_grid=16) == pytest.approx(
        _logit((beta / 16) ** (1 / 132)), rel=1e-10
    )


def test_ceiling_at_the_papers_game_size() -> None:
    # m = 1,500 slots, ~750 members, beta = 0.025 (a PANORAMIA-sized game) -> ~4.2.
    s = np.zeros(1500, dtype=int)
    s[:750] = 1
    value = ceiling(s, beta=0.025)
    assert value == pytest.approx(_logit((0.025 / 1500) ** (1 / 750)), rel=1e-12)
    assert 4.15 < value < 4.25


def test_hoeffding_never_above_clopper_pearson() -> None:
    rng = np.random.default_rng(5)
    for shift in (0.0, 0.5, 2.0, 5.0):
        t, s = _game(rng, 300, shift)
        h = hoeffding_lower_bound(t, s, beta=0.05).lower_bound
        assert h <= lower_bound(t, s, beta=0.05).lower_bound
    # At one threshold the formula is the paper's Equation (1).
    t, s = _game(rng, 300, 1.0)
    one = hoeffding_lower_bound(t, s, beta=0.05, threshold_grid=1)
    p = s.mean() - math.sqrt(math.log(1 / 0.05) / (2 * 300))
    assert one.lower_bound == pytest.approx(_logit(p))


def test_grid_option() -> None:
    rng = np.random.default_rng(6)
    t, s = _game(rng, 200, 1.0)
    g = 10
    got = lower_bound(t, s, beta=0.05, threshold_grid=g)
    assert thresholds_tried(t, threshold_grid=g) == g
    order = np.sort(t)[::-1]
    best = -math.inf
    for j in range(1, g + 1):
        thr = order[math.ceil(j * t.size / g) - 1]
        pred = t >= thr
        best = max(best, _logit(_cp_by_root(int(s[pred].sum()), int(pred.sum()), 0.05 / g)))
    assert got.lower_bound == pytest.approx(best, abs=1e-7)
    # Distinct scores and G = m: the grid is every level.
    assert lower_bound(t, s, beta=0.05, threshold_grid=t.size).lower_bound == pytest.approx(
        lower_bound(t, s, beta=0.05).lower_bound
    )
    with pytest.raises(ValueError, match="threshold_grid"):
        lower_bound(t, s, beta=0.05, threshold_grid=0)


def test_bound_curve() -> None:
    rng = np.random.default_rng(7)
    t, s = _game(rng, 300, 1.5)
    full = lower_bound(t, s, beta=0.05)
    grid = np.linspace(0, 1, 11)
    curve = bound_curve(t, s, beta=0.05, recall_grid=grid)
    assert curve.recall == pytest.approx(list(grid))
    assert len(curve.precision) == len(curve.bound) == grid.size
    assert max(curve.bound) <= full.lower_bound + 1e-12
    # Recall 1 is first reached at the lowest-scoring member.
    assert curve.precision[-1] == pytest.approx(s.sum() / (t >= t[s == 1].min()).sum())
    # Every achievable recall in the grid: the curve's max is the lower bound itself.
    n_mem = int(s.sum())
    dense = bound_curve(t, s, beta=0.05, recall_grid=np.arange(n_mem + 1) / n_mem)
    assert max(dense.bound) == pytest.approx(full.lower_bound, abs=1e-12)
    with pytest.raises(ValueError, match="recall_grid"):
        bound_curve(t, s, beta=0.05, recall_grid=[1.5])


# ------------------------------------------------------------------------------- coverage


def test_coverage_union_bound() -> None:
    # Every prediction is a member with probability exactly sigmoid(c), independently of the
    # scores: tp at every threshold ~ Binomial(r, sigmoid(c)).
    rng = np.random.default_rng(8)
    c, beta, trials, m = 1.0, 0.05, 1000, 200
    exceed = 0
    for _ in range(trials):
        s = (rng.random(m) < _sigmoid(c)).astype(int)
        s[:2] = [0, 1]
        exceed += lower_bound(rng.random(m), s, beta=beta).lower_bound > c
    assert exceed <= beta * trials + 3 * math.sqrt(trials * beta * (1 - beta))


def test_coverage_single_test_is_exact() -> None:
    # One threshold (all m records): the rejection rate is the exact binomial tail beyond
    # the critical tp, which is <= beta and close to it. Checks the level, not only validity.
    rng = np.random.default_rng(9)
    c, beta, trials, m = 0.5, 0.05, 1000, 200
    p = _sigmoid(c)
    crit = next(k for k in range(m + 1) if _logit(_cp_by_root(k, m, beta)) > c)
    rate = stats.binom.sf(crit - 1, m, p)
    assert 0.02 < rate <= beta
    exceed = 0
    for _ in range(trials):
        s = (rng.random(m) < p).astype(int)
        exceed += lower_bound(rng.random(m), s, beta=beta, threshold_grid=1).lower_bound > c
    sd = math.sqrt(trials * rate * (1 - rate))
    assert abs(exceed - trials * rate) <= 3 * sd + 1
    assert exceed <= beta * trials + 3 * math.sqrt(trials * beta * (1 - beta))


# --------------------------------------------------------------------------- Appendix E


def test_worst_case_tail_is_the_linear_program() -> None:
    tp, r, p, mu = 12, 20, 0.4, 1.7
    f = np.arange(tp + 1)
    g = stats.binom.sf(tp - f - 1, r, p)
    # max E[g(F)] s.t. sum q = 1, sum f q <= mu, q >= 0.
    lp = optimize.linprog(-g, A_ub=[f], b_ub=[mu], A_eq=[np.ones_like(g)], b_eq=[1.0])
    assert bounds._worst_case_tail(tp, r, p, mu) == pytest.approx(-lp.fun, rel=1e-9)


def test_relaxations() -> None:
    rng = np.random.default_rng(10)
    t, s = _game(rng, 400, 2.0)
    plain = lower_bound(t, s, beta=0.05).lower_bound
    assert closeness_relaxed_lower_bound(t, s, beta=0.05, gamma=0.0).lower_bound == plain
    values = [
        closeness_relaxed_lower_bound(t, s, beta=0.05, gamma=g).lower_bound
        for g in (1e-10, 1e-8, 1e-7)
    ]
    assert plain > values[0] > values[1] > values[2]
    assert plain - values[0] < 0.05  # tiny gamma: nearly the plain bound
    dp = approx_dp_lower_bound(t, s, beta=0.05, gamma=1e-8, delta=1e-8).lower_bound
    assert dp < values[1]
    # E[F] = 2 m gamma >= tp / beta' somewhere: nothing can be rejected at all.
    assert closeness_relaxed_lower_bound(t, s, beta=0.05, gamma=0.5).lower_bound == -math.inf
    with pytest.raises(ValueError, match="gamma"):
        closeness_relaxed_lower_bound(t, s, beta=0.05, gamma=-1.0)


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("scores", "labels", "message"),
    [
        ([], [], "empty"),
        ([0.1, 0.2], [1, 1], "no non-members"),
        ([0.1, 0.2], [0, 0], "no members"),
        ([0.1, float("nan")], [0, 1], "NaN"),
        ([0.1, 0.2], [0, 2], "0 or 1"),
        ([0.1, 0.2, 0.3], [0, 1], "differ in length"),
    ],
)
def test_input_errors(scores: list, labels: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lower_bound(scores, labels, beta=0.05)


@pytest.mark.parametrize("beta", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_beta_out_of_range(beta: float) -> None:
    with pytest.raises(ValueError, match="beta"):
        lower_bound([0.1, 0.9], [0, 1], beta=beta)
    with pytest.raises(ValueError, match="beta"):
        ceiling([0, 1], beta=beta)


# ---------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="panoramia-fl")
    cmd_bounds.register(parser.add_subparsers(dest="command", required=True))
    return parser


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = _parser().parse_args(argv)
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_csv_and_npz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(11)
    t, s = _game(rng, 300, 1.5)
    csv_path = tmp_path / "scores.csv"
    lines = ["site,score,label"] + [f"a,{float(x)!r},{y}" for x, y in zip(t, s)]
    csv_path.write_text("\n".join(lines) + "\n")
    npz_path = tmp_path / "scores.npz"
    np.savez(npz_path, scores=t, labels=s)
    expected = lower_bound(t, s, beta=0.05)
    for path in (csv_path, npz_path):
        rc, out, _ = _run_cli(["bounds", str(path)], capsys)
        assert rc == 0
        got = json.loads(out)
        assert got["lower_bound"] == pytest.approx(expected.lower_bound, rel=1e-12)
        assert got["predictions"] == expected.predictions
        assert got["true_positives"] == expected.true_positives
        assert got["ceiling"] == pytest.approx(ceiling(s, beta=0.05))
        assert got["thresholds_tried"] == np.unique(t).size
        for key in ("threshold", "precision", "recall", "beta"):
            assert key in got
    rc, out, _ = _run_cli(["bounds", str(csv_path), "--beta", "0.01", "--grid", "20"], capsys)
    assert rc == 0
    got = json.loads(out)
    assert got["thresholds_tried"] == 20
    assert got["lower_bound"] == pytest.approx(
        lower_bound(t, s, beta=0.01, threshold_grid=20).lower_bound
    )
    rc, out, _ = _run_cli(["bounds", str(npz_path), "--o1"], capsys)
    assert rc == 0
    got = json.loads(out)
    o1 = o1_lower_bound(t, s, beta=0.05)
    assert got["bound"] == "o1" and got["n_pairs_tried"] == o1.n_pairs_tried
    assert got["lower_bound"] == pytest.approx(o1.lower_bound, rel=1e-12)
    assert (got["guesses"], got["correct"]) == (o1.guesses, o1.correct)
    assert got["lower_bound"] > 1.0  # a signal of 1.5 standard deviations is detected


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("score,member\n0.1,1\n0.2,0\n")
    rc, out, err = _run_cli(["bounds", str(bad)], capsys)
    assert rc == 2 and out == ""
    assert str(bad) in err and "'label'" in err

    labels = tmp_path / "labels.csv"
    labels.write_text("score,label\n0.1,1\n0.2,yes\n")
    rc, _, err = _run_cli(["bounds", str(labels)], capsys)
    assert rc == 2 and str(labels) in err and "'label'" in err and "line 3" in err

    npz = tmp_path / "x.npz"
    np.savez(npz, scores=np.arange(3.0))
    rc, _, err = _run_cli(["bounds", str(npz)], capsys)
    assert rc == 2 and str(npz) in err and "'labels'" in err

    one = tmp_path / "one.csv"
    one.write_text("score,label\n0.1,1\n0.2,1\n")
    rc, _, err = _run_cli(["bounds", str(one)], capsys)
    assert rc == 2 and str(one) in err and "non-members" in err

    rc, _, err = _run_cli(["bounds", str(tmp_path / "missing.csv")], capsys)
    assert rc == 2 and "missing.csv" in err


def test_cli_module_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    rows = [f"{1 - i / 100},1" for i in range(20)] + [f"{i / 100},0" for i in range(20)]
    path.write_text("score,label\n" + "\n".join(rows) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "panoramia_fl.simulations.cli",
            "bounds",
            str(path),
            "--beta",
            "0.1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["predictions"] == 20 and got["true_positives"] == 20
    assert got["lower_bound"] == pytest.approx(_logit((0.1 / 40) ** (1 / 20)))


def test_cli_never_prints_a_negative_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Too few rows for any positive bound: refused, naming the counts; no evidence: 0, the
    raw value beside it; an infinite score refused as NaN is; errors open as every
    panoramia-fl error does."""
    few = tmp_path / "few.csv"
    few.write_text("score,label\n0.9,1\n0.8,1\n0.3,0\n0.1,0\n")
    for extra in ([], ["--two-sided"]):
        rc, out, err = _run_cli(["bounds", str(few), *extra], capsys)
        assert rc == 2 and out == ""
        assert err.startswith(f"panoramia-fl: error: {few}: 4 rows (2 members")
        assert "too few for a bound" in err and "ceiling" in err
    rng = np.random.default_rng(2)
    t, s = rng.normal(size=400), rng.permutation(np.repeat([0, 1], 200))
    csv_path, _ = _write(tmp_path, "null", t, s)
    rc, out, _ = _run_cli(["bounds", str(csv_path)], capsys)
    got = json.loads(out)
    assert rc == 0 and got["lower_bound"] == 0.0 and got["lower_bound_raw"] < 0
    assert got["ceiling"] > 0 and "no evidence" in got["clamped"]
    inf = tmp_path / "inf.csv"
    inf.write_text("score,label\n0.9,1\ninf,1\n0.3,0\n")
    rc, out, err = _run_cli(["bounds", str(inf)], capsys)
    assert rc == 2 and out == "" and err.startswith("panoramia-fl: error: ")
    assert "line 3: not a finite score: 'inf'" in err
    _, npz_path = _write(tmp_path, "inf", np.array([0.9, np.inf, 0.3]), np.array([1, 1, 0]))
    rc, _, err = _run_cli(["bounds", str(npz_path)], capsys)
    assert rc == 2 and "not a finite score at index 1" in err


def _write(tmp_path: Path, name: str, t: np.ndarray, s: np.ndarray) -> tuple[Path, Path]:
    csv_path = tmp_path / f"{name}.csv"
    lines = ["score,label"] + [f"{float(x)!r},{int(y)}" for x, y in zip(t, s)]
    csv_path.write_text("\n".join(lines) + "\n")
    npz_path = tmp_path / f"{name}.npz"
    np.savez(npz_path, scores=t, labels=s)
    return csv_path, npz_path


def _without_file(side: dict) -> dict:
    return {k: v for k, v in side.items() if k != "file"}


def test_cli_two_sided_matches_flipped_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(5)
    t, s = _game(rng, 300, 1.0)
    files = _write(tmp_path, "scores", t, s)
    flipped = _write(tmp_path, "flipped", -t, 1 - s)
    for grid in ([], ["--grid", "15"]):
        for path, flipped_path in zip(files, flipped):
            rc, out, _ = _run_cli(
                ["bounds", str(path), "--two-sided", "--beta", "0.1", *grid], capsys
            )
            assert rc == 0
            got = json.loads(out)
            assert set(got) == {"two_sided", "beta", "member", "nonmember", "max_bound", "note"}
            assert got["two_sided"] is True and got["beta"] == pytest.approx(0.05)
            assert "beta/2" in got["note"]
            # Each side is today's single-sided output at beta / 2 ...
            rc, out, _ = _run_cli(["bounds", str(path), "--beta", "0.05", *grid], capsys)
            assert rc == 0
            assert got["member"] == json.loads(out)
            # ... and the non-member side is that output on (-score, 1 - label).
            rc, out, _ = _run_cli(["bounds", str(flipped_path), "--beta", "0.05", *grid], capsys)
            assert rc == 0
            assert _without_file(got["nonmember"]) == _without_file(json.loads(out))
            assert got["nonmember"]["file"] == str(path)
            assert got["nonmember"]["ceiling"] == pytest.approx(
                ceiling(1 - s, beta=0.05, threshold_grid=int(grid[1]) if grid else None)
            )
            if grid:
                assert got["member"]["thresholds_tried"] == 15
                assert got["nonmember"]["thresholds_tried"] == 15
            assert got["max_bound"] == max(
                got["member"]["lower_bound"], got["nonmember"]["lower_bound"]
            )


def test_cli_two_sided_nonmember_signal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The 200 lowest scores are all non-members; above them members and non-members mix.
    rng = np.random.default_rng(3)
    low = rng.uniform(0.0, 1.0, 200)
    high = rng.uniform(1.0, 2.0, 400)
    t = np.concatenate([low, high])
    s = np.concatenate([np.zeros(200, int), rng.permutation(np.repeat([0, 1], 200))])
    for path in _write(tmp_path, "low", t, s):
        rc, out, _ = _run_cli(["bounds", str(path), "--two-sided"], capsys)
        assert rc == 0
        got = json.loads(out)
        member, nonmember = got["member"]["lower_bound"], got["nonmember"]["lower_bound"]
        assert nonmember > 2.0
        assert member < 0.3
        assert got["max_bound"] == nonmember
        assert got["member"]["beta"] == got["nonmember"]["beta"] == pytest.approx(0.025)
        assert got["member"]["n_members"] == 200 and got["nonmember"]["n_members"] == 400
        # The 200 low non-members, all tp = r at level 0.025 / 600 thresholds.
        assert nonmember == pytest.approx(_logit((0.025 / 600) ** (1 / 200)), rel=1e-9)
    # Without --two-sided the output is unchanged: the member side only.
    rc, out, _ = _run_cli(["bounds", str(path)], capsys)
    assert rc == 0 and "two_sided" not in json.loads(out)


def test_cli_two_sided_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.csv"
    path.write_text("score,label\n0.9,1\n0.8,1\n0.3,0\n0.1,0\n")
    rc, out, err = _run_cli(["bounds", str(path), "--two-sided", "--o1"], capsys)
    assert rc == 2 and out == ""
    assert "--two-sided" in err and "--o1" in err
    # beta is checked before it is halved: 1.5 / 2 would otherwise pass.
    rc, out, err = _run_cli(["bounds", str(path), "--two-sided", "--beta", "1.5"], capsys)
    assert rc == 2 and out == "" and "beta" in err and str(path) in err
    rc, out, err = _run_cli(["bounds", str(tmp_path / "missing.npz"), "--two-sided"], capsys)
    assert rc == 2 and out == "" and "missing.npz" in err
    # A file that reads: both sides' bounds; the help says beta is shared.
    rows = [f"{1 - i / 100},1" for i in range(20)] + [f"{i / 100},0" for i in range(20)]
    path.write_text("score,label\n" + "\n".join(rows) + "\n")
    rc, out, _ = _run_cli(["bounds", str(path), "--two-sided", "--beta", "0.1"], capsys)
    assert rc == 0
    got = json.loads(out)
    assert got["member"]["predictions"] == 20 and got["nonmember"]["predictions"] == 20
    assert got["member"]["lower_bound"] == pytest.approx(_logit((0.05 / 40) ** (1 / 20)))
    sub = argparse.ArgumentParser(prog="panoramia-fl bounds")
    cmd_bounds._add_arguments(sub)
    assert "beta/2" in " ".join(sub.format_help().split())


def test_geometric_grid_is_one_test_per_count_fixed_by_m() -> None:
    k = bounds.geometric_counts(1000, 30)
    assert k[0] == 1 and k[-1] == 1000 and np.all(np.diff(k) > 0) and k.size <= 30
    rng = np.random.default_rng(5)
    s = rng.integers(0, 2, 1000)
    t = rng.normal(size=1000) + 1.5 * s
    got = lower_bound(t, s, beta=0.0125, threshold_grid=30, spacing="geometric")
    # By hand: the top-k records for each grid count, Clopper-Pearson at beta / |grid|.
    tp = np.cumsum(s[np.argsort(-t)])[k - 1]
    want = bounds.logit(bounds.clopper_pearson_lower(tp, k, 0.0125 / k.size)).max()
    assert got.lower_bound == pytest.approx(want)
    top = ceiling(s, beta=0.0125, threshold_grid=30, spacing="geometric")
    assert got.lower_bound <= top
    perfect = s * 10.0 + rng.random(1000)
    assert lower_bound(
        perfect, s, beta=0.0125, threshold_grid=30, spacing="geometric"
    ).lower_bound == pytest.approx(top)
