"""Builders the test modules share: hand-built audit results and run directories (written
per the run files' contracts), a run directory's files and its report as the CLI writes it,
report-side blocks (canaries, the client-level DP ledger, by-round lines), and small IDX
image folders. Tests import them from here, never from one another."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from panoramia_fl.audit.canaries.gradient_canaries import (
    GradientCanaryResult,
    gradient_canary_audit,
)
from panoramia_fl.audit.inversion.inversion_result import InversionResult
from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import (
    AuditFlags,
    BoundSummary,
    ClassSliceResult,
    Curve,
    Interval,
    PanoramiaResult,
    RepeatResult,
    RocSummary,
    SideRepeat,
    SideResult,
    TwoSidedRepeat,
    TwoSidedResult,
)
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.reporting import ReportFiles, RunInputs, load_run, write_report, write_site_report
from panoramia_fl.reporting.site.site_report import site_report_paths
from panoramia_fl.simulations.config_file import report_config

# Per-record scores that must never leave audits/ (distinctive digits to search for).
SECRET_SCORES = [0.918273645512, 0.127364554321, 0.564738291023]


ERROR_TEXT = 'CUDA OOM in <script>alert("x")</script> | step 3\nTraceback & more'


def _summary(lb: float, beta: float) -> BoundSummary:
    return BoundSummary(
        lower_bound=lb,
        threshold=0.5,
        predictions=40,
        true_positives=30,
        precision=0.75,
        recall=0.6,
        beta=beta,
    )


def _curve(scale: float) -> Curve:
    recall = [0.1, 0.3, 0.5, 0.7, 0.9]
    precision = [min(1.0, 0.55 + scale * (1 - r)) for r in recall]
    bound = [scale * 3 * (1 - r) for r in recall]
    return Curve(recall=recall, precision=precision, bound=bound)


FPR_GRID = [10.0 ** (-3 + 3 * i / 10) for i in range(11)]


NO_FLAGS = AuditFlags(saturated=False, c_lb_not_tight=False)


def power_roc(power: float) -> RocSummary:
    """A concave log-log ROC (TPR = FPR**power) whose lowest point found no member."""
    tpr = [0.0] + [fpr**power for fpr in FPR_GRID[1:]]
    return RocSummary(
        auc=round(1 - 0.5 * power, 6),
        tpr_at_fpr={"0.01": 0.01**power, "0.001": 0.0},
        fpr=FPR_GRID,
        tpr=tpr,
    )


def _rocs(with_rm_rn: bool) -> dict[str, RocSummary]:
    rocs = {"baseline": power_roc(0.9), "mia": power_roc(0.5)}
    return rocs | {"rm_rn": power_roc(0.7)} if with_rm_rn else rocs


def _side_repeat(
    c: float, ce: float, *, ceiling: float, beta: float, rm_rn: float | None
) -> SideRepeat:
    return SideRepeat(
        c_lb=c,
        c_eps_lb=ce,
        eps_tilde=max(0.0, ce - c),
        ceiling=ceiling,
        baseline=_summary(c, beta),
        mia=_summary(ce, beta),
        rm_rn_eps_lb=rm_rn,
        rm_rn_ceiling=None if rm_rn is None else ceiling - 0.5,
    )


def _two_sided_repeat(
    c: float, ce: float, *, ceiling: float, beta: float, gain: float, rm_rn: float | None
) -> TwoSidedRepeat:
    """Member side 0.1 below the one-sided bounds (beta/4); non-member side ``gain`` above."""
    member = _side_repeat(c - 0.1, ce - 0.1, ceiling=ceiling, beta=beta, rm_rn=rm_rn)
    nonmember = _side_repeat(
        c, ce + gain, ceiling=ceiling, beta=beta, rm_rn=None if rm_rn is None else rm_rn + 0.25
    )
    return TwoSidedRepeat(
        beta=beta,
        member=member,
        nonmember=nonmember,
        eps_tilde=max(member.eps_tilde, nonmember.eps_tilde),
        rm_rn_eps_lb=nonmember.rm_rn_eps_lb,  # the larger side's (0.25 above the member's)
    )


def _interval_or_none(values: list[float | None]) -> Interval | None:
    """The repeats' interval of a bound every repeat has, None when none has it."""
    present = [v for v in values if v is not None]
    return Interval.of(present) if present else None


def _side_result(sides: list[SideRepeat], flags: AuditFlags) -> SideResult:
    rm_rn = [s.rm_rn_eps_lb for s in sides]
    return SideResult(
        c_lb=Interval.of([s.c_lb for s in sides]),
        c_eps_lb=Interval.of([s.c_eps_lb for s in sides]),
        eps_tilde=Interval.of([s.eps_tilde for s in sides]),
        ceiling=sides[0].ceiling,
        flags=flags,
        rm_rn_eps_lb=_interval_or_none(rm_rn),
        rm_rn_ceiling=sides[0].rm_rn_ceiling,
    )


def _two_sided_result(
    games: list[TwoSidedRepeat], side_flags: dict[str, AuditFlags]
) -> TwoSidedResult:
    rm_rn = [g.rm_rn_eps_lb for g in games]
    return TwoSidedResult(
        beta=games[0].beta,
        eps_tilde=Interval.of([g.eps_tilde for g in games]),
        member=_side_result([g.member for g in games], side_flags.get("member", NO_FLAGS)),
        nonmember=_side_result([g.nonmember for g in games], side_flags.get("nonmember", NO_FLAGS)),
        rm_rn_eps_lb=_interval_or_none(rm_rn),
    )


def make_result(
    c_lbs: list[float],
    c_eps_lbs: list[float],
    *,
    ceiling: float = 3.5,
    saturated: bool = False,
    not_tight: bool = False,
    capped: bool = False,
    rm_rn: list[float] | None = None,
    o1: list[float] | None = None,
    o1_fdp: list[tuple[float, float]] | None = None,
    scores: bool = False,
    generator_kind: str = "cgan",
    two_sided: bool = True,
    nonmember_gain: float = 0.5,
    side_flags: dict[str, AuditFlags] | None = None,
) -> PanoramiaResult:
    """A real PanoramiaResult whose eps_tilde is max(0, c_eps_lb - c_lb) per repeat.

    With ``two_sided`` (schema version 2) it also carries the two-sided game, whose
    non-member side reads ``nonmember_gain`` more than the one-sided game, ROC summaries
    (``rm_rn`` with ``rm_rn``) and the bound levels. ``o1_fdp``: O(1)'s f-DP ``(eps, mu)``
    per repeat, at delta 1e-5.
    """
    beta = 0.05
    eps = [max(0.0, ce - c) for c, ce in zip(c_lbs, c_eps_lbs)]
    games = [
        _two_sided_repeat(
            c,
            ce,
            ceiling=ceiling,
            beta=beta / 4,
            gain=nonmember_gain,
            rm_rn=None if rm_rn is None else rm_rn[i],
        )
        for i, (c, ce) in enumerate(zip(c_lbs, c_eps_lbs))
    ]
    rocs = _rocs(rm_rn is not None) if two_sided else {}
    levels = {"c_lb": beta / 2, "c_eps_lb": beta / 2, "two_sided_each": beta / 4}
    if rm_rn is not None:
        levels |= {"rm_rn": beta / 2, "rm_rn_two_sided_each": beta / 4, "o1": beta}
        levels |= {"o1_fdp": beta}
    repeats = [
        RepeatResult(
            seed=i,
            m=200,
            one_sided=SideRepeat(
                c_lb=c,
                c_eps_lb=ce,
                eps_tilde=e,
                ceiling=ceiling,
                baseline=_summary(c, beta / 2),
                mia=_summary(ce, beta / 2),
                rm_rn_eps_lb=None if rm_rn is None else rm_rn[i],
            ),
            baseline_curve=_curve(0.2 + 0.05 * i),
            mia_curve=_curve(0.4 + 0.05 * i),
            baseline_auc=0.6 + 0.01 * i,
            mia_auc=0.7 + 0.01 * i,
            o1_eps_lb=None if o1 is None else o1[i],
            o1_eps_lb_fdp=None if o1_fdp is None else o1_fdp[i][0],
            o1_fdp_mu=None if o1_fdp is None else o1_fdp[i][1],
            selected={"baseline": {"epochs": 5}},
            scores={"baseline": SECRET_SCORES, "mia": SECRET_SCORES} if scores else None,
            two_sided=games[i] if two_sided else None,
            roc=rocs,
            members_shown=100 if two_sided else None,
        )
        for i, (c, ce, e) in enumerate(zip(c_lbs, c_eps_lbs, eps))
    ]
    reasons = []
    if saturated:
        reasons.append("c_lb within 0.3 of the ceiling")
    if not_tight:
        reasons.append("eps_tilde above the RM;RN interval")
    if capped:
        reasons.append("RM;RN's ceiling leaves no room for eps_tilde")
    return PanoramiaResult(
        modality="image",
        generator_kind=generator_kind,
        beta=beta,
        one_sided=SideResult(
            c_lb=Interval.of(c_lbs),
            c_eps_lb=Interval.of(c_eps_lbs),
            eps_tilde=Interval.of(eps),
            ceiling=ceiling,
            flags=AuditFlags(
                saturated=saturated, c_lb_not_tight=not_tight, rm_rn_capped=capped, reasons=reasons
            ),
            rm_rn_eps_lb=None if rm_rn is None else Interval.of(rm_rn),
        ),
        repeats=repeats,
        sizes={"m": 200, "generator": 300},
        quality={"generator_fid_proxy": 0.4},
        timings={"total": 12.5},
        o1_eps_lb=None if o1 is None else Interval.of(o1),
        o1_eps_lb_fdp=None if o1_fdp is None else Interval.of([e for e, _ in o1_fdp]),
        o1_fdp_mu=None if o1_fdp is None else Interval.of([mu for _, mu in o1_fdp]),
        delta=None if o1_fdp is None else 1e-5,
        two_sided=_two_sided_result(games, side_flags or {}) if two_sided else None,
        roc=rocs,
        levels=levels if two_sided else {},
    )


def write_run(
    run_dir: Path,
    *,
    audits: dict[int, dict[str, Any]],
    n_sites: int,
    dp: float | None = None,
    n_rounds: int = 3,
    accuracy: float = 0.8,
) -> Path:
    """A run directory per the contract's layout."""
    (run_dir / "audits").mkdir(parents=True)
    dp_cfg = {"enabled": True, "epsilon": dp, "delta": 1e-5} if dp else {"enabled": False}
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump({"name": run_dir.name, "seed": 0, "rounds": n_rounds, "dp": dp_cfg})
    )
    sites = [
        {
            "site_id": i,
            "train": 600 + i,
            "holdout": 100,
            "test": 100,
            "label_histogram": {"train": [60] * 10, "holdout": [10] * 10},
        }
        for i in range(n_sites)
    ]
    (run_dir / "partition.json").write_text(
        json.dumps({"sites": sites, "scheme": "iid", "seed": 0})
    )
    lines = []
    for r in range(1, n_rounds + 1):
        lines.append(
            json.dumps(
                {
                    "round": r,
                    "global_loss": 2.0 / r,
                    "global_accuracy": accuracy * r / n_rounds,
                    "sites": {
                        str(i): {
                            "train_loss": 2.1 / r + 0.01 * i,
                            "dp_epsilon": None if dp is None else dp * r / n_rounds,
                            "num_examples": 600 + i,
                        }
                        for i in range(n_sites)
                    },
                    "elapsed_s": 1.5 * r,
                }
            )
        )
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for site_id, audit in audits.items():
        (run_dir / "audits" / f"site-{site_id}.json").write_text(json.dumps(audit))
    return run_dir


def ok_audit(site_id: int, result: PanoramiaResult, *, dp: float | None = None) -> dict[str, Any]:
    return {
        "site_id": site_id,
        "status": "ok",
        "error": None,
        "n_members": 600 + site_id,
        "n_holdout": 100,
        "dp_epsilon": dp,
        "elapsed_s": 20.0,
        "result": json_safe(result),
    }


def schema_2(result: dict[str, Any]) -> dict[str, Any]:
    """A result's JSON (schema 3) as schema 2 wrote it: the one-sided game's keys in the
    result and in each repeat, not under ``one_sided``."""
    flat = {k: v for k, v in result.items() if k != "one_sided"} | result["one_sided"]
    flat["repeats"] = [
        {k: v for k, v in r.items() if k != "one_sided"} | r["one_sided"] for r in result["repeats"]
    ]
    return flat | {"schema_version": 2}


def failed_audit(site_id: int) -> dict[str, Any]:
    return {
        "site_id": site_id,
        "status": "failed",
        "error": ERROR_TEXT,
        "n_members": 600,
        "n_holdout": 100,
        "dp_epsilon": None,
        "elapsed_s": 3.0,
        "result": None,
    }


def by_round_lines(rounds: list[int]) -> list[RoundLeakage]:
    """Lines whose interval excludes 0 from the second round on."""
    lines = []
    for k, r in enumerate(rounds):
        mean = 0.4 * k
        iv = Interval(mean=mean, std=0.1, low=mean - 0.3, high=mean + 0.3, n=5)
        line = RoundLeakage(r, iv, "nonmember", iv, 0.5 + 0.05 * k, 0.01 * k, 0.0, 0.6 + 0.1 * k)
        lines.append(line)
    return lines


def with_class_slices(result: PanoramiaResult) -> PanoramiaResult:
    """``result`` with two label slices, the second one exposed."""
    slices = [
        ClassSliceResult(0, 120, Interval(0.0, 0.0, 0.0, 0.0, 2), None, 0.006, False),
        ClassSliceResult(
            1, 110, Interval(1.5, 0.1, 0.6, 2.4, 2), Interval(0.2, 0.0, 0.2, 0.2, 2), 0.006, False
        ),
    ]
    return dataclasses.replace(result, per_class=slices)


LEDGER_ACCOUNTANT = "Flower RdpAccountant (dp-accounting RDP)"


QUALITY = {
    "target_accuracy_members": 0.97,
    "target_accuracy_nonmembers": 0.81,
    "target_loss_members": 0.125,
    "target_loss_nonmembers": 0.5625,
}


def canary_block(
    eps_lb: float, high: float, fdp: tuple[float, float] | None = None
) -> dict[str, Any]:
    """A canary block; ``fdp``: its f-DP ``(eps, mu)`` at delta 1e-5 (None: an older file)."""
    fdp_fields = (
        {}
        if fdp is None
        else {"eps_lb_fdp": fdp[0], "fdp_mu": fdp[1], "fdp_delta": 1e-5, "fdp_guesses": 60}
    )
    return fdp_fields | {
        "n_canaries": 200,
        "n_included": 97,
        "eps_lb": eps_lb,
        "eps_interval": [eps_lb, high],
        "guesses": 60,
        "correct": 58,
        "member_guesses": 30,
        "nonmember_guesses": 30,
        "n_pairs_tried": 323,
        "beta": 0.05,
        "score": "loss",
        "kind": "noise_image",
    }


def with_quality(result: PanoramiaResult) -> PanoramiaResult:
    return dataclasses.replace(result, quality=dict(QUALITY))


def client_dp_accounting(
    sites: dict[int, tuple[float, float]], *, delta: float = 1e-5
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "accountant": LEDGER_ACCOUNTANT,
        "noise_multiplier": 1.0,
        "clipping": "fixed",
        "clipping_side": "server",
        "clipping_norm": 1.0,
        "delta": delta,
        "population_size": len(sites),
        "sites_per_round": len(sites),
        "sampling": "no-amplification",
        "neighboring_relation": "add-or-remove-one site",
        "rounds_done": 3,
        "sites": {
            str(sid): {"rounds": [1, 2, 3], "epsilon": eps, "epsilon_record": eps_rec}
            for sid, (eps, eps_rec) in sites.items()
        },
    }


def set_config(run: Path, **dp: Any) -> None:
    """Rewrite config.yaml as the new harness resolves it (dp.level, audit.input_canaries)."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    canaries = dp.pop("canaries", 0)
    config["dp"] = {
        "level": "none",
        "enabled": False,
        "delta": 1e-5,
        "accountant": "rdp",
        "client": {"noise_multiplier": None, "clipping": "fixed", "clipping_norm": 1.0},
    } | dp
    config["audit"] = {"enabled": True, "input_canaries": canaries}
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def _mean(estimate: dict[str, Any] | None) -> float | None:
    return None if estimate is None else estimate["mean"]


def flat(site: dict[str, Any]) -> dict[str, Any]:
    """The numbers these tests check, read from a site of report.json at their nested paths."""
    p, c, a = site["privacy"], site["checks"], site["audit"]
    canary = p["canary"] or {}
    one = a and a["one_sided"]
    two = a and a["two_sided"]
    return {
        "dp_epsilon": p["dp_epsilon"],
        "dp_epsilon_source": p["dp_epsilon_source"],
        "dp_delta": p["dp_delta"],
        "dp_epsilon_client": p["client_epsilon"],
        "dp_epsilon_client_record": p["client_epsilon_record"],
        "canaries": p["canaries"],
        "canary": p["canary"],
        "canary_eps_lb": canary.get("eps_lb"),
        "canary_eps_interval": canary.get("eps_interval"),
        "canary_eps_lb_fdp": canary.get("eps_lb_fdp"),
        "canary_fdp_mu": canary.get("fdp_mu"),
        "bound_violations": c["bound_violations"],
        "eps_tilde_above_accountant": c["eps_tilde_above_accountant"] is not None,
        "eps_tilde_above_accountant_reason": c["eps_tilde_above_accountant"],
        "best_eps_lb": c["best_eps_lb"],
        "best_eps_lb_method": c["best_eps_lb_method"],
        "fdp_delta": c["fdp_delta"],
        "eps_tilde": _mean(one and one["eps_tilde"]),
        "eps_tilde_two_sided": _mean(two and two["eps_tilde"]),
        "o1_eps_lb": _mean(a and a["o1_eps_lb"]),
        "o1_eps_lb_fdp": _mean(a and a["o1_eps_lb_fdp"]),
        "o1_fdp_mu": a and a["o1_fdp_mu"],
        "rm_rn_eps_lb": _mean(one and one["rm_rn_eps_lb"]),
    }


def run_files(run_dir: Path) -> RunLayout:
    """A test's run directory as the code under test takes it."""
    return RunLayout(run_dir)


def write_report_of(run_dir: Path) -> ReportFiles:
    """The run's report as ``panoramia-fl report RUN_DIR`` writes it."""
    layout = run_files(run_dir)
    return write_report(layout, report_config(layout))


def site_report_of(run_dir: Path, site_id: int) -> ReportFiles:
    """One site's report as ``panoramia-fl report RUN_DIR --site ID`` writes it."""
    layout = run_files(run_dir)
    return write_site_report(layout, site_id, report_config(layout, optional=True))


def load_run_of(run_dir: Path) -> RunInputs:
    """The run's report inputs, its config read as the CLI reads it."""
    layout = run_files(run_dir)
    return load_run(layout, report_config(layout))


def site_pages(run_dir: Path, site_id: int) -> ReportFiles:
    """Where the run's report puts site ``site_id``'s page."""
    return site_report_paths(run_files(run_dir), site_id)


TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "splits": {"generator": 100, "train": 60, "val": 30},
    "generator": {"kind": "cgan", "epochs": 1},
    "classifier": {"epochs": [1], "gbm_iterations": [20], "gbm_learning_rates": [0.1]},
    "calibration": {"reference_models": 0},
}
"""Audit settings for runs on 8x8 digits whose audit is not what is checked: one epoch each,
one boosting candidate, no reference models (their training is a Ray session of its own)."""


def inversion_entry(round_: int, quality: float, baseline: float) -> InversionResult:
    """An inversion audit's summary of one attacked round (a FedSGD batch of 64 images)."""
    return InversionResult(
        round=round_,
        attack="fedsgd",
        modality="image",
        measure="ssim",
        threshold=0.6,
        n_records=64,
        n_dummies=64,
        n_scored=64,
        quality_mean=quality,
        quality_median=quality,
        quality_max=min(1.0, quality + 0.1),
        share_rebuilt=1.0 if quality >= 0.6 else 0.0,
        psnr_mean=20.0,
        baseline_quality_mean=baseline,
        baseline_quality_max=baseline + 0.1,
        baseline_share_rebuilt=0.0,
        baseline_psnr_mean=9.0,
        match_loss=0.01,
        iterations=300,
        seconds=42.0,
        dp_epsilon=None,
        step_budget=300,
        baseline_iterations=300,
        cut_short=False,
    )


def white_box_audit() -> GradientCanaryResult:
    """A site's white-box audit (mechanism level only) of 400 gradient canaries, their scores
    drawn by hand: a real audit without training, at beta = 0.05."""
    rng = np.random.default_rng(0)
    coins = rng.integers(0, 2, 400).astype(bool)
    return gradient_canary_audit(
        {"mechanism": rng.normal(size=400) + coins},
        coins,
        steps=100,
        rounds=2,
        overhead_s=1.0,
        sample_rate=0.05,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        beta=0.05,
        delta=1e-5,
        seed=0,
    )
