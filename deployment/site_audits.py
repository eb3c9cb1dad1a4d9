"""Per-site audits in your own Flower app (Message API): the audit phase, the site policy,
the ledger and the report, without this project's ServerApp, ClientApp or strategies.

Two calls, one on each side (docs/flower_integration.md walks through a complete app)::

    # ClientApp: answer the audit queries from the site's own records and task
    add_site_audits(client_app, lambda context: site_runtime(context, site_id=..., ...))

    # ServerApp, after your own training: every node audits the final weights
    audit_sites(grid, result.arrays, run_dir, num_sites=2, settings=settings)

The queries, replies, audit files and report are the project's own (``query.whoami``,
``query.audit``, ``audits/site-<id>.json``, ``report.*``, ``ledger.csv``, ``site-reports/``),
so a run of your app reads like a run of ``panoramia-fl``. Each site decides what may leave
it by its SuperNode's node config (:class:`clients.site_policy.SitePolicy`; the strict
defaults refuse per-record scores), whatever the server asks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from flwr.app import ArrayRecord, Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.clients.audit_handler import SiteAuditPolicy, make_audit_runner
from panoramia_fl.clients.client_app import SiteRuntime, add_site_queries
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_policy import SitePolicy
from panoramia_fl.contracts.checkpoint import StateDict
from panoramia_fl.contracts.dp_level import DPLevel
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout, site_refusals_name
from panoramia_fl.ml.tasks import TorchTask
from panoramia_fl.reporting import ReportFiles, write_report
from panoramia_fl.server.server_app import AuditFanout, run_audits, site_map, wait_for_nodes
from panoramia_fl.simulations.config_file import report_config

__all__ = ["Records", "add_site_audits", "audit_sites", "site_runtime"]


def site_runtime(
    context: Context,
    *,
    site_id: int,
    task: TorchTask,
    members: Records,
    holdout: Records | None = None,
    settings: AuditConfig | None = None,
    state_dir: Path | None = None,
    policy: SitePolicy | None = None,
    torch_threads: int = 1,
) -> SiteRuntime:
    """What a site audits with: its ``members`` (the records it trained on), its real
    non-members (``holdout``: RM;RN and O(1)), the ``task`` (model and loss, e.g.
    :func:`ml.tasks.build_task` with a registered model) and the audit ``settings`` (the
    same at every site and in :func:`audit_sites`).

    ``policy`` defaults to the one in the node config (``policy-*`` keys, strict
    defaults), so the site, not the server, decides. ``state_dir`` holds the site's own
    refusal log (None: the Python log only).
    """
    from panoramia_fl.audit.panoramia.settings import (
        resolve_device,  # heavy: only in processes that audit
    )

    settings = settings or AuditConfig()
    empty = members.x[:0]
    empty_y = None if members.y is None else members.y[:0]
    data = SiteData(
        site_id=site_id,
        train_x=members.x,
        train_y=members.y,
        holdout_x=empty if holdout is None else holdout.x,
        holdout_y=empty_y if holdout is None else holdout.y,
        test_x=empty,
        test_y=empty_y,
        train_groups=members.groups,
        holdout_groups=None if holdout is None else holdout.groups,
    )
    return SiteRuntime(
        site_id=site_id,
        task=task,
        data=data,
        device=resolve_device(settings.device),
        torch_threads=torch_threads,
        dp=None,
        accountant_history_path=None,
        audit_runner=make_audit_runner(
            SiteAuditPolicy(settings=settings, use_holdout=holdout is not None)
        ),
        policy=policy if policy is not None else SitePolicy.from_node_config(context.node_config),
        return_scores=settings.return_scores,
        refusal_log=None if state_dir is None else state_dir / site_refusals_name(site_id),
    )


def add_site_audits(app: ClientApp, resolve: Callable[[Context], SiteRuntime]) -> ClientApp:
    """Add the audit queries (``query.whoami``, ``query.audit``) to your ClientApp;
    ``resolve(context)`` gives the site's :func:`site_runtime`. Returns ``app``."""
    return add_site_queries(app, resolve)


def audit_sites(
    grid: Grid,
    arrays: ArrayRecord | StateDict,
    run_dir: Path,
    *,
    num_sites: int,
    settings: AuditConfig | None = None,
    model_round: int = 1,
    seed: int = 0,
    name: str | None = None,
    dp_level: DPLevel = "none",
    node_wait_s: float = 300.0,
    timeout_s: float = 24 * 3600.0,
    progress: bool = False,
) -> ReportFiles:
    """Send the final weights to every node, write each site's audit file as its reply
    arrives (a failed or refused audit is that site's file, the others go on), then the
    report (its files' paths are returned).

    ``settings`` are the sites' audit settings, recorded in ``config.yaml`` for the report
    (each site audits with its own). ``model_round`` is the round that produced the
    weights; ``dp_level`` the DP your training used (``none``, ``record``, ``client``,
    ``both``), which the ledger states beside each site's audit. A site whose audit file
    for ``model_round`` is already there is not asked again.
    """
    layout = RunLayout(run_dir)
    layout.root.mkdir(parents=True, exist_ok=True)
    state = arrays.to_torch_state_dict() if isinstance(arrays, ArrayRecord) else arrays
    nodes = wait_for_nodes(grid, num_sites, node_wait_s)
    site_of_node = site_map(grid, nodes, timeout_s)
    _write_run_files(layout, settings or AuditConfig(), num_sites, seed, name, dp_level)
    fanout = AuditFanout(layout=layout, seed=seed, timeout_s=timeout_s, progress=progress)
    run_audits(grid, fanout, site_of_node, state, model_round)
    return write_report(layout, report_config(layout))


def _write_run_files(
    layout: RunLayout,
    settings: AuditConfig,
    num_sites: int,
    seed: int,
    name: str | None,
    dp_level: DPLevel,
) -> None:
    """``config.yaml`` and ``partition.json`` as the report reads them: what the run was
    (its DP level and audit settings) and which sites it has (their sizes come with their
    audits)."""
    config: dict[str, Any] = {
        "name": name or layout.root.name,
        "seed": seed,
        "app": "own Flower app (deployment.site_audits)",
        "dp": {"level": dp_level},
        "audit": {"settings": settings.model_dump(mode="json")},
    }
    atomic_write_text(layout.config, yaml.safe_dump(config, sort_keys=False))
    sites = [{"site_id": site} for site in range(num_sites)]
    atomic_write_text(layout.partition, json.dumps({"scheme": "own app", "sites": sites}) + "\n")
