"""The run directory's files as contracts: ``RunLayout``'s names, checkpoint meta and the
round log, each read back as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import run_files

from panoramia_fl.contracts.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.run_files import CheckpointMeta
from panoramia_fl.contracts.run_log import (
    ClientDPFile,
    ClientDPSite,
    RoundRecord,
    SiteRound,
    read_rounds,
)
from panoramia_fl.server.run_writer import append_round


def test_run_layout_keeps_todays_names(tmp_path):
    layout = run_files(tmp_path)
    expected = {
        layout.config: "config.yaml",
        layout.partition: "partition.json",
        layout.dataset: "dataset.json",
        layout.metrics: "metrics.jsonl",
        layout.audit(3): "audits/site-3.json",
        layout.round_checkpoint(7): "checkpoints/round-0007.pt",
        layout.round_checkpoint(12345): "checkpoints/round-12345.pt",
        layout.final_model: "global_model.pt",
        layout.client_dp_accounting: "client_dp.json",
        layout.site_file(2): "sites/site-2.npz",
        layout.public: "sites/public.npz",
        layout.site_state: "site_state",
        layout.site_accountant_history(1): "site_state/site-1-dp-ledger.json",
        layout.exposed_records(1): "site_state/site-1-exposed-records.json",
        layout.reference_models: "reference_models",
        layout.reference_manifest: "reference_models/manifest.json",
        layout.reference_model(0): "reference_models/ref-0.pt",
        layout.deployment: "deployment",
    }
    for path, name in expected.items():
        assert path == tmp_path / name


def test_run_layout_finds_checkpoints_and_audit_files(tmp_path):
    layout = run_files(str(tmp_path))  # a str is taken as a path
    assert layout.round_checkpoints() == {} and layout.audit_files() == {}
    for n in (1, 2, 10):
        layout.round_checkpoint(n).parent.mkdir(exist_ok=True)
        layout.round_checkpoint(n).touch()
    (layout.checkpoints / "round-0003.pt.tmp").touch()
    assert sorted(layout.round_checkpoints()) == [1, 2, 10]
    layout.audits.mkdir()
    for site in (0, -1):
        layout.audit(site).touch()
    (layout.audits / "site-1.tmp").touch()
    assert layout.audit_files() == {-1: layout.audit(-1), 0: layout.audit(0)}


def test_checkpoint_meta_is_written_as_todays_dict(tmp_path):
    meta = CheckpointMeta(
        modality="image",
        model="cnn",
        model_options={"width": 8},
        num_classes=10,
        input_shape=(1, 8, 8),
        dp=True,
        dp_level="both",
    )
    path = run_files(tmp_path).final_model
    save_checkpoint(path, Checkpoint(round=3, state_dict={"w": torch.zeros(1)}, meta=meta))
    raw = torch.load(path, weights_only=True)
    assert list(raw) == ["round", "state_dict", "meta"]
    assert raw["meta"] == {
        "modality": "image",
        "model": "cnn",
        "model_options": {"width": 8},
        "num_classes": 10,
        "input_shape": [1, 8, 8],
        "dp": True,
        "dp_level": "both",
    }
    assert list(raw["meta"]) == list(json_safe(meta))
    assert load_checkpoint(path).meta == meta


def test_checkpoint_without_meta_and_older_meta(tmp_path):
    path = Path(tmp_path) / "old.pt"
    save_checkpoint(path, Checkpoint(round=1, state_dict={}, meta=None))
    assert torch.load(path, weights_only=True)["meta"] == {}
    assert load_checkpoint(path).meta is None
    older = {"modality": "tabular", "model": "mlp", "num_classes": 2, "input_shape": [5]}
    meta = from_dict(CheckpointMeta, older)
    assert (meta.dp, meta.dp_level, meta.model_options, meta.input_shape) == (False, None, {}, (5,))
    with pytest.raises(ValueError, match="'model' is missing"):
        from_dict(CheckpointMeta, {"modality": "image"})


def test_round_log_is_one_record_for_writer_and_reader(tmp_path: Path) -> None:
    first = RoundRecord(
        round=1,
        global_loss=0.9,
        elapsed_s=2.5,
        sites={"10": SiteRound(0.3, None, 100), "2": SiteRound(0.4, 1.5, 90, 2.0)},
        failures={"3": "timeout"},
    )
    append_round(run_files(tmp_path), first)
    append_round(run_files(tmp_path), RoundRecord(round=2))
    line = json.loads(run_files(tmp_path).metrics.read_text().splitlines()[0])
    # Top-level nulls and empties are left out; a site's numbers are all there.
    assert "global_accuracy" not in line and line["sites"]["10"]["dp_epsilon"] is None
    back = read_rounds(run_files(tmp_path))
    assert back[0] == first  # the same record (dicts compare without order)
    assert list(back[0].sites) == ["2", "10"]  # numeric order
    assert back[1] == RoundRecord(round=2)


def test_run_log_records_name_the_bad_key() -> None:
    with pytest.raises(ValueError, match=r"key 'sites\.0\.train_loss' must be a number"):
        from_dict(RoundRecord, {"round": 1, "sites": {"0": {"train_loss": "low"}}})
    with pytest.raises(ValueError, match="key 'round' is missing"):
        from_dict(RoundRecord, {"sites": {}})
    with pytest.raises(ValueError, match=r"key 'sites\.1\.rounds' must be a list"):
        from_dict(ClientDPFile, {"sites": {"1": {"rounds": 3}}})
    ledger = ClientDPFile(delta=1e-5, sites={"1": ClientDPSite([1, 2], float("inf"), 0.5)})
    # A non-finite epsilon is written as null and read back as None (its field is optional).
    assert from_dict(ClientDPFile, json.loads(json.dumps(ledger.to_dict()))).sites["1"] == (
        ClientDPSite([1, 2], None, 0.5)
    )
