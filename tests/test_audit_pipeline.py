"""run_audit end to end on a small over-fitted digits model (real training, tiny budgets)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from panoramia_fl.audit import AuditConfig, PanoramiaResult, Records, run_audit
from panoramia_fl.audit.panoramia import components as comp
from panoramia_fl.audit.result import Interval
from panoramia_fl.audit.stats.one_run import gdp_eps
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task

CPU = torch.device("cpu")

TINY = {
    "classifier": {"gbm_iterations": [10, 30], "gbm_learning_rates": [0.1]},
    "helper_epochs": 2,
    "generator": {"kind": "reference_pool"},
}


@pytest.fixture(scope="module")
def site():
    torch.set_num_threads(1)
    ds = load_dataset("digits", options={"public_fraction": 0.5})
    task = build_task(
        "image",
        model_name="small_cnn",
        num_classes=10,
        input_shape=(1, 8, 8),
        model_options={"width": 16},
    )
    perm = np.random.default_rng(0).permutation(len(ds.x))
    mem, non = perm[:300], perm[300:500]
    model = task.make_model()
    task.train_model(model, ds.x[mem], ds.y[mem], epochs=25, seed=0, device=CPU)
    return {
        "task": task,
        "model": model,
        "members": Records(ds.x[mem], ds.y[mem]),
        "nonmembers": Records(ds.x[non], ds.y[non]),
        "pool": Records(ds.public_x, ds.public_y),
    }


def _audit(site, reference_models=None, **overrides) -> PanoramiaResult:
    cfg = AuditConfig(**{**TINY, "device": "cpu", **overrides})
    return run_audit(
        site["task"],
        site["model"],
        site["members"],
        cfg,
        nonmembers=site["nonmembers"],
        public_pool=site["pool"],
        reference_models=reference_models,
    )


@pytest.fixture(scope="module")
def result(site) -> PanoramiaResult:
    return _audit(site, repeats=2, return_scores=True)


def test_result_is_consistent(result: PanoramiaResult) -> None:
    assert result.generator_kind == "reference_pool" and result.modality == "image"
    assert len(result.repeats) == 2
    for rep in result.repeats:
        one = rep.one_sided
        assert one.eps_tilde == max(0.0, one.c_eps_lb - one.c_lb)
        # Scores are tie-broken, so no bound can pass the perfect scorer's.
        assert one.ceiling >= one.c_lb and one.ceiling >= one.c_eps_lb
        # c_lb and {c+eps}_lb are the baseline's and the MIA's bounds, clipped at 0.
        assert one.c_lb == max(0.0, one.baseline.lower_bound)
        assert one.c_eps_lb == max(0.0, one.mia.lower_bound)
        # RM;RN's game is as large as its members allow: a real ceiling, not passed.
        assert one.rm_rn_eps_lb is not None and one.rm_rn_ceiling is not None
        assert one.rm_rn_ceiling > 1.0 and one.rm_rn_eps_lb <= one.rm_rn_ceiling
        assert rep.o1_eps_lb is not None
        # O(1)'s f-DP reading: eps at the audit's delta of the GDP mu its guesses reject.
        assert rep.o1_eps_lb_fdp is not None and rep.o1_fdp_mu is not None
        assert rep.o1_eps_lb_fdp == pytest.approx(gdp_eps(mu=rep.o1_fdp_mu, delta=1e-5))
        assert len(rep.baseline_curve.recall) == len(rep.mia_curve.bound) == 20
        assert max(rep.mia_curve.bound) <= one.mia.lower_bound + 1e-12
        assert rep.scores is not None and len(rep.scores["mia"]) == rep.m
        assert set(rep.scores["membership"]) == {0.0, 1.0}
        assert set(rep.selected) == {"baseline", "mia"}
    assert result.one_sided.c_lb == Interval.of([r.one_sided.c_lb for r in result.repeats])
    assert result.one_sided.eps_tilde == Interval.of(
        [r.one_sided.eps_tilde for r in result.repeats]
    )
    assert result.one_sided.rm_rn_eps_lb == Interval.of(
        [r.one_sided.rm_rn_eps_lb for r in result.repeats]
    )
    assert result.o1_eps_lb == Interval.of([r.o1_eps_lb for r in result.repeats])
    assert result.o1_eps_lb_fdp == Interval.of([r.o1_eps_lb_fdp for r in result.repeats])
    assert result.delta == 1e-5 and result.levels["o1_fdp"] == result.beta
    assert result.one_sided.ceiling == pytest.approx(
        np.mean([r.one_sided.ceiling for r in result.repeats])
    )
    assert result.one_sided.ceiling >= result.one_sided.c_lb.mean
    s = result.sizes
    assert s["members"] == 300 and s["generator"] + s["train"] + s["val"] + s["m"] == 300
    assert s["synthetic_out"] == 300 - s["generator"]
    assert s["nonmembers"] == 200 and s["rm_rn_m"] >= 2
    for key in (
        "helper_accuracy_real_members",
        "target_accuracy_members",
        "baseline_auc",
        "mia_auc",
    ):
        assert key in result.quality
    # Every stage is timed, once per audit (summed over repeats), within the total.
    stages = {k: v for k, v in result.timings.items() if k != "total"}
    assert set(stages) == {
        "split",
        "generator_fit",
        "sampling",
        "helper",
        "reference_models",
        "features",
        "baseline",
        "mia",
        "rm_rn",
        "o1",
    }
    assert min(stages.values()) > 0 and sum(stages.values()) <= result.timings["total"]
    # The reference pool is real data: the baseline should not separate it from members.
    assert result.quality["baseline_auc"] < 0.75


def test_two_sided_game_is_consistent(result: PanoramiaResult) -> None:
    two = result.two_sided
    assert two is not None and two.beta == result.beta / 4
    for rep in result.repeats:
        one = rep.one_sided
        game = rep.two_sided
        assert game is not None
        for side in (game.member, game.nonmember):
            assert side.eps_tilde == max(0.0, side.c_eps_lb - side.c_lb)
            assert side.c_lb <= side.ceiling + 1e-9 and side.c_eps_lb <= side.ceiling + 1e-9
            assert side.rm_rn_eps_lb is not None and side.rm_rn_ceiling is not None
        assert game.eps_tilde == max(game.member.eps_tilde, game.nonmember.eps_tilde)
        # The member side is the paper's game at the two-sided level: never above it.
        assert game.member.baseline.lower_bound <= one.baseline.lower_bound + 1e-9
        assert game.member.baseline.predictions >= 1
        assert set(game.selected) == {"baseline", "mia"}
        assert set(rep.roc) == {"baseline", "mia", "rm_rn"}
        assert rep.members_shown == int(sum(rep.scores["membership"]))
    assert two.eps_tilde == Interval.of([r.two_sided.eps_tilde for r in result.repeats])
    assert result.sizes["reference_models"] == 2
    assert result.levels["two_sided_each"] == result.beta / 4 and result.levels["o1"] == 0.05
    assert result.roc["mia"].auc == pytest.approx(
        np.mean([r.roc["mia"].auc for r in result.repeats])
    )


def _records_trained_on(site, monkeypatch: pytest.MonkeyPatch) -> list[set[bytes]]:
    """Each model the site's task trains from now on: the set of its training rows (bytes)."""
    trained: list[set[bytes]] = []
    task = site["task"]
    real_train = task.train_model

    def spy(model, x, y, **kw):
        trained.append({r.tobytes() for r in x})
        return real_train(model, x, y, **kw)

    monkeypatch.setattr(task, "train_model", spy)
    return trained


def test_reference_models_train_on_no_game_record(site, monkeypatch) -> None:
    """Calibration's reference models (and h) train only on records no game ever shows."""
    trained = _records_trained_on(site, monkeypatch)
    res = _audit(site, quick=True, calibration={"reference_models": 3, "epochs": 1})
    assert res.sizes["reference_models"] == 3
    shown = {r.tobytes() for rec in (site["members"], site["nonmembers"]) for r in rec.x}
    assert len(trained) == 2 + 3  # helper epochs (one call each), then 3 reference models
    for records in trained:
        assert records and not (records & shown)


UNCALIBRATED = {"quick": True, "seed": 3, "reference_models": []}
"""A quick audit without calibration: the spied run below and the runs compared with it."""


@pytest.fixture(scope="module")
def uncalibrated(site) -> tuple[PanoramiaResult, list[tuple[str, set[bytes]]]]:
    """A quick uncalibrated audit and, in order, each fit and score of its membership
    classifiers with the records they saw (a spy that hands every call on unchanged)."""
    real_get = comp.CLASSIFIERS.get
    real_factory = real_get("image")
    calls: list[tuple[str, set[bytes]]] = []

    def keys(data) -> set[bytes]:
        return {r.tobytes() + bytes([int(y)]) for r, y in zip(data.records.x, data.records.y)}

    class Spy:
        def __init__(self, config, context) -> None:
            self.inner = real_factory(config, context)

        def fit(self, train, val, *, select_by, seed):
            calls.append(("fit", keys(train) | keys(val)))
            return self.inner.fit(train, val, select_by=select_by, seed=seed)

        def score(self, data):
            calls.append(("score", keys(data)))
            return self.inner.score(data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            comp.CLASSIFIERS, "get", lambda name: Spy if name == "image" else real_get(name)
        )
        return _audit(site, **UNCALIBRATED), calls


def test_given_reference_models_are_used_and_an_empty_list_turns_calibration_off(
    site, uncalibrated
) -> None:
    refs = [site["task"].make_model() for _ in range(2)]
    on = _audit(site, **{**UNCALIBRATED, "reference_models": refs})
    off, _ = uncalibrated
    assert on.sizes["reference_models"] == 2 and off.sizes["reference_models"] == 0
    names = [str(r.selected["mia"].get("statistic", "")) for r in off.repeats]
    assert not any(n.startswith(("lira", "rmia")) for n in names)


CGAN = {"generator": {"kind": "cgan", "epochs": 1}, "quick": True, "seed": 5}


@pytest.fixture(scope="module")
def cgan(site) -> tuple[PanoramiaResult, list[set[bytes]]]:
    """A quick audit with a one-epoch cGAN's non-members (a junk generator), uncalibrated,
    and the training rows of each model the site's task trained in it."""
    with pytest.MonkeyPatch.context() as patch:
        trained = _records_trained_on(site, patch)
        return _audit(site, reference_models=[], **CGAN), trained


def test_a_junk_generator_gets_a_high_nonmember_closeness_and_reads_zero(cgan) -> None:
    """Bad samples are easy to call non-members: b bounds c' high, the side reads ~0."""
    res, _ = cgan
    side = res.two_sided.nonmember
    assert side.c_lb.mean > 1.0
    assert side.eps_tilde.mean < 0.5 * side.c_lb.mean


def test_result_round_trips_through_json(result: PanoramiaResult) -> None:
    text = json.dumps(json_safe(result))
    back = from_dict(PanoramiaResult, json.loads(text))
    assert back == result


def test_same_seed_same_numbers(site, uncalibrated) -> None:
    a, _ = uncalibrated
    b = _audit(site, **UNCALIBRATED)
    assert a.repeats[0].one_sided.c_lb == b.repeats[0].one_sided.c_lb
    assert a.repeats[0].one_sided.c_eps_lb == b.repeats[0].one_sided.c_eps_lb
    assert a.repeats[0].one_sided.rm_rn_eps_lb == b.repeats[0].one_sided.rm_rn_eps_lb
    assert a.repeats[0].one_sided.baseline == b.repeats[0].one_sided.baseline
    assert a.repeats[0].selected == b.repeats[0].selected


def test_game_records_never_reach_fit(site, uncalibrated) -> None:
    """Structural check: every record the classifiers are fitted or selected on is outside
    the audit sets they score afterwards."""
    _, calls = uncalibrated
    # Records that occur twice in the data (exact duplicates) cannot be told apart; skip them.
    every = [site["members"], site["nonmembers"], site["pool"]]
    flat = [r.tobytes() + bytes([int(y)]) for rec in every for r, y in zip(rec.x, rec.y)]
    uniq, counts = np.unique(np.array(flat, dtype=object), return_counts=True)
    dup = set(uniq[counts > 1])
    kinds = [k for k, _ in calls]
    # baseline, MIA, RM;RN, each once per side: fitted, then the game scored, then its own
    # validation split scored (split threshold selection reads it)
    assert kinds == ["fit", "score", "score"] * 6
    for i in range(0, len(calls), 3):
        fitted, game, val = (calls[i + k][1] - dup for k in range(3))
        assert game and not (fitted & game)
        assert val and val <= fitted


def test_cgan_end_to_end(cgan) -> None:
    res, _ = cgan
    assert res.generator_kind == "cgan"
    assert "generator_loss" in res.quality
    rep = res.repeats[0]
    one = rep.one_sided
    assert one.eps_tilde == max(0.0, one.c_eps_lb - one.c_lb) and one.ceiling >= one.c_lb


def test_input_errors_name_the_problem(site) -> None:
    task, model = site["task"], site["model"]
    cfg = AuditConfig(**{**TINY, "quick": True, "device": "cpu"})
    with pytest.raises(ValueError, match="members is empty"):
        run_audit(task, model, Records(site["members"].x[:0], site["members"].y[:0]), cfg)
    with pytest.raises(ValueError, match="nonmembers records have shape"):
        run_audit(
            task,
            model,
            site["members"],
            cfg,
            nonmembers=Records(np.zeros((5, 1, 4, 4), np.uint8), np.zeros(5, np.int64)),
        )
    with pytest.raises(ValueError, match="needs public records"):
        run_audit(task, model, site["members"], cfg)
    bad_kind = AuditConfig(**{**TINY, "generator": {"kind": "nope"}, "quick": True})
    with pytest.raises(KeyError, match="unknown generator 'nope'"):
        run_audit(task, model, site["members"], bad_kind, public_pool=site["pool"])
    few = Records(site["nonmembers"].x[:3], site["nonmembers"].y[:3])
    with pytest.raises(ValueError, match="too few for RM;RN"):
        run_audit(task, model, site["members"], cfg, nonmembers=few, public_pool=site["pool"])
    tiny = Records(site["members"].x[:8], site["members"].y[:8])
    with pytest.raises(ValueError, match="splits"):
        run_audit(task, model, tiny, cfg, public_pool=site["pool"])


def test_a_trained_generators_helper_learns_real_records_but_no_game_record(site, cgan) -> None:
    """With generated non-members the helper (hence b, and the MIA's reference view) also
    trains on the public pool and D_G: real records, none of them ever in a game."""
    from panoramia_fl.audit.panoramia.splits import split_members

    res, trained = cgan
    helper = trained[0]  # the helper's first epoch (the cGAN has a loop of its own)
    members = site["members"]
    d_g = split_members(len(members), AuditConfig(**{**TINY, **CGAN}).splits, seed=5).generator
    d_g_keys = {members.x[i].tobytes() for i in d_g}
    member_keys = {r.tobytes() for r in members.x}
    real_keys = {r.tobytes() for r in site["pool"].x} | d_g_keys
    # Five sixths of the real records train it (the rest select its epoch), ...
    assert len(helper & real_keys) >= 0.8 * len(real_keys)
    # ... and of the members only D_G's: no game member
    assert helper & member_keys <= d_g_keys
    assert not helper & {r.tobytes() for r in site["nonmembers"].x}
    assert res.sizes["helper_real_public"] == len(site["pool"])
    assert res.sizes["helper_real_site"] == len(d_g)
