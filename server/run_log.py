"""The run directory's per-round log (``metrics.jsonl``) and per-site audit files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
AUDIT_DIR = "audits"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def append_round(run_dir: Path, entry: dict[str, Any]) -> None:
    with open(run_dir / METRICS_FILE, "a") as fh:
        fh.write(json.dumps(_clean(entry)) + "\n")


def read_rounds(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_rounds(run_dir: Path, last_round: int) -> None:
    """Drop log lines past the last checkpointed round (they will be redone), and a line
    torn by a kill while it was written."""
    path = run_dir / METRICS_FILE
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
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    tmp.replace(path)


def audit_path(run_dir: Path, site_id: int) -> Path:
    return run_dir / AUDIT_DIR / f"site-{site_id}.json"


def write_site_audit(run_dir: Path, site_id: int, payload: dict[str, Any]) -> Path:
    path = audit_path(run_dir, site_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_clean(payload), indent=1))
    tmp.replace(path)
    return path


def read_site_audit(run_dir: Path, site_id: int) -> dict[str, Any] | None:
    path = audit_path(run_dir, site_id)
    return json.loads(path.read_text()) if path.exists() else None


def sites_needing_audit(
    run_dir: Path, site_ids: list[int], model_round: int | None = None
) -> list[int]:
    """Sites with no audit file, whose audit failed, or (given ``model_round``) whose audit
    is of another final model: a resumed run that trained more rounds audits again. Files
    that do not say which round they audited count as current."""
    todo = []
    for site in site_ids:
        done = read_site_audit(run_dir, site) or {}
        stale = model_round is not None and done.get("model_round", model_round) != model_round
        if done.get("status") != "ok" or stale:
            todo.append(site)
    return todo
