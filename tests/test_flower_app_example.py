"""The minimal Flower app of ``examples/flower_app`` (Flower's own FedAvg, the user's model
and training loop): in Flower's simulation every site audits the final model and the report
holds each one; under the default site policy the same app refuses per-record scores."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.simulation import run_simulation
from flwr.supercore.task_identity import TaskIdentity

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.contracts.wire import ARRAYS, CONFIG, SITE_REFUSED_CODE, AuditInstructions

APP_DIR = Path(__file__).resolve().parents[1] / "examples" / "flower_app"

SETTINGS = AuditConfig(
    quick=True,
    helper_epochs=1,
    device="cpu",
    splits={"generator": 100, "train": 60, "val": 30},
    generator={"kind": "cgan", "epochs": 1},
    classifier={"epochs": [1], "gbm_iterations": [20]},
    calibration={"reference_models": 0},
)


@pytest.fixture
def minimal_app(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(APP_DIR))  # the workers get the driver's sys.path
    import minimal_app

    yield minimal_app
    sys.modules.pop("minimal_app", None)


def test_the_app_uses_none_of_the_projects_server_or_strategy_code():
    tree = ast.parse((APP_DIR / "minimal_app.py").read_text())
    imported = {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "server" not in imported and "simulations" not in imported and "clients" not in imported


@pytest.mark.ray
def test_every_site_is_audited_and_reported(minimal_app, tmp_path, ray_init_args):
    run_dir = tmp_path / "run"
    server_app, client_app = minimal_app.make_apps(run_dir, rounds=1, settings=SETTINGS)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=2,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": ray_init_args,
        },
    )
    report = json.loads((run_dir / "report.json").read_text())
    sites = {s["site_id"]: s for s in report["sites"]}
    assert sorted(sites) == [0, 1]
    for site in sites.values():
        assert site["status"] == "ok", site["error"]
        assert site["n_members"] > 0 and site["audit"]["two_sided"]["eps_tilde"] is not None
    assert report["dp_level"] == "none"
    assert (run_dir / "ledger.csv").exists() and (run_dir / "site-reports").is_dir()


def test_the_default_site_policy_refuses_per_record_scores(minimal_app, tmp_path, monkeypatch):
    monkeypatch.setattr(TaskIdentity, "_run_id", 7)  # a ServerApp process sets these
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)
    scores = SETTINGS.model_copy(update={"return_scores": True})
    _, client_app = minimal_app.make_apps(tmp_path, settings=scores)
    model = minimal_app.NetTask().make_model()
    query = Message(
        content=RecordDict(
            {ARRAYS: ArrayRecord(model.state_dict()), CONFIG: AuditInstructions(seed=0).to_record()}
        ),
        message_type=f"{MessageType.QUERY}.audit",
        dst_node_id=1,
    )
    context = Context(
        run_id=7, node_id=1, node_config={"partition-id": 0}, state=RecordDict(), run_config={}
    )
    reply = client_app(query, context)
    assert reply.has_error() and reply.error.code == SITE_REFUSED_CODE
    assert "policy-allow-scores=false refuses audit.settings.return_scores=true" in (
        reply.error.reason
    )
