"""The sites' checks on received models (``fl.model_checks``), from a run's config.

Simulation default: ``record`` when the run has a dishonest server (``fl.adversary``), so
that one run measures what an attack rebuilds and whether the sites' checks see it; ``off``
otherwise. In a simulation the server is the harness's own code, which plays fair unless
``fl.adversary`` says otherwise, so checking honest rounds would only cost time (one announce
message a site a round), and an honest model passes every check: the default run's numbers
are the same either way. A deployment checks by default (:mod:`clients.site_policy`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from panoramia_fl.audit.received_model.plausibility import AgreedTraining, ClientClipping
from panoramia_fl.clients.model_checks import ModelCheckSettings
from panoramia_fl.clients.site_policy import SitePolicy
from panoramia_fl.contracts.run_files import RunLayout, model_checks_name
from panoramia_fl.server.sampling import sites_per_round
from panoramia_fl.simulations.experiment_config import ExperimentConfig, ModelChecksMode


def checks_mode(config: ExperimentConfig) -> ModelChecksMode:
    """``fl.model_checks`` with its default resolved (the module's docstring says why)."""
    if config.fl.model_checks is not None:
        return config.fl.model_checks
    return "record" if config.fl.adversary else "off"


def most_local_steps(config: ExperimentConfig, layout: RunLayout) -> int | None:
    """The most local steps any site takes in a round: ``fl.local_steps``, else the local
    epochs times the batches of the largest site (``partition.json``, its input canaries and
    DP's declared size included); None when the sizes are not known."""
    fl = config.fl
    if fl.local_steps is not None:
        return fl.local_steps
    if not layout.partition.exists():
        return None
    sizes = [s.get("train") for s in json.loads(layout.partition.read_text())["sites"]]
    if not sizes or any(not isinstance(n, int) for n in sizes):
        return None
    largest = max(max(sizes) + config.audit.input_canaries, config.dp.declared_size or 0)
    return fl.local_epochs * math.ceil(largest / fl.batch_size)


def agreed_training(config: ExperimentConfig, steps: int | None) -> AgreedTraining | None:
    """What bounds a round's move (plausibility); None when nothing does: unknown steps,
    FedAdam's server step, or adaptive client clipping."""
    dp, fl = config.dp, config.fl
    if steps is None or fl.strategy not in ("fedavg", "fedprox"):
        return None
    clipping = None
    if dp.client_level:
        if dp.client.clipping != "fixed" or dp.client.noise_multiplier is None:
            return None
        clipping = ClientClipping(
            clipping_norm=dp.client.clipping_norm,
            noise_multiplier=dp.client.noise_multiplier,
            sites=sites_per_round(config.partition.num_sites, fl.fraction_train),
        )
    return AgreedTraining(
        optimizer=fl.optimizer,
        learning_rate=fl.learning_rate,
        local_steps=steps,
        weight_decay=fl.weight_decay,
        client_clipping=clipping,
    )


def model_check_settings(
    config: ExperimentConfig, layout: RunLayout, site_id: int, state_dir: Path
) -> ModelCheckSettings | None:
    """A simulated site's checks (None: ``off``); the bulletin is the run's ``bulletin/``."""
    mode = checks_mode(config)
    if mode == "off":
        return None
    return ModelCheckSettings(
        batch_size=config.fl.batch_size,
        agreed=agreed_training(config, most_local_steps(config, layout)),
        bulletin=layout.bulletin,
        min_sites=sites_per_round(config.partition.num_sites, config.fl.fraction_train),
        refuse=mode == "refuse",
        log=state_dir / model_checks_name(site_id),
    )


def deployed_model_check_settings(
    config: ExperimentConfig, policy: SitePolicy, site_id: int, state_dir: Path
) -> ModelCheckSettings | None:
    """A real site's checks, by its own policy (on unless ``policy-model-checks=false``):
    it refuses a flagged model; consistency with its ``policy-bulletin``; plausibility when
    the steps per round are agreed (``fl.local_steps``: the other sites' sizes are not
    known here)."""
    if not policy.model_checks:
        return None
    return ModelCheckSettings(
        batch_size=config.fl.batch_size,
        agreed=agreed_training(config, config.fl.local_steps),
        bulletin=policy.bulletin,
        min_sites=sites_per_round(config.partition.num_sites, config.fl.fraction_train),
        refuse=True,
        log=state_dir / model_checks_name(site_id),
    )
