"""A site's own policy: what it accepts and what may leave it, whatever the run config says.

On the Deployment Engine the run config is the operator's; the policy is in each SuperNode's
``--node-config``, which only the site sets, so no run can override it. Keys (all optional):

``policy-max-epsilon`` (number)
    The least DP the site trains under: record-level DP-SGD at the site (the only DP that
    holds against the server, which sees each update before any client-level noise) with a
    record-level epsilon of at most this. A run without record-level DP, or one whose
    target (or accounted) epsilon is above it, is refused. Default: none (any run).
``policy-allow-scores`` (bool, default false)
    Whether per-record game scores (``audit.settings.return_scores``) may leave the site.
``policy-allow-tracebacks`` (bool, default false)
    Whether an error reply may carry traceback frames (the site's file paths and code).
``policy-model-checks`` (bool, default true)
    Whether the site checks each model it receives before training and refuses a flagged
    one (:mod:`clients.model_checks`, ``docs/model_checks.md``).
``policy-bulletin`` (path)
    The bulletin folder the consortium's sites share (and the server cannot rewrite), for
    the consistency check; default: none (that check is not run).

A refusal is a :class:`SiteRefusal` naming the policy key and what the run asked for; the
ClientApp sends it back as Flower's error reply (:data:`contracts.wire.SITE_REFUSED_CODE`)
and appends it to the site's own refusal log (:func:`log_refusal`). In simulation every
site is the operator's own process: :meth:`SitePolicy.simulated` allows everything.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.files import PRIVATE_FILE_MODE, private_dir

MAX_EPSILON_KEY = "policy-max-epsilon"
ALLOW_SCORES_KEY = "policy-allow-scores"
ALLOW_TRACEBACKS_KEY = "policy-allow-tracebacks"
MODEL_CHECKS_KEY = "policy-model-checks"
BULLETIN_KEY = "policy-bulletin"
POLICY_KEYS = (
    MAX_EPSILON_KEY,
    ALLOW_SCORES_KEY,
    ALLOW_TRACEBACKS_KEY,
    MODEL_CHECKS_KEY,
    BULLETIN_KEY,
)


class SitePolicyError(UserError, ValueError):
    """A policy key in the node config has a value that is not what it must be."""


class SiteRefusal(Exception):
    """A run asks a site for more than its policy allows (the message names the key)."""

    def __init__(self, key: str, asked: str, why: str) -> None:
        super().__init__(f"site policy {key} refuses {asked}: {why}")
        self.key, self.asked, self.why = key, asked, why


def _bool(node_config: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = node_config.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SitePolicyError(f"node config: {key}={value!r} must be true or false")


def _max_epsilon(node_config: Mapping[str, Any]) -> float | None:
    value = node_config.get(MAX_EPSILON_KEY)
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number > 0:
        raise SitePolicyError(f"node config: {MAX_EPSILON_KEY}={value!r} must be a number > 0")
    return number


@dataclass(frozen=True)
class SitePolicy:
    """What a site accepts (see the module's keys)."""

    max_epsilon: float | None = None
    allow_scores: bool = False
    allow_tracebacks: bool = False
    model_checks: bool = True
    """Check each received model before training (simulation: ``fl.model_checks`` decides)."""
    bulletin: Path | None = None
    """The consortium's bulletin folder (consistency check); None: not checked."""

    @classmethod
    def simulated(cls) -> SitePolicy:
        """Simulation: the operator runs every site, so nothing is the site's to refuse (the
        run's ``fl.model_checks`` says whether the sites check the models they get)."""
        return cls(max_epsilon=None, allow_scores=True, allow_tracebacks=True, model_checks=False)

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> SitePolicy:
        """The policy in a SuperNode's node config; absent keys take the strict defaults."""
        return cls(
            max_epsilon=_max_epsilon(node_config),
            allow_scores=_bool(node_config, ALLOW_SCORES_KEY),
            allow_tracebacks=_bool(node_config, ALLOW_TRACEBACKS_KEY),
            model_checks=_bool(node_config, MODEL_CHECKS_KEY, default=True),
            bulletin=Path(str(node_config[BULLETIN_KEY])).expanduser()
            if node_config.get(BULLETIN_KEY)
            else None,
        )

    def check_training(self, *, record_dp: bool, target_epsilon: float | None) -> None:
        """Refuse to train without record-level DP, or towards a larger target epsilon."""
        if self.max_epsilon is None:
            return
        key = f"{MAX_EPSILON_KEY}={self.max_epsilon:g}"
        if not record_dp:
            raise SiteRefusal(
                key, "training without record-level DP", "the site trains only under DP-SGD"
            )
        if target_epsilon is not None and target_epsilon > self.max_epsilon:
            raise SiteRefusal(
                key,
                f"dp.target_epsilon={target_epsilon:g}",
                f"the site accepts at most epsilon {self.max_epsilon:g}",
            )

    def check_release(self, epsilon: float | None) -> None:
        """Refuse to send an update whose accounted epsilon is above the maximum (a run
        that sets a noise multiplier instead of a target)."""
        if self.max_epsilon is not None and epsilon is not None and epsilon > self.max_epsilon:
            raise SiteRefusal(
                f"{MAX_EPSILON_KEY}={self.max_epsilon:g}",
                f"an update at record-level epsilon {epsilon:.3f}",
                "the update is not sent (and its steps are not counted)",
            )

    def check_audit(self, *, return_scores: bool) -> None:
        """Refuse an audit whose reply would carry per-record scores."""
        if return_scores and not self.allow_scores:
            raise SiteRefusal(
                f"{ALLOW_SCORES_KEY}=false",
                "audit.settings.return_scores=true",
                "per-record scores do not leave the site",
            )


def log_refusal(path: Path, site_id: int, refusal: SiteRefusal, *, run_id: int) -> None:
    """Append the refusal to the site's own log (JSON lines, owner-only, fsynced)."""
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_id": run_id,
        "site_id": site_id,
        "policy_key": refusal.key,
        "refused": refusal.asked,
        "why": refusal.why,
    }
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
