"""What the server writes into the run directory: its per-round log (``metrics.jsonl``,
:class:`contracts.run_log.RoundRecord`)
and per-site audit files (:class:`contracts.site_audit.SiteAuditFile` of
:class:`audit.site_results.SiteResults`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import RoundRecord
from panoramia_fl.contracts.site_audit import SiteAuditFile


def append_round(layout: RunLayout, record: RoundRecord) -> None:
    with open(layout.metrics, "a") as fh:
        fh.write(json.dumps(record.to_dict()) + "\n")


def truncate_rounds(layout: RunLayout, last_round: int) -> None:
    """Drop log lines past the last checkpointed round (they will be redone), and a line
    torn by a kill while it was written."""
    path = layout.metrics
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if int(entry["round"]) <= last_round:
            kept.append(entry)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))


def write_site_audit(layout: RunLayout, audit: SiteAuditFile[Any]) -> Path:
    """Write ``audits/site-<id>.json`` atomically (non-finite numbers as null)."""
    path = layout.audit(audit.site_id)
    return atomic_write_text(path, json.dumps(json_safe(audit), indent=1))


def read_site_audit(layout: RunLayout, site_id: int) -> SiteAuditFile[SiteResults] | None:
    """The site's audit file; None when there is none or it cannot be read as one."""
    path = layout.audit(site_id)
    if not path.exists():
        return None
    try:
        return from_dict(SiteAuditFile[SiteResults], json.loads(path.read_text()))
    except ValueError:  # JSONDecodeError included: audited again
        return None


def sites_needing_audit(
    layout: RunLayout, site_ids: list[int], model_round: int | None = None
) -> list[int]:
    """Sites with no audit file, whose audit failed, or (given ``model_round``) whose audit
    is of another final model: a resumed run that trained more rounds audits again. Files
    that do not say which round they audited count as current."""
    todo = []
    for site in site_ids:
        done = read_site_audit(layout, site)
        stale = done is not None and done.model_round not in (None, model_round)
        if done is None or not done.ok or (model_round is not None and stale):
            todo.append(site)
    return todo
