"""A site's checks on the model it receives, before it trains (``audit.received_model``,
``clients.model_checks``).

Honest models come from the project's own local training (``train_locally``) and FedAvg; the
crafted ones from the dishonest server's real crafting code (``audit.adversary``), and in the
Flower run from the server itself (``fl.adversary``), which sends them in place of the global
model. A flagged site trains nothing, sends nothing, and says why.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import run_files
from flwr.app import ArrayRecord, Context, RecordDict
from flwr.simulation import run_simulation

from panoramia_fl.audit.adversary import SiteOptimizer, craft_dead, craft_imprint, craft_trap
from panoramia_fl.audit.received_model.consistency import BulletinEntry, consistency
from panoramia_fl.audit.received_model.digest import model_digest
from panoramia_fl.audit.received_model.plausibility import (
    ADAM_STEP_BOUND,
    AgreedTraining,
    ClientClipping,
    plausibility,
)
from panoramia_fl.clients.client_app import build_client_app
from panoramia_fl.clients.model_checks import (
    BulletinConflict,
    FileBulletin,
    ModelCheckSettings,
    check_received,
    publish,
)
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.model_flags import (
    CheckOutcome,
    ModelFlag,
    RoundAnnouncement,
    read_check_records,
)
from panoramia_fl.contracts.run_files import model_checks_name
from panoramia_fl.contracts.run_log import RoundRecord, read_rounds
from panoramia_fl.ml.tasks.base import OptimizerSpec, TorchTask, build_task
from panoramia_fl.reporting.site.site_report import flagged_models
from panoramia_fl.server.server_app import build_server_app
from panoramia_fl.simulations.apps import SiteResolver, server_settings
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir

CPU = torch.device("cpu")
BATCH = 32
LR = 1e-3
SITES = (0, 1)


@pytest.fixture(scope="module")
def records() -> dict[str, np.ndarray]:
    """Two sites' records and public ones: 12 standardised features, a linear label."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(900, 12)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(np.int64)
    return {"x0": x[:300], "y0": y[:300], "x1": x[300:600], "y1": y[300:600], "public": x[600:]}


@pytest.fixture(scope="module")
def task() -> TorchTask:
    return build_task(
        "tabular",
        model_name="mlp",
        num_classes=2,
        input_shape=(12,),
        batch_size=BATCH,
        optimizer=OptimizerSpec(name="adam", learning_rate=LR),
        model_options={"hidden": (64, 16)},
    )


def _settings(folder: Path, site: int) -> ModelCheckSettings:
    steps = 300 // BATCH + 1  # one local epoch of the largest site
    return ModelCheckSettings(
        batch_size=BATCH,
        agreed=AgreedTraining(optimizer="adam", learning_rate=LR, local_steps=steps),
        bulletin=folder / "bulletin",
        min_sites=2,
        log=folder / model_checks_name(site),
    )


def _record(state: dict[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def _digest(record: ArrayRecord) -> str:
    return model_digest({k: a.numpy() for k, a in record.items()})


@pytest.fixture(scope="module")
def honest_rounds(tmp_path_factory, task, records) -> dict:
    """Two honest FedAvg rounds, each site checking the model before it trains; then the
    sites' node states and the global model of round 2."""
    folder = tmp_path_factory.mktemp("checks")
    torch.manual_seed(0)
    state = task.make_model().state_dict()
    contexts = {s: Context(0, s, {}, RecordDict(), {}) for s in SITES}
    flags = []
    for rnd in (1, 2):
        record = _record(state)
        for site in SITES:  # the announce phase, before any site trains
            publish(_settings(folder, site), site, RoundAnnouncement(rnd, _digest(record), SITES))
        trained = []
        for site in SITES:
            flags.append(_check(folder, site, rnd, record, task, records, contexts[site]))
            x, y = records[f"x{site}"], records[f"y{site}"]
            result = train_locally(
                task, state, x=x, y=y, epochs=1, seed=rnd * 10 + site, device=CPU
            )
            trained.append(result.state_dict)
        state = {k: (trained[0][k] + trained[1][k]) / 2 for k in state}
    return {"folder": folder, "flags": flags, "contexts": contexts, "state": state}


def _check(folder, site, rnd, received, task, records, context) -> ModelFlag | None:
    return check_received(
        _settings(folder, site),
        site_id=site,
        server_round=rnd,
        received=received,
        task=task,
        records=records[f"x{site}"],
        labels=records[f"y{site}"],
        context=context,
    )


def test_honest_rounds_pass_every_check(honest_rounds):
    assert honest_rounds["flags"] == [None] * 4
    lines = read_check_records(honest_rounds["folder"] / model_checks_name(0))
    assert [r.server_round for r in lines] == [1, 2]
    checks = {o.check: o for o in lines[1].outcomes}
    # Round 2 runs all five; Adam moved no weight by more than its bound allows.
    assert set(checks) == {
        "consistency",
        "plausibility",
        "lone_units",
        "repeated_rows",
        "dead_units",
    }
    assert checks["consistency"].statistic == 0
    assert 0 < checks["plausibility"].statistic <= 1.5 < ADAM_STEP_BOUND


CRAFTS = {
    "imprint": (craft_imprint, "repeated_rows"),
    "trap": (craft_trap, "lone_units"),
    "dead": (craft_dead, "dead_units"),
}


@pytest.mark.parametrize("attack", list(CRAFTS))
def test_a_crafted_model_is_flagged_and_says_why(honest_rounds, task, records, attack, tmp_path):
    """Round 3's global model crafted by the server's own code; announced as the real
    model (what the server's announce step sends) it fails consistency too; announced as
    itself (a server that sends every site the same crafted model) the structure check
    and plausibility still see it."""
    craft, structure_check = CRAFTS[attack]
    model = task.make_model()
    model.load_state_dict(honest_rounds["state"])
    options = {} if attack == "dead" else {"optimizer": SiteOptimizer(), "batch_size": BATCH}
    crafted = _record(
        craft(model, public=torch.from_numpy(records["public"]), seed=3, **options).state_dict
    )
    real = _record(honest_rounds["state"])
    for announced, sees_split in ((_digest(real), True), (_digest(crafted), False)):
        folder = tmp_path / ("real" if sees_split else "crafted")
        for site in SITES:
            publish(_settings(folder, site), site, RoundAnnouncement(3, announced, SITES))
        state = honest_rounds["contexts"][0].state
        context = Context(0, 0, {}, RecordDict(dict(state.items())), {})
        flag = _check(folder, 0, 3, crafted, task, records, context)
        assert flag is not None and flag.site_id == 0 and flag.server_round == 3
        assert ("consistency" in flag.checks) == sees_split
        assert {structure_check, "plausibility"} <= set(flag.checks)
        # The reply's reason says which check, its statistic, the honest range, the threshold.
        assert ModelFlag.from_reason(flag.to_reason()) == flag
        text = flag.to_reason().splitlines()[0]
        assert "site 0 refused the model of round 3 (trained nothing, sent nothing)" in text
        assert f"{structure_check} " in text and "honest models:" in text


def test_consistency_sees_a_split_a_skipped_site_and_a_round_of_one():
    honest = [BulletinEntry(s, 4, "a" * 64, (0, 1, 2)) for s in (0, 1, 2)]
    assert (
        consistency(
            site_id=1, server_round=4, received="a" * 64, entries=honest, min_sites=3
        ).statistic
        == 0
    )
    # The server sends site 1 other weights than it announced.
    other = consistency(site_id=1, server_round=4, received="b" * 64, entries=honest, min_sites=3)
    assert other.flagged and "this site got bbbbbbbbbbbb" in other.detail
    # It announced another model to site 2 (site 0 sees it in the bulletin).
    split = [*honest[:2], BulletinEntry(2, 4, "b" * 64, (0, 1, 2))]
    assert consistency(
        site_id=0, server_round=4, received="a" * 64, entries=split, min_sites=3
    ).flagged
    # It skipped site 2's announcement, or told site 0 it is alone in the round.
    assert consistency(
        site_id=0, server_round=4, received="a" * 64, entries=honest[:2], min_sites=3
    ).flagged
    alone = [BulletinEntry(0, 4, "a" * 64, (0,))]
    assert (
        "fewer than the agreed 3"
        in consistency(
            site_id=0, server_round=4, received="a" * 64, entries=alone, min_sites=3
        ).detail
    )


def test_the_bulletin_is_write_once(tmp_path):
    bulletin = FileBulletin(tmp_path)
    entry = BulletinEntry(0, 1, "a" * 64, (0, 1))
    bulletin.publish(entry)
    bulletin.publish(entry)  # a resumed run's same announcement
    with pytest.raises(BulletinConflict, match="announced to site 0 twice"):
        bulletin.publish(BulletinEntry(0, 1, "b" * 64, (0, 1)))
    assert bulletin.read(1) == [entry]


def test_plausibility_under_client_level_dp_reads_the_clipping_norm_and_the_noise():
    rng = np.random.default_rng(0)
    previous = {"w": rng.normal(size=(200, 50))}
    clip = ClientClipping(clipping_norm=1.0, noise_multiplier=1.0, sites=2)
    agreed = AgreedTraining(optimizer="sgd", learning_rate=0.1, local_steps=5, client_clipping=clip)
    move = rng.normal(size=(200, 50))
    honest = previous["w"] + move / np.linalg.norm(move) + rng.normal(0, 0.5, size=(200, 50))
    assert not plausibility(previous, {"w": honest}, agreed=agreed).flagged
    crafted = previous["w"] + 3 * rng.normal(size=(200, 50))
    assert plausibility(previous, {"w": crafted}, agreed=agreed).flagged
    # Plain SGD without client-level clipping bounds no move: not checked.
    sgd = AgreedTraining(optimizer="sgd", learning_rate=0.1, local_steps=5)
    assert plausibility(previous, {"w": crafted}, agreed=sgd) is None


def test_a_flag_survives_the_round_line(tmp_path):
    flag = ModelFlag(0, 2, [CheckOutcome("dead_units", 1.0, 0.9, "0 to 0.1")])
    line = RoundRecord(round=2, failures={"0": flag.sentence()}, flagged={"0": flag})
    layout = run_files(tmp_path)
    layout.metrics.write_text(json.dumps(line.to_dict()) + "\n")
    assert read_rounds(layout)[0].flagged == {"0": flag}


@pytest.fixture(scope="module")
def attacked_run(tmp_path_factory, ray_init_args) -> Path:
    """One round, two digits sites, ``fl.model_checks: refuse``; the server (``fl.adversary``)
    sends site 0 imprint weights in place of the global model. The train phase only (the
    attack's scoring is the audit phase's, tested with the attacks)."""
    logging.getLogger("flwr").setLevel(logging.ERROR)
    config = validate_config(
        {
            "name": "checks",
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "model": {"name": "small_cnn", "options": {"width": 4}},
            "fl": {
                "rounds": 1,
                "local_epochs": 1,
                "batch_size": 64,
                "model_checks": "refuse",
                "adversary": [{"attack": "imprint", "rounds": [1], "sites": [0]}],
            },
            "audit": {"enabled": True, "settings": {"quick": True}},
        }
    )
    layout = run_files(tmp_path_factory.mktemp("checks") / "run")
    meta = prepare_run_dir(config, layout)
    run_simulation(
        server_app=build_server_app(
            server_settings(config, meta, layout, phases=("train",), progress=False)
        ),
        client_app=build_client_app(SiteResolver(config, meta, layout)),
        num_supernodes=2,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": ray_init_args,
        },
    )
    return layout.root


@pytest.mark.ray
def test_the_site_sent_a_crafted_model_trains_nothing_and_says_why(attacked_run):
    layout = run_files(attacked_run)
    (line,) = read_rounds(layout)
    # Site 0 sent nothing (no update aggregated, no key received); site 1 trained.
    assert list(line.sites) == ["1"] and set(line.failures) == {"0"}
    flag = line.flagged["0"]
    assert {"consistency", "repeated_rows"} <= set(flag.checks)
    assert line.failures["0"].startswith(
        "site 0 refused the model of round 1 (trained nothing, sent nothing): consistency"
    )
    # Both sites published the announced (real) model; site 0 got other weights.
    entries = FileBulletin(layout.bulletin).read(1)
    assert [e.site_id for e in entries] == [0, 1] and len({e.digest for e in entries}) == 1
    (own,) = read_check_records(layout.site_state / model_checks_name(0))
    assert own.refused and own.server_round == 1
    (other,) = read_check_records(layout.site_state / model_checks_name(1))
    assert not other.refused and not other.flagged
    # The site's page lists it (refused, with each check's statistic and threshold).
    (shown,) = flagged_models(layout, 0)
    assert shown.refused and shown.flagged == flag.flagged
    assert flagged_models(layout, 1) == []
