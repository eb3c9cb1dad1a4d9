"""A minimal Flower app of your own (FedAvg from Flower, your model, your training loop)
with panoramia-fl's per-site audits, site policy, ledger and report added by two calls.

    cd examples/flower_app && python minimal_app.py      # Flower's simulation, 2 sites

Writes runs/minimal_app/ (report.html, ledger.csv, audits/, site-reports/). Walkthrough:
docs/flower_integration.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.deployment.site_audits import Records, add_site_audits, audit_sites, site_runtime
from panoramia_fl.ml.tasks.image import ImageClassificationTask


class Net(nn.Module):
    """Your model: a small MLP on 8x8 images."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@dataclass
class NetTask(ImageClassificationTask):
    """How the audit builds, trains and scores your model: an image task (uint8 records,
    cross-entropy) whose model is yours."""

    model_name: str = "net"
    num_classes: int = 10
    input_shape: tuple[int, ...] = (1, 8, 8)

    def make_model(self) -> nn.Module:
        return Net()


def site_records(site: int, num_sites: int) -> tuple[Records, Records]:
    """Your data loader: this site's members (trained on) and holdout (never trained on)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.clip(digits.images * 16.0, 0, 255).astype(np.uint8)[:, None]
    y = digits.target.astype(np.int64)
    mine = np.random.default_rng(0).permutation(len(x))[site::num_sites]
    cut = int(0.7 * len(mine))
    return Records(x[mine[:cut]], y[mine[:cut]]), Records(x[mine[cut:]], y[mine[cut:]])


def make_apps(
    run_dir: Path, *, num_sites: int = 2, rounds: int = 2, settings: AuditConfig | None = None
) -> tuple[ServerApp, ClientApp]:
    """Your ServerApp and ClientApp; the two marked lines add the audits."""
    settings = settings or AuditConfig()
    task = NetTask(batch_size=32)
    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        site = int(context.node_config["partition-id"])
        members, _ = site_records(site, num_sites)
        model = task.make_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for inputs, labels in task.loader(members.x, members.y, shuffle=True, seed=site):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(inputs), labels).backward()
            optimizer.step()
        metrics = MetricRecord({"num-examples": len(members)})
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
        return Message(content=content, reply_to=msg)

    def site(context: Context):
        site_id = int(context.node_config["partition-id"])
        members, holdout = site_records(site_id, num_sites)
        return site_runtime(
            context, site_id=site_id, task=task, members=members, holdout=holdout, settings=settings
        )

    add_site_audits(client_app, site)  # <- the site's audit queries

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(0)
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0)
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord(task.make_model().state_dict()), num_rounds=rounds
        )
        # <- every site audits the final model; the report is written
        audit_sites(
            grid, result.arrays, run_dir, num_sites=num_sites, settings=settings, model_round=rounds
        )

    return server_app, client_app


if __name__ == "__main__":
    from flwr.simulation import run_simulation

    quick = AuditConfig(quick=True)  # a minute or two on a laptop's CPU
    server_app, client_app = make_apps(Path("runs/minimal_app").resolve(), settings=quick)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=2)
