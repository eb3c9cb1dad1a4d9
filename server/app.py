"""The ServerApp: federated rounds with checkpoints, then the audit phase's fan-out.

Generic over the task: initial weights, central evaluation and checkpoint metadata are
arguments (:class:`ServerSettings`), so the server never imports the harness or data.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from contracts.wire import CANARY_JSON, scalar
from server.checkpoint import (
    FINAL_NAME,
    Checkpoint,
    latest_round_checkpoint,
    load_checkpoint,
    round_path,
    save_checkpoint,
)
from server.client_dp import (
    ClientDPLedger,
    ClientDPSettings,
    train_config_entries,
    wrap_strategy,
)
from server.run_log import append_round, sites_needing_audit, truncate_rounds, write_site_audit
from server.strategy import StrategySettings, make_strategy

log = logging.getLogger(__name__)
StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ServerSettings:
    """Everything the ServerApp needs, handed in by whoever builds it."""

    run_dir: Path
    num_sites: int
    rounds: int
    local_epochs: int
    seed: int
    strategy: StrategySettings
    client_dp: ClientDPSettings | None
    """Client-level DP (Flower's wrappers and the run's ledger); ``None``: off."""
    initial_state: Callable[[], StateDict]
    central_eval: Callable[[StateDict], dict[str, float]] | None = None
    checkpoint_meta: dict[str, Any] | None = None
    phases: tuple[str, ...] = ("train", "audit")
    node_wait_s: float = 300.0
    timeout_s: float = 24 * 3600.0
    progress: bool = True


def _wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    deadline = time.time() + timeout
    while len(nodes := list(grid.get_node_ids())) < n:
        if time.time() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {n} sites connected within {timeout}s")
        time.sleep(0.5)
    return nodes


def _site_map(grid: Grid, nodes: list[int], timeout: float) -> dict[int, int]:
    """node id -> site id, asked of every node (replies carry node ids only)."""
    messages = [
        Message(content=RecordDict(), message_type=f"{MessageType.QUERY}.whoami", dst_node_id=node)
        for node in nodes
    ]
    mapping = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            raise RuntimeError(
                f"node {reply.metadata.src_node_id} did not say which site it "
                f"is: {reply.error.reason}"
            )
        mapping[reply.metadata.src_node_id] = int(scalar(reply.content["metrics"]["site-id"]))
    if sorted(mapping.values()) != list(range(len(nodes))):
        raise RuntimeError(
            f"site ids reported by the nodes are not 0..{len(nodes) - 1}: "
            f"{sorted(mapping.values())}"
        )
    return mapping


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=True)


def run_training(grid: Grid, settings: ServerSettings, site_of_node: dict[int, int]) -> StateDict:
    """Rounds from the last checkpoint to ``settings.rounds``; returns the final weights.

    A round is committed by its checkpoint, written last: its metrics line and client-level
    DP ledger come first, so a kill at any point loses nothing finished and a resumed run
    drops (and redoes) whatever lies past the last checkpoint.
    """
    run_dir = settings.run_dir
    meta = settings.checkpoint_meta or {}
    latest = latest_round_checkpoint(run_dir)
    if latest is not None:
        start = load_checkpoint(latest)
        done, state = start.round, start.state_dict
    else:
        done, state = 0, settings.initial_state()
    truncate_rounds(run_dir, done)
    if done >= settings.rounds:
        return state
    sites = make_strategy(
        settings.strategy,
        num_sites=settings.num_sites,
        site_of_node=site_of_node,
        round_offset=done,
    )
    strategy: Strategy = sites
    ledger = None
    if settings.client_dp is not None:
        strategy = wrap_strategy(sites, settings.client_dp, sites_per_round=sites.sites_per_round)
        ledger = ClientDPLedger.load_or_new(
            run_dir,
            settings.client_dp,
            population_size=settings.num_sites,
            sites_per_round=sites.sites_per_round,
        )
        ledger.truncate(done)
    bar = _progress(settings.rounds, "FL rounds", settings.progress)
    bar.update(done)
    started = time.time()

    def on_round(server_round: int, arrays: ArrayRecord) -> None:
        if server_round == 0:
            return None
        global_round = done + server_round
        weights = arrays.to_torch_state_dict()
        entry: dict[str, Any] = {"round": global_round}
        if settings.central_eval is not None:
            scores = settings.central_eval(weights)
            entry.update({f"global_{k}": v for k, v in scores.items()})
        if ledger is not None:
            ledger.record_round(global_round, sites.sites_for_round(server_round))
            ledger.save(run_dir)
        record = sites.rounds.get(server_round)
        entry["sites"] = (
            {}
            if record is None
            else {
                str(site): _site_round_entry(m, None if ledger is None else ledger.epsilon(site))
                for site, m in sorted(record.sites.items())
            }
        )
        if record is not None and record.failures:
            entry["failures"] = {str(s): r for s, r in record.failures.items()}
        entry["elapsed_s"] = time.time() - started
        append_round(run_dir, entry)
        save_checkpoint(
            round_path(run_dir, global_round),
            Checkpoint(round=global_round, state_dict=weights, meta=meta),
        )
        bar.update(1)
        bar.set_postfix(
            {
                k: round(v, 3)
                for k, v in entry.items()
                if k.startswith("global_") and isinstance(v, float)
            }
        )
        return None

    train_config = ConfigRecord(
        {
            "local-epochs": settings.local_epochs,
            "seed": settings.seed,
            **train_config_entries(settings.client_dp),
        }
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(state),
        num_rounds=settings.rounds - done,
        train_config=train_config,
        evaluate_fn=on_round,
        timeout=settings.timeout_s,
    )
    bar.close()
    return result.arrays.to_torch_state_dict()


def _site_round_entry(metrics: dict[str, float], client_epsilon: float | None) -> dict[str, Any]:
    """One site's line in a round: its training loss and the DP it has spent so far."""
    entry = {
        "train_loss": metrics.get("train-loss"),
        "dp_epsilon": None if metrics.get("dp-epsilon", -1) < 0 else metrics["dp-epsilon"],
        "num_examples": int(metrics.get("num-examples", 0)),
    }
    if client_epsilon is not None:
        entry["dp_epsilon_client"] = client_epsilon
    return entry


def run_audits(
    grid: Grid,
    settings: ServerSettings,
    site_of_node: dict[int, int],
    state: StateDict,
    model_round: int,
) -> None:
    """Send the final model (of round ``model_round``) to every site still missing an audit
    of it, in one message each; write each site's result as soon as it arrives."""
    run_dir = settings.run_dir
    todo = sites_needing_audit(run_dir, sorted(site_of_node.values()), model_round)
    if not todo:
        return
    node_of_site = {s: n for n, s in site_of_node.items()}
    content = RecordDict(
        {"arrays": ArrayRecord(state), "config": ConfigRecord({"seed": settings.seed})}
    )
    messages = [
        Message(
            content=content, message_type=f"{MessageType.QUERY}.audit", dst_node_id=node_of_site[s]
        )
        for s in todo
    ]
    pending = set(grid.push_messages(messages))
    bar = _progress(len(todo), "site audits", settings.progress)
    deadline = time.time() + settings.timeout_s
    while pending and time.time() < deadline:
        for reply in grid.pull_messages(pending):
            pending.discard(reply.metadata.reply_to_message_id)
            site = site_of_node.get(reply.metadata.src_node_id, -1)
            payload = {**_site_audit_payload(site, reply), "model_round": model_round}
            write_site_audit(run_dir, site, payload)
            bar.update(1)
        time.sleep(0.2)
    bar.close()
    if pending:
        log.warning("%d site audits did not answer in time", len(pending))


def _site_audit_payload(site: int, reply: Message) -> dict[str, Any]:
    if reply.has_error():
        return {
            "site_id": site,
            "status": "failed",
            "error": str(reply.error.reason),
            "result": None,
        }
    rec = reply.content["audit"]
    payload: dict[str, Any] = {
        "site_id": site,
        "status": str(rec["status"]),
        "error": str(rec["error"]) if "error" in rec else None,
        "elapsed_s": float(scalar(rec["elapsed-s"])),
        "result": None,
    }
    if payload["status"] == "ok":
        dp_eps = float(scalar(rec["dp-epsilon"]))
        payload.update(
            {
                "n_members": int(scalar(rec["n-members"])),
                "n_holdout": int(scalar(rec["n-holdout"])),
                "dp_epsilon": None if dp_eps < 0 else dp_eps,
                "result": json.loads(str(rec["result-json"])),
                "canary": json.loads(str(rec[CANARY_JSON])) if CANARY_JSON in rec else None,
            }
        )
    else:
        payload["traceback"] = str(rec.get("traceback", ""))
    return payload


def build_server_app(settings: ServerSettings) -> ServerApp:
    """The ServerApp for ``settings.phases`` (train, audit, or both in order)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = _wait_for_nodes(grid, settings.num_sites, settings.node_wait_s)
        site_of_node = _site_map(grid, nodes, settings.timeout_s)
        state, model_round = None, settings.rounds
        if "train" in settings.phases:
            state = run_training(grid, settings, site_of_node)
            save_checkpoint(
                settings.run_dir / FINAL_NAME,
                Checkpoint(
                    round=settings.rounds, state_dict=state, meta=settings.checkpoint_meta or {}
                ),
            )
        if "audit" in settings.phases:
            if state is None:
                final = load_checkpoint(settings.run_dir / FINAL_NAME)
                state, model_round = final.state_dict, final.round
            run_audits(grid, settings, site_of_node, state, model_round)

    return app
