"""The ClientApp: each site trains locally and, at the end, audits the global model.

Message types handled:

- ``train``: one round of local training; replies with weights and the site's metrics.
- ``query.whoami``: the site id (Flower replies carry node ids, not site ids).
- ``query.audit``: run PANORAMIA on the site's own members against the final model; replies
  with summary numbers and curves only.

Everything a site needs (its task, data, DP policy, audit settings) comes from a
``resolve(context) -> SiteRuntime`` callable, so the same app runs in simulation and under
the Deployment Engine.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    ConfigRecordValues,
    Context,
    Message,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod

from clients.audit_handler import SiteAuditOutput
from clients.privacy import DPSettings, PrivacyLedger
from clients.site_data import SiteData
from clients.training import TrainableTask, train_locally
from contracts.wire import CANARY_JSON, CLIENT_CLIPPING, UNIT_WEIGHT, scalar

LEDGER_KEY = "dp-ledger"


@dataclass(frozen=True)
class SiteRuntime:
    """A site's task, data and policies, resolved from the Flower context."""

    site_id: int
    task: TrainableTask
    data: SiteData
    device: torch.device
    torch_threads: int
    dp: DPSettings | None
    ledger_path: Path | None
    audit_runner: Callable[[TrainableTask, torch.nn.Module, SiteData, int], SiteAuditOutput] | None
    """Runs the audit: the JSON-able result (``audit.AuditResult.to_dict``) and the
    canaries' one-run audit when the site has canaries."""


Resolver = Callable[[Context], SiteRuntime]


def _ledger(runtime: SiteRuntime, context: Context) -> PrivacyLedger:
    assert runtime.dp is not None
    if LEDGER_KEY in context.state.config_records:
        text = str(context.state.config_records[LEDGER_KEY]["json"])
        return PrivacyLedger.from_json(text)
    return PrivacyLedger.load(runtime.ledger_path, accountant=runtime.dp.accountant)


def _save_ledger(ledger: PrivacyLedger, runtime: SiteRuntime, context: Context) -> None:
    context.state.config_records[LEDGER_KEY] = ConfigRecord({"json": ledger.to_json()})
    ledger.save(runtime.ledger_path)


_CLIPPING_MODS = {"fixed": fixedclipping_mod, "adaptive": adaptiveclipping_mod}


def clipping_mod(msg: Message, context: Context, call_next: Callable) -> Message:
    """Flower's client-side clipping mod of the kind the server's DP wrapper asked for
    (client-level DP with clipping at the sites); otherwise the update goes out as is."""
    kind = msg.content["config"].get(CLIENT_CLIPPING)
    if kind is None:
        return call_next(msg, context)
    if str(kind) not in _CLIPPING_MODS:
        raise ValueError(f"{CLIENT_CLIPPING}: unknown clipping {kind!r}")
    return _CLIPPING_MODS[str(kind)](msg, context, call_next)


def build_client_app(resolve: Resolver) -> ClientApp:
    """Build the ClientApp around a site resolver."""
    app = ClientApp()

    @app.train(mods=[clipping_mod])
    def train(msg: Message, context: Context) -> Message:
        runtime = resolve(context)
        torch.set_num_threads(runtime.torch_threads)
        config = msg.content["config"]
        server_round = int(scalar(config["server-round"]))
        state = msg.content.array_records["arrays"].to_torch_state_dict()
        ledger = _ledger(runtime, context) if runtime.dp is not None else None
        result = train_locally(
            runtime.task,
            state,
            x=runtime.data.training_x,
            y=runtime.data.training_y,
            epochs=int(scalar(config["local-epochs"])),
            seed=int(scalar(config["seed"])) * 100_003 + server_round * 1_009 + runtime.site_id,
            device=runtime.device,
            proximal_mu=float(scalar(config.get("proximal-mu", 0.0))),
            dp=runtime.dp,
            ledger=ledger,
        )
        if ledger is not None:
            _save_ledger(ledger, runtime, context)
        metrics: dict[str, MetricRecordValues] = {
            "num-examples": result.num_examples,
            "train-loss": result.train_loss,
            "site-id": runtime.site_id,
            UNIT_WEIGHT: 1,
            "dp-epsilon": -1.0 if result.dp_epsilon is None else result.dp_epsilon,
            "noise-multiplier": -1.0
            if result.noise_multiplier is None
            else result.noise_multiplier,
        }
        content = RecordDict(
            {"arrays": ArrayRecord(result.state_dict), "metrics": MetricRecord(metrics)}
        )
        return Message(content=content, reply_to=msg)

    @app.query("whoami")
    def whoami(msg: Message, context: Context) -> Message:
        runtime = resolve(context)
        return Message(
            content=RecordDict({"metrics": MetricRecord({"site-id": runtime.site_id})}),
            reply_to=msg,
        )

    @app.query("audit")
    def audit(msg: Message, context: Context) -> Message:
        started = time.time()
        runtime = resolve(context)
        torch.set_num_threads(runtime.torch_threads)
        if runtime.audit_runner is None:
            raise RuntimeError(f"site {runtime.site_id}: auditing is not configured")
        model = runtime.task.make_model()
        model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
        seed = int(scalar(msg.content["config"]["seed"]))
        try:
            output = runtime.audit_runner(runtime.task, model, runtime.data, seed)
        except Exception as err:  # reply with the site's error so the server can report it
            logging.getLogger(__name__).debug("audit failed", exc_info=True)
            reply: dict[str, ConfigRecordValues] = {
                "site-id": runtime.site_id,
                "status": "failed",
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(limit=5),
                "elapsed-s": time.time() - started,
            }
            return Message(content=RecordDict({"audit": ConfigRecord(reply)}), reply_to=msg)
        dp_eps = None
        if runtime.dp is not None:
            dp_eps = _ledger(runtime, context).epsilon(runtime.dp.delta)
        reply = {
            "site-id": runtime.site_id,
            "status": "ok",
            "result-json": json.dumps(output.result),
            "n-members": int(len(runtime.data.train_x)),
            "n-holdout": int(len(runtime.data.holdout_x)),
            "dp-epsilon": -1.0 if dp_eps is None else dp_eps,
            "elapsed-s": time.time() - started,
        }
        if output.canary is not None:
            reply[CANARY_JSON] = json.dumps(output.canary)
        return Message(content=RecordDict({"audit": ConfigRecord(reply)}), reply_to=msg)

    return app
