"""A server that does not play fair (``fl.adversary``): its config, its refusal by a
deployment, and one real simulation of 3 sites under ideal secure aggregation in which it
attacks by model inconsistency: in round 1 it sends site 0 imprint weights, in round 2 site 1
trap weights, and every other site a model whose update is zero; it reads each round's sum
(then the target's update) and hands the rows to the target, which scores them. Every site
that received a crafted model sees it with its consistency check; only shares reach the
run's files."""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from builders import TINY_AUDIT, report_config, run_files

from panoramia_fl.contracts.model_flags import read_check_records
from panoramia_fl.contracts.run_files import (
    local_model_name,
    model_checks_name,
    rebuilt_gallery_name,
)
from panoramia_fl.deployment.flower_apps import DishonestServerRefused, refuse_simulation_settings
from panoramia_fl.reporting.evidence.evidence_pack import site_pack_html
from panoramia_fl.reporting.site.site_report import site_page_alone
from panoramia_fl.server.adversary import Held, Holdings
from panoramia_fl.simulations.cli import main
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.runner import run_experiment

BINS = 128
ATTACK = {"attack": "inconsistent", "rounds": [1], "sites": [0], "bins": BINS}
TRAP = {"attack": "inconsistent", "rounds": [2], "sites": [1], "craft": "trap"}
SITES = 3


def _config(
    *,
    adversary: list[dict[str, Any]],
    updates: list[int] | None = None,
    sites: int = 2,
    rounds: int = 1,
    **fl: Any,
) -> Any:
    return validate_config(
        {
            "name": "dishonest",
            "seed": 3,
            "data": {"name": "randhie", "options": {"unit": "person", "max_rows": 1200}},
            "partition": {"scheme": "iid", "num_sites": sites},
            "model": {"name": "mlp"},
            "fl": {
                "rounds": rounds,
                "local_steps": 1,
                "batch_size": 64,
                "adversary": adversary,
                **fl,
            },
            "audit": {
                "enabled": True,
                "reference_pool": True,
                "settings": {**TINY_AUDIT, "generator": {"kind": "reference_pool"}},
                "updates": None if updates is None else {"rounds": updates},
            },
        }
    )


# -- the config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ({"attack": "imprint", "rounds": [2]}, "fl.adversary.0.rounds: [2] outside 1..fl.rounds"),
        ({"attack": "trap", "sites": [5]}, "fl.adversary.0.sites: [5] outside"),
        ({"attack": "inconsistent", "sites": [0, 1]}, "inconsistent has one target"),
        ({"attack": "imprint", "craft": "trap"}, "craft: only inconsistent"),
        ({"attack": "trap", "bins": 8}, "bins: an option of imprint"),
        ({"attack": "rob"}, "fl.adversary.0.attack"),
    ],
)
def test_each_bad_attack_is_refused_naming_its_key(entry: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)):
        _config(adversary=[entry])


def test_one_model_per_site_and_round_and_an_honest_default() -> None:
    assert _config(adversary=[]).fl.adversary == []
    with pytest.raises(ConfigError, match=r"fl\.adversary\.1: round 1, site 1 is attacked"):
        _config(adversary=[ATTACK, {"attack": "trap", "sites": [1]}])
    # inconsistent makes the round's sum its target's update: the update audit may read it.
    config = _config(adversary=[ATTACK], updates=[1], secure_aggregation="ideal")
    assert config.fl.adversary[0].crafted == "imprint"
    with pytest.raises(ConfigError, match="audit.updates: under fl.secure_aggregation"):
        _config(adversary=[{"attack": "imprint"}], updates=[1], secure_aggregation="ideal")


def test_a_deployment_refuses_the_dishonest_server() -> None:
    refuse_simulation_settings(_config(adversary=[]))
    with pytest.raises(DishonestServerRefused, match="fl.adversary: the dishonest server"):
        refuse_simulation_settings(_config(adversary=[ATTACK]))


# -- one real run ------------------------------------------------------------------------


def _numbers(text: str) -> set[str]:
    """Every decimal number of a text, to 3 significant digits."""
    return {f"{float(x):.3g}" for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)}


def _rows_found(rows: torch.Tensor, text: str) -> int:
    """Rows of ``rows`` whose every non-trivial value (not 0 or +-1: one-hot levels) is a
    number of ``text``."""
    numbers = _numbers(text)
    found = 0
    for row in rows:
        values = [f"{float(v):.3g}" for v in row if abs(abs(float(v)) - 0.5) < 0.49]
        found += bool(values) and all(v in numbers for v in values)
    return found


def _run_recording(config: Any, run_dir: Path) -> list[Held]:
    """Run ``config``, recording what the server held of each site as it keeps it."""
    held: list[Held] = []
    add = Holdings.add

    def recording_add(self: Holdings, site: int, kept: Held) -> None:
        held.append(kept)
        add(self, site, kept)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Holdings, "add", recording_add)
        run_experiment(config, run_dir)
    return held


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Held]]:
    """The tabular run, and what the server held of each site."""
    run_dir = tmp_path_factory.mktemp("dishonest") / "run"
    config = _config(
        adversary=[ATTACK, TRAP],
        updates=[1],
        sites=SITES,
        rounds=2,
        secure_aggregation="ideal",
    )
    return run_dir, _run_recording(config, run_dir)


@pytest.fixture(scope="module")
def attacked_images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Held]]:
    """The default image model (the small CNN) on 8x8 digits, FedSGD, one round: the server
    sends site 0 imprint weights and reads its update."""
    run_dir = tmp_path_factory.mktemp("dishonest-images") / "run"
    config = validate_config(
        {
            "name": "dishonest-images",
            "seed": 3,
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "model": {"name": "small_cnn"},
            "fl": {
                "rounds": 1,
                "local_steps": 1,
                "batch_size": 64,
                "adversary": [{"attack": "imprint", "rounds": [1], "sites": [0]}],
            },
            "audit": {
                "enabled": True,
                "reference_pool": True,
                "settings": {**TINY_AUDIT, "generator": {"kind": "reference_pool"}},
            },
        }
    )
    return run_dir, _run_recording(config, run_dir)


@pytest.mark.ray
def test_the_server_rebuilds_the_targets_rows_from_the_secure_sum(attacked) -> None:
    run_dir, held = attacked
    # It held each round's target only (the others got the zero-update model), and only the sum.
    assert [(h.meta.round, h.meta.decoded, h.meta.server_held) for h in held] == [
        (1, "imprint", "sum"),
        (2, "trap", "sum"),
    ]
    layout = run_files(run_dir)
    audits = {s: json.loads(layout.audit(s).read_text()) for s in range(SITES)}
    assert audits[2]["dishonest_server"] == []
    [imprint] = audits[0]["dishonest_server"]
    assert imprint["attack"] == "inconsistent" and imprint["decoded"] == "imprint"
    assert imprint["n_records"] == 64 and imprint["n_returned"] == len(held[0].rebuilt)
    # FedSGD, 64 rows in 128 bins: most rows alone in theirs come back; public rows, none.
    assert imprint["share_rebuilt"] >= 0.4 > 0.05 >= imprint["baseline_share_rebuilt"]
    # Trap units each fire for about one row of the batch: fewer, still far above chance.
    [trap] = audits[1]["dishonest_server"]
    assert (trap["round"], trap["decoded"], trap["n_records"]) == (2, "trap", 64)
    assert trap["share_rebuilt"] >= 0.2 > 0.05 >= trap["baseline_share_rebuilt"]
    # fl.model_checks defaults to record with fl.adversary: the site trained anyway, and its
    # own checks of the imprint model (repeated rows) and the trap (lone units) caught them.
    assert "repeated_rows" in imprint["site_checks"] and "trained anyway" in imprint["site_checks"]
    assert "lone_units" in trap["site_checks"]
    report = json.loads(layout.report_json.read_text())
    shares = {s["site_id"]: s["privacy"]["dishonest_server"] for s in report["sites"]}
    assert shares[0][0]["share_rebuilt"] == imprint["share_rebuilt"] and shares[2] == []
    md = layout.report_md.read_text()
    assert f"{imprint['share_rebuilt']:.0%} (baseline 0%), inconsistent (imprint), round 1" in md


@pytest.mark.ray
def test_secure_aggregation_hands_the_server_the_targets_own_update(attacked) -> None:
    """The sum over the target's weight is the update the target sent, in the layer the
    attacks read: what the server rebuilds, and the target's update audit, are what a run
    without secure aggregation gives (docs/dishonest_server.md has both at 8 sites)."""
    run_dir, held = attacked
    layout = run_files(run_dir)
    sent = torch.load(layout.site_state / local_model_name(0, 1), weights_only=True)
    for key in ("net.0.weight", "net.0.bias"):
        own = sent["state_dict"][key].double()
        from_sum = torch.as_tensor(held[0].model[key]).double()
        assert torch.allclose(from_sum, own, rtol=0, atol=1e-6 * float(own.abs().max())), key
    [update] = json.loads(layout.audit(0).read_text())["updates"]
    assert update["round"] == 1


@pytest.mark.ray
def test_what_the_server_held_is_kept_with_the_runs_state(attacked, tmp_path) -> None:
    """A run resumed after its attacked rounds hands the sites what the server held then:
    each round's file (0600) reads back as it was held, and gives the same audit query; a
    round past the last checkpoint is dropped (a resumed run redoes it)."""
    run_dir, held = attacked
    for folder in ("checkpoints", "server_held"):
        shutil.copytree(run_dir / folder, tmp_path / folder)
    layout = run_files(tmp_path)
    assert stat.S_IMODE(layout.server_held(1).stat().st_mode) == 0o600
    loaded = Holdings.load(layout)
    assert {s: [h.meta for h in kept] for s, kept in loaded.by_site.items()} == {
        0: [held[0].meta],
        1: [held[1].meta],
    }
    for site, kept in ((0, held[0]), (1, held[1])):
        [back] = loaded.by_site[site]
        assert back.rebuilt is not None and kept.rebuilt is not None
        assert torch.equal(back.rebuilt, kept.rebuilt)
        assert all(np.array_equal(back.model[k], kept.model[k]) for k in kept.model)
        query, again = Holdings({site: [kept]}).audit_records(site), loaded.audit_records(site)
        assert again.keys() == query.keys()
    layout.round_checkpoint(2).unlink()  # as if stopped before round 2 was committed
    assert list(Holdings.load(layout).by_site) == [0] and not layout.server_held(2).exists()


@pytest.mark.ray
def test_every_site_sent_a_crafted_model_flags_it_by_consistency(attacked) -> None:
    """Each round every site got a crafted model (the target the attack's, the others the
    dead one) while the server announced the real one: each site's consistency check
    flags it, and the structure checks name the kind."""
    layout = run_files(attacked[0])
    kinds = {(1, 0): "repeated_rows", (2, 1): "lone_units"}
    for site in range(SITES):
        records = read_check_records(layout.site_state / model_checks_name(site))
        assert [r.server_round for r in records] == [1, 2]
        for record in records:
            flagged = {o.check for o in record.flagged}
            kind = kinds.get((record.server_round, site), "dead_units")
            assert {"consistency", kind} <= flagged, (site, record.server_round, flagged)
            assert not record.refused


@pytest.mark.ray
@pytest.mark.parametrize("run", ["attacked", "attacked_images"])
def test_no_rebuilt_row_reaches_the_runs_files_or_pages(run, request) -> None:
    run_dir, held = request.getfixturevalue(run)
    rebuilt = torch.cat([h.rebuilt.flatten(1) for h in held])  # rows, or images' pixels
    layout = run_files(run_dir)
    # The check finds rows where they are (a file holding them, as the site's own state).
    assert _rows_found(rebuilt, json.dumps(rebuilt.tolist())) >= len(rebuilt) - 2
    private = (layout.site_state, layout.sites)
    scanned = [
        p
        for p in run_dir.rglob("*")
        if p.is_file()
        and p.suffix in {".json", ".jsonl", ".md", ".html", ".csv", ".log", ".txt", ".yaml"}
        and not any(d in p.parents for d in private)
    ]
    assert {p.name for p in scanned} >= {"report.json", "metrics.jsonl", "site-0.html"}
    for path in scanned:
        assert _rows_found(rebuilt, path.read_text()) == 0, path
    page = (layout.site_reports / "site-0.html").read_text()
    assert "What a server that does not play fair could rebuild" in page
    never_attacked = max(layout.audit_files())
    other = (layout.site_reports / f"site-{never_attacked}.html").read_text()
    assert "What a server that does not play fair" not in other


@pytest.mark.ray
def test_the_gate_and_the_evidence_pack_read_what_was_rebuilt(attacked, tmp_path, capsys) -> None:
    """A release policy's max_rebuilt_share reads the dishonest server's share (exit 1 above
    it), and the site's evidence pack reports the attack."""
    run_dir, _ = attacked
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"name": "rebuilt", "requirements": {"max_rebuilt_share": 0.1}})
    )
    code = main(["gate", str(run_dir), "--policy", str(policy)])
    lines = capsys.readouterr().out.splitlines()
    [site0] = [line for line in lines if " site 0: " in line]
    assert code == 1 and "FAIL" in site0 and "dishonest server: share rebuilt" in site0
    layout = run_files(run_dir)
    pack = site_pack_html(site_page_alone(layout, 0, report_config(layout)), dp_level=None)
    assert "Crafted models from a server that does not play fair" in pack


@pytest.mark.ray
def test_images_rebuilt_in_a_run_show_on_the_sites_own_page_only(attacked_images) -> None:
    """The small CNN's imprint inside a run: the site scores the images (SSIM) and keeps
    thumbnails of its records beside the server's rebuilds in its own folder; only its own
    page (and that page's JSON) links them, no other page or file of the run."""
    run_dir, held = attacked_images
    layout = run_files(run_dir)
    [scored] = json.loads(layout.audit(0).read_text())["dishonest_server"]
    assert (scored["measure"], scored["decoded"], scored["n_records"]) == ("ssim", "imprint", 64)
    assert scored["n_returned"] == len(held[0].rebuilt) > 32
    thumbnails = layout.site_state / rebuilt_gallery_name(0)
    assert stat.S_IMODE(thumbnails.stat().st_mode) == 0o600
    page = (layout.site_reports / "site-0.html").read_text()
    assert f'<img src="../site_state/{thumbnails.name}"' in page
    own = {layout.site_reports / "site-0.html", layout.site_reports / "site-0.json"}
    for path in run_dir.rglob("*"):
        if path.is_file() and path.suffix in {".html", ".md", ".json", ".csv", ".jsonl"}:
            assert (thumbnails.name in path.read_text()) == (path in own), path
