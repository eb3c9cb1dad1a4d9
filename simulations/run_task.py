"""The run's model task and device, built from its config (one place for the apps, the
reference models and the standalone audit)."""

from __future__ import annotations

import numpy as np
import torch

from panoramia_fl.audit.inversion.inversion_config import MODALITIES
from panoramia_fl.contracts.plugins import import_plugins
from panoramia_fl.ml.models import check_private
from panoramia_fl.ml.tasks import TorchTask, build_task
from panoramia_fl.ml.tasks.base import OptimizerSpec
from panoramia_fl.simulations.experiment_config import ConfigError, ExperimentConfig
from panoramia_fl.simulations.run_dir import DatasetMeta


def pick_device(resources_gpus: float | str) -> torch.device:
    """The GPU when the process holds a share of one (``resources_gpus`` not 0) and CUDA is
    visible, else the CPU. Ray leaves the GPUs visible to a process that asked for none
    (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``), so a share of 0 must say CPU here."""
    if resources_gpus == 0 or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def audit_device(config: ExperimentConfig) -> torch.device:
    """Where a site's audits run (PANORAMIA, canaries, inversion): ``audit.settings.device``
    when it names one, else :func:`pick_device` of ``resources.audit_num_gpus``."""
    chosen = config.audit.settings.device
    if chosen != "auto":
        return torch.device(chosen)
    return pick_device(config.resources.audit_num_gpus)


def make_task(config: ExperimentConfig, meta: DatasetMeta) -> TorchTask:
    """The run's task; a tabular one carries the dataset's schema, so every audit of the
    run (site, standalone, reference models) reads the encoding instead of inferring it.

    The run's plugins are imported first: this is where a Ray worker or a ClientApp
    process (which holds an unpickled config, never validated there) first needs them.
    """
    import_plugins(config.plugins)
    encoding = {} if meta.schema is None else {"schema": meta.schema}
    return build_task(
        meta.modality,
        model_name=config.model.name,
        num_classes=meta.num_classes,
        input_shape=meta.input_shape,
        # Any DP level: no BatchNorm (per-sample gradients; no noised running statistics).
        dp=config.dp.any_level,
        batch_size=config.fl.batch_size,
        optimizer=OptimizerSpec(
            name=config.fl.optimizer,
            learning_rate=config.fl.learning_rate,
            weight_decay=config.fl.weight_decay,
        ),
        model_options=dict(config.model.options),
        **encoding,
    )


def check_run_task(config: ExperimentConfig, meta: DatasetMeta) -> None:
    """Before any site starts: the strategy is registered, the model builds from its
    options and, with record-level DP, Opacus can train it (each error names its key)."""
    from panoramia_fl.server.strategy import STRATEGIES

    STRATEGIES.get(config.fl.strategy)
    if config.audit.inversion is not None and meta.modality not in MODALITIES:
        raise ConfigError(
            f"audit.inversion: {meta.modality} records are not supported "
            f"({', '.join(MODALITIES)}); set it to null"
        )
    inferred = config.audit.attribute_inference
    if inferred is not None and (meta.schema is not None or meta.modality != "tabular"):
        # Without a schema the fields are read from a site's records, at its audit.
        from panoramia_fl.audit.tabular.attribute_attack import sensitive_attribute

        rows = np.zeros((1, int(np.prod(meta.input_shape))), dtype=np.float32)
        sensitive_attribute(inferred.field, meta.schema, rows, modality=meta.modality)
    model = make_task(config, meta).make_model()
    if config.dp.record_level:
        check_private(model, config.model.name)
