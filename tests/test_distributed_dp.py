"""Distributed client-level DP and ideal secure aggregation: each site's noise share, the
secure sum's masks, the accounting against the central setting, and real simulations that
show what reaches the server's process and files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from builders import TINY_AUDIT, run_files
from flwr.app import Message
from flwr.supercore.differential_privacy import compute_clip_model_update, compute_stdv
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from panoramia_fl.clients.distributed_dp import (
    DistributedDPSettings,
    add_share,
    clipped_update,
    noise_generator,
)
from panoramia_fl.clients.secure_sum_site import (
    SecureSumError,
    SecureSumSettings,
    commit,
    masked_update,
)
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.contracts.reply_keys import NUM_EXAMPLES, TRAIN_LOSS
from panoramia_fl.contracts.run_log import read_rounds
from panoramia_fl.contracts.secure_sum import FIXED_POINT_BITS, SecureSumInstructions
from panoramia_fl.contracts.wire import ARRAYS, METRICS
from panoramia_fl.deployment.flower_apps import (
    IdealSecureAggregationRefused,
    refuse_simulation_settings,
)
from panoramia_fl.reporting.privacy.privacy_ledger import outside_guarantee
from panoramia_fl.server.client_dp import ClientDPAccounting, ClientDPSettings, gaussian_epsilon
from panoramia_fl.server.strategy import SiteFedAvg
from panoramia_fl.simulations.apps import server_settings
from panoramia_fl.simulations.config_file import dump_config, report_config
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.runner import run_experiment

Z, CLIP, SITES = 1.5, 0.02, 3


# The audit phase, small: what is checked is what each site reads and what comes back.
AUDIT = {
    "enabled": True,
    "settings": TINY_AUDIT,
    "inversion": {"rounds": [1], "iterations": 5, "restarts": 1, "max_records": 8},
}


def _config(
    dp: dict, *, sites: int = SITES, rounds: int = 2, audit: bool = False, **fl: Any
) -> Any:
    return validate_config(
        {
            "name": "distributed",
            "seed": 5,
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": sites},
            "model": {"name": "small_cnn", "options": {"width": 8}},
            "fl": {"rounds": rounds, "local_epochs": 1, "batch_size": 32, **fl},
            "dp": dp,
            "audit": AUDIT if audit else {"enabled": False},
        }
    )


DISTRIBUTED = {"level": "distributed", "client": {"noise_multiplier": Z, "clipping_norm": CLIP}}


# -- each site's share ------------------------------------------------------------------


def test_the_shares_sum_to_the_noise_flower_adds_centrally():
    """n shares of std z C / sqrt(n) sum to std z C: Flower's central wrapper adds
    z C / n to the mean of n updates, i.e. z C to their sum."""
    n, dim = 4, 60_000
    settings = DistributedDPSettings(noise_multiplier=Z, clipping_norm=0.7, sites_per_round=n)
    zero = {"w": torch.zeros(dim, dtype=torch.float64)}
    shares = [
        add_share(zero, settings, noise_generator(seed=1, server_round=1, site_id=s))["w"]
        for s in range(n)
    ]
    total = torch.stack(shares).sum(0).numpy()
    central_on_sum = compute_stdv(Z, 0.7, n) * n
    assert central_on_sum == pytest.approx(Z * 0.7)
    assert total.std() == pytest.approx(central_on_sum, rel=0.02)
    # Each share alone: what the server would see of one site without secure aggregation.
    assert shares[0].numpy().std() == pytest.approx(Z * 0.7 / np.sqrt(n), rel=0.02)
    # Seeded: a simulation's shares replay; different sites and rounds draw apart.
    again = add_share(zero, settings, noise_generator(seed=1, server_round=1, site_id=0))["w"]
    assert torch.equal(again, shares[0])
    assert not torch.equal(shares[0], shares[1])


def test_the_clipping_is_flowers():
    rng = np.random.default_rng(0)
    base = {"a": rng.normal(size=(4, 3)), "b": rng.normal(size=7)}
    trained = {k: v + rng.normal(size=v.shape) for k, v in base.items()}
    ours = clipped_update(
        {k: torch.from_numpy(v) for k, v in base.items()},
        {k: torch.from_numpy(v) for k, v in trained.items()},
        0.5,
    )
    theirs = [trained["a"].copy(), trained["b"].copy()]
    compute_clip_model_update(theirs, [base["a"], base["b"]], 0.5)
    for (key, value), flower in zip(ours.items(), theirs, strict=True):
        np.testing.assert_allclose(value.numpy(), flower - base[key], atol=1e-12)
    assert np.sqrt(sum(float((v**2).sum()) for v in ours.values())) == pytest.approx(0.5)


# -- accounting ---------------------------------------------------------------------------


def _ledger(mechanism: str, secure: str = "none") -> ClientDPAccounting:
    settings = ClientDPSettings(
        noise_multiplier=Z, delta=1e-5, mechanism=mechanism, secure_aggregation=secure
    )  # type: ignore[arg-type]  # literal strings from the parametrisation
    ledger = ClientDPAccounting(settings, population_size=4, sites_per_round=4)
    for r in (1, 2, 3):
        ledger.record_round(r, [0, 1, 2, 3], aggregated=4 if r < 3 else 2)
    return ledger


def test_distributed_epsilons_equal_central_and_count_dropouts_as_they_happened():
    central, distributed = _ledger("central"), _ledger("distributed")
    full = gaussian_epsilon(Z, releases=2, delta=1e-5)
    # Round 3 summed 2 of the 4 shares: multiplier z sqrt(1/2) (central: z * 2/4).
    assert distributed.round_multiplier(3) == pytest.approx(Z * np.sqrt(0.5))
    assert central.round_multiplier(3) == pytest.approx(Z * 0.5)
    both = ClientDPAccounting(central.settings, population_size=4, sites_per_round=4)
    for r in (1, 2):
        both.record_round(r, [0, 1, 2, 3])
    assert both.epsilon(0) == pytest.approx(full)
    twin = ClientDPAccounting(distributed.settings, population_size=4, sites_per_round=4)
    for r in (1, 2):
        twin.record_round(r, [0, 1, 2, 3])
    assert twin.epsilon(0) == both.epsilon(0) and twin.epsilon_record(0) == both.epsilon_record(0)
    # The central short round carries less noise per unit of sensitivity (z/2 < z/sqrt 2).
    assert distributed.epsilon(0) < central.epsilon(0)


def test_what_holds_against_the_server():
    assert _ledger("central").epsilon_server(0) is None
    clear = _ledger("distributed")
    # Without secure aggregation the server sees each share alone: z / sqrt(4) each round.
    assert clear.epsilon_server(0) == pytest.approx(gaussian_epsilon(Z / 2, releases=3, delta=1e-5))
    assert clear.epsilon_server(0, scale=0.5) == pytest.approx(
        gaussian_epsilon(Z / 4, releases=3, delta=1e-5)
    )
    ideal = _ledger("distributed", "ideal")
    assert ideal.epsilon_server(0) == pytest.approx(ideal.epsilon(0))
    assert ideal.to_dict()["sites"]["0"]["epsilon_server"] == pytest.approx(ideal.epsilon(0))


# -- configs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dp", "fl", "audit", "match"),
    [
        (
            {**DISTRIBUTED, "client": {"noise_multiplier": 1, "clipping": "adaptive"}},
            {},
            {},
            "dp.client.clipping",
        ),
        (
            {**DISTRIBUTED, "client": {"noise_multiplier": 1, "clipping_side": "server"}},
            {},
            {},
            "dp.client.clipping_side",
        ),
        (
            {"level": "client", "client": {"noise_multiplier": 1}},
            {"secure_aggregation": "ideal"},
            {},
            "use dp.level distributed",
        ),
        ({"level": "none"}, {"secure_aggregation": "ideal", "fraction_train": 0.3}, {}, "2 sites"),
        ({"level": "none"}, {"secure_aggregation": "ideal"}, {"canary_clients": 10}, "canary"),
        (
            DISTRIBUTED,
            {"secure_aggregation": "ideal"},
            {"updates": {"rounds": [1]}},
            "audit.updates: under fl.secure_aggregation ideal",
        ),
    ],
)
def test_combinations_that_cannot_work_name_their_key(dp, fl, audit, match):
    raw = _config({"level": "none"}).model_dump(mode="json")
    raw.update(dp=dp, fl={**raw["fl"], **fl}, audit={**raw["audit"], **audit})
    with pytest.raises(ConfigError, match=match):
        validate_config(raw)


def test_distributed_dp_allows_a_server_optimiser_and_a_deployment_refuses_ideal():
    assert _config(DISTRIBUTED, strategy="fedadam").dp.distributed
    refuse_simulation_settings(_config(DISTRIBUTED))  # distributed alone deploys
    with pytest.raises(IdealSecureAggregationRefused, match="fl.secure_aggregation"):
        refuse_simulation_settings(_config(DISTRIBUTED, secure_aggregation="ideal"))


def test_a_distributed_runs_config_file_reads_back_as_the_same_config():
    """config.yaml (the resolved config) says the sites clip, so a resume or a report can
    read it again."""
    config = _config(DISTRIBUTED, secure_aggregation="ideal")
    assert config.dp.client.clipping_side == "client"
    assert validate_config(yaml.safe_load(dump_config(config))) == config


# -- the masks ----------------------------------------------------------------------------


def _commit_all(tmp_path: Path, updates: list[dict[str, np.ndarray]]) -> dict[int, bytes]:
    return {
        s: commit(SecureSumSettings(s, tmp_path), 4, u, {"num-examples": s + 1.0}).public_key
        for s, u in enumerate(updates)
    }


def test_masks_cancel_in_the_sum_of_all_sites_and_hide_each_update(tmp_path):
    rng = np.random.default_rng(1)
    # A 0-d entry too (a BatchNorm's batch count): masked, it is still an array.
    updates = [{"w": rng.normal(size=20_000), "n": np.array(2.0)} for _ in range(3)]
    keys = _commit_all(tmp_path, updates)
    asked = SecureSumInstructions(server_round=4, weight_key="num-examples", peers=keys)
    replies = [masked_update(SecureSumSettings(s, tmp_path), asked) for s in range(3)]
    assert all(isinstance(r["n"], np.ndarray) and r["n"].shape == () for r in replies)
    masked = [r["w"] for r in replies]
    total = np.zeros(20_000, dtype=np.uint64)
    for m in masked:
        total += m
    read = total.view(np.int64) / 2.0**FIXED_POINT_BITS
    want = sum((s + 1) * u["w"] for s, u in enumerate(updates))
    assert np.abs(read - want).max() < 3 * 2.0**-FIXED_POINT_BITS * 3
    # One masked update read alone: uniform noise, uncorrelated with the site's update.
    alone = masked[0].view(np.int64) / 2.0**FIXED_POINT_BITS
    assert abs(np.corrcoef(alone, updates[0]["w"])[0, 1]) < 0.05
    # Two of the three: the third site's masks stay in, the sum is unreadable.
    partial = (masked[0] + masked[1]).view(np.int64) / 2.0**FIXED_POINT_BITS
    assert abs(np.corrcoef(partial, want)[0, 1]) < 0.05
    assert not any(tmp_path.iterdir())  # the kept updates are gone once masked


def test_a_site_never_unmasks_alone_or_for_a_key_it_did_not_send(tmp_path):
    updates = [{"w": np.ones(5)} for _ in range(2)]
    keys = _commit_all(tmp_path, updates)
    with pytest.raises(SecureSumError, match="at least 2"):
        masked_update(
            SecureSumSettings(0, tmp_path),
            SecureSumInstructions(4, "num-examples", {0: keys[0]}),
        )
    with pytest.raises(SecureSumError, match="not the one it sent"):
        masked_update(
            SecureSumSettings(0, tmp_path),
            SecureSumInstructions(4, "num-examples", {0: keys[1], 1: keys[1]}),
        )
    with pytest.raises(SecureSumError, match="round 4, not of round 5"):
        masked_update(
            SecureSumSettings(1, tmp_path), SecureSumInstructions(5, "num-examples", keys)
        )


# -- real simulations ----------------------------------------------------------------------


def _flat(arrays: Any) -> np.ndarray:
    """An ArrayRecord's or a state dict's arrays as one vector, in their own dtype."""
    return np.concatenate(
        [np.asarray(v.numpy() if hasattr(v, "numpy") else v).ravel() for v in arrays.values()]
    )


def _recorded_run(run_dir: Path, config: Any) -> dict[str, list[Any]]:
    """Run ``config``, recording every message that reaches the server's process and every
    input of the innermost strategy's aggregation (the real methods run)."""
    seen: dict[str, list[Any]] = {"replies": [], "aggregated": []}
    pull, aggregate = InMemoryGrid.pull_messages, SiteFedAvg.aggregate_train

    def recording_pull(self: InMemoryGrid, message_ids: Any) -> Any:
        replies = list(pull(self, message_ids))
        seen["replies"] += replies
        return replies

    def recording_aggregate(self: SiteFedAvg, server_round: int, replies: Any) -> Any:
        replies = list(replies)
        seen["aggregated"].append((server_round, replies))
        return aggregate(self, server_round, replies)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InMemoryGrid, "pull_messages", recording_pull)
        patch.setattr(SiteFedAvg, "aggregate_train", recording_aggregate)
        run_experiment(config, run_dir, write_report=config.audit.enabled)
    return seen


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """The same distributed run with its updates in the clear and with ideal secure
    aggregation (same seeds: the sites train and noise alike in both); the latter audited,
    the inversion audit included."""
    root = tmp_path_factory.mktemp("distributed")
    configs = {
        "clear": _config(DISTRIBUTED),
        "ideal": _config(DISTRIBUTED, audit=True, secure_aggregation="ideal"),
    }
    return {name: (root / name, _recorded_run(root / name, c)) for name, c in configs.items()}


def _start(run_dir: Path) -> np.ndarray:
    """The initial global weights (the server builds them from the seed)."""
    layout = run_files(run_dir)
    config = _config(DISTRIBUTED)
    settings = server_settings(
        config, DatasetMeta.read(layout), layout, phases=("train",), progress=False
    )
    return _flat(settings.initial_state()).astype(np.float64)


def _views(replies: list[Message], start: np.ndarray) -> list[np.ndarray]:
    """What the server can read of each update it received: weights in the clear minus the
    start, or a masked update taken alone as fixed point."""
    out = []
    for message in replies:
        if message.has_error() or ARRAYS not in message.content.array_records:
            continue
        values = _flat(message.content.array_records[ARRAYS])
        if values.dtype == np.uint64:
            out.append(values.view(np.int64) / 2.0**FIXED_POINT_BITS)
        else:
            out.append(values.astype(np.float64) - start)
    return out


def _leak(views: list[np.ndarray], updates: list[np.ndarray]) -> float:
    """The largest correlation of anything the server read with a site's update."""
    return max(abs(float(np.corrcoef(v, u)[0, 1])) for v in views for u in updates)


@pytest.mark.ray
@pytest.mark.slow
def test_the_server_never_holds_a_single_sites_update(runs):
    clear_dir, clear = runs["clear"]
    run_dir, seen = runs["ideal"]
    start = _start(run_dir)
    updates = _views(clear["replies"], start)[:SITES]  # round 1, as the sites sent them
    assert len(updates) == SITES
    assert _leak(updates, updates) == pytest.approx(1.0)  # the reading finds them in the clear
    # Under secure aggregation: no weights in the clear reached the server's process; each
    # masked update (step 2, every site, both rounds), read alone, tells nothing.
    views = _views(seen["replies"], start)
    assert len(views) == SITES * 2
    assert all(
        a.dtype == np.uint64
        for m in seen["replies"]
        if not m.has_error() and ARRAYS in m.content.array_records
        for a in m.content.array_records[ARRAYS].to_numpy_ndarrays()
    )
    assert _leak(views, updates) < 0.1
    # The strategy's inputs: one reply a round, standing for the sum.
    assert [(r, len(x)) for r, x in seen["aggregated"]] == [(1, 1), (2, 1)]
    # Every server-side file (the sites' own folders aside): no array holds a site's update.
    layout = run_files(run_dir)
    files = [
        p
        for p in sorted(run_dir.rglob("*.pt"))
        if layout.sites not in p.parents and layout.site_state not in p.parents
    ]
    assert len(files) == 3  # two round checkpoints and the final model
    for path in files:
        delta = _flat(load_checkpoint(path).state_dict).astype(np.float64) - start
        for update in updates:
            assert np.linalg.norm(delta - update) > 0.3 * np.linalg.norm(update), path
    kept = [p.name for p in layout.site_state.iterdir() if "secure-sum" in p.name]
    assert kept == []  # the sites' kept updates are gone once masked


@pytest.mark.ray
@pytest.mark.slow
def test_each_site_attacks_the_rounds_sum_the_server_held(runs):
    """Under secure aggregation the audit query carries round 1's weights after the sum,
    and each site's inversion audit attacks that round's aggregate."""
    run_dir, _ = runs["ideal"]
    audits = [json.loads(p.read_text()) for p in sorted((run_dir / "audits").glob("site-*.json"))]
    assert [a["status"] for a in audits] == ["ok"] * SITES
    assert all([e["round"] for e in a["inversion"]] == [1] for a in audits)
    page = (run_dir / "site-reports" / "site-0.html").read_text()
    assert "Can the server rebuild your records from the round&#x27;s sum?" in page


@pytest.mark.ray
@pytest.mark.slow
def test_the_secure_sum_is_the_clear_mean_and_carries_the_central_noise(runs):
    clear_dir, ideal_dir = runs["clear"][0], runs["ideal"][0]
    # Round 1 from the same weights: the same mean up to float32 and the fixed point
    # (round 2 then trains from weights a few 1e-8 apart, and drifts by ~1e-5).
    a = load_checkpoint(run_files(clear_dir).round_checkpoint(1)).state_dict
    b = load_checkpoint(run_files(ideal_dir).round_checkpoint(1)).state_dict
    np.testing.assert_allclose(_flat(b), _flat(a), atol=1e-6)
    # Round 2's step is the mean of 3 clipped updates (norm <= C) plus noise of std
    # z C / 3 per coordinate: what Flower's central wrapper adds (tests/test_client_dp.py).
    layout = run_files(ideal_dir)
    step = _flat(load_checkpoint(layout.round_checkpoint(2)).state_dict) - _flat(
        load_checkpoint(layout.round_checkpoint(1)).state_dict
    )
    assert step.std() == pytest.approx(compute_stdv(Z, CLIP, SITES), rel=0.05)
    ledger = layout.client_dp_accounting.read_text()
    assert '"mechanism": "distributed"' in ledger and '"secure_aggregation": "ideal"' in ledger


@pytest.mark.ray
@pytest.mark.slow
def test_client_level_replies_carry_no_loss_and_no_count(runs):
    """Distributed DP in the clear and under ideal secure aggregation: no reply that reached
    the server carries a site's loss or its count, metrics.jsonl keeps neither, and the
    ledger finds nothing sent outside the guarantee."""
    for name in ("clear", "ideal"):
        run_dir, seen = runs[name]
        numbers = [
            m.content.metric_records[METRICS]
            for m in seen["replies"]
            if not m.has_error() and METRICS in m.content.metric_records
        ]
        assert numbers and not any(TRAIN_LOSS in n or NUM_EXAMPLES in n for n in numbers)
        layout = run_files(run_dir)
        rounds = read_rounds(layout)
        for entry in rounds:
            for site in entry.sites.values():
                assert site.train_loss is None and site.num_examples is None
                assert site.sent is not None and TRAIN_LOSS not in site.sent
        settings = report_config(layout).privacy
        assert all(outside_guarantee(s, rounds, settings) == [] for s in range(SITES)), name
