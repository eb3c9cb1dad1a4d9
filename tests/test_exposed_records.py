"""A site's most exposed members: ranked by offline LiRA, kept in a site-local file that is
linked from its page and never sent, and the config key and policy that turn it on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from builders import run_files

from panoramia_fl.audit.panoramia.calibration import (
    calibrated_statistics,
    log_likelihood,
    reference_statistics,
)
from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.exposure import SCORE_MEANINGS, most_exposed
from panoramia_fl.clients.audit_handler import SiteAuditPolicy, write_exposed_records
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.run_files import exposed_records_name
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config


class _LinearTask:
    """The bits of an AuditTask that scoring needs: loss features ``[loss, logits]``."""

    modality = "tabular"
    num_classes = 3

    def loss_features(self, model, x, y, *, device):
        with torch.no_grad():
            logits = model(torch.as_tensor(x, dtype=torch.float32))
            loss = F.cross_entropy(logits, torch.as_tensor(y), reduction="none")
        return torch.column_stack([loss, logits]).numpy()


def _linear(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def _members() -> Records:
    rng = np.random.default_rng(0)
    return Records(rng.normal(size=(40, 4)).astype(np.float32), rng.integers(0, 3, size=40))


def test_most_exposed_ranks_by_offline_lira() -> None:
    task, members = _LinearTask(), _members()
    target, refs = _linear(0), [_linear(1), _linear(2)]
    cpu = torch.device("cpu")
    got = most_exposed(task, target, members, refs, k=5, device=cpu)
    f = task.loss_features(target, members.x, members.y, device=cpu)
    lira = calibrated_statistics(
        f, members.y, reference_statistics(task, refs, members, device=cpu)
    )[:, 0]
    want = np.argsort(-lira, kind="stable")[:5]
    assert got.score == "lira_offline" and got.reference_models == 2
    assert got.indices == [int(i) for i in want] and got.n_members == 40
    assert got.scores == pytest.approx([float(lira[i]) for i in want])
    assert got.scores == sorted(got.scores, reverse=True)

    plain = most_exposed(task, target, members, None, k=100, device=cpu)
    ll = log_likelihood(f, members.y)
    assert plain.score == "log_likelihood" and len(plain.indices) == 40
    assert plain.indices == [int(i) for i in np.argsort(-ll, kind="stable")]
    assert plain.to_dict()["score_meaning"] == SCORE_MEANINGS["log_likelihood"]
    with pytest.raises(ValueError, match="k must be"):
        most_exposed(task, target, members, refs, k=0, device=cpu)


def test_exposed_records_file_is_site_local(tmp_path: Path) -> None:
    members = _members()
    data = SiteData(
        site_id=3,
        train_x=members.x,
        train_y=members.y,
        holdout_x=members.x[:0],
        holdout_y=members.y[:0],
        test_x=members.x[:0],
        test_y=members.y[:0],
    )
    path = run_files(tmp_path).site_state / exposed_records_name(3)
    write_exposed_records(
        path, _LinearTask(), _linear(0), data, [_linear(1)], k=4, device_name="cpu"
    )
    content = json.loads(path.read_text())
    assert content["site_id"] == 3 and content["score"] == "lira_offline"
    assert len(content["indices"]) == len(content["scores"]) == 4
    assert content["stays_at_site"] is True and "never sent" in content["note"]
    assert not list(path.parent.glob("*.tmp"))


def test_exposed_records_config_and_policy() -> None:
    assert validate_config({}).audit.exposed_records == 0
    assert validate_config({"audit": {"exposed_records": 5}}).audit.exposed_records == 5
    with pytest.raises(ConfigError, match="audit.exposed_records"):
        validate_config({"audit": {"exposed_records": -1}})
    from panoramia_fl.audit.config import AuditConfig

    with pytest.raises(ValueError, match="exposed_records_path"):
        SiteAuditPolicy(settings=AuditConfig(), exposed_records=3)
