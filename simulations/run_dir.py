"""Preparing a run directory: resolved config, partition, and each site's data file."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write, atomic_write_text, check_writable
from panoramia_fl.contracts.json_values import from_dict
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import read_json
from panoramia_fl.ml.canary_records import draw_input_canaries
from panoramia_fl.ml.datasets import DataError, Dataset, load_dataset
from panoramia_fl.ml.partition import SiteSplit, partition, partition_summary
from panoramia_fl.simulations.config_file import (
    check_config_digest,
    dump_config,
    load_run_config,
    write_run_config,
)
from panoramia_fl.simulations.experiment_config import ConfigError, ExperimentConfig, load_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetMeta:
    """What the apps need to know about the data without loading it (``dataset.json``; in
    deployment the ``dataset-meta`` run config, so every site gets it)."""

    name: str
    modality: str
    num_classes: int
    input_shape: tuple[int, ...]
    schema: dict[str, Any] | None = None
    """Tabular: the encoding of the records (``Dataset.info["schema"]``), which the audit's
    generator reads from the task instead of inferring it from a site's records."""

    @classmethod
    def of(cls, dataset: Dataset) -> DatasetMeta:
        return cls(
            name=dataset.name,
            modality=dataset.modality,
            num_classes=dataset.num_classes,
            input_shape=tuple(dataset.input_shape),
            schema=dataset.info.get("schema"),
        )

    @classmethod
    def read(cls, layout: RunLayout) -> DatasetMeta:
        path = layout.dataset
        data = read_json(path)
        try:
            return from_dict(cls, data)
        except ValueError as exc:
            raise RunFileError(f"{path}: not a dataset description ({exc})") from None

    def write(self, layout: RunLayout) -> None:
        atomic_write_text(layout.dataset, json.dumps(asdict(self)))


@contextmanager
def hold_run_dir(layout: RunLayout) -> Iterator[None]:
    """The run directory is this process's alone until the block ends: an OS lock on its
    open ``run.lock``, which the OS drops when the process ends however it ends (Ctrl-C,
    ``kill -9``, a crash), so nothing is left to clean up. A second run on the directory
    meanwhile is a :class:`RunFileError` naming it and the holder; so is a directory that
    cannot be written (checked before it is made)."""
    check_writable(layout.root)
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunFileError(f"cannot write in {layout.root}: {err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "a process"
            raise RunFileError(
                f"{layout.root} is in use by another panoramia-fl run ({holder}); wait for it "
                "to end, or give another --out"
            ) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def site_data(dataset: Dataset, split: SiteSplit) -> SiteData:
    """One site's records cut out of the dataset's pool."""

    def take(idx: np.ndarray, arr: np.ndarray | None) -> np.ndarray | None:
        return None if arr is None else arr[idx]

    return SiteData(
        site_id=split.site_id,
        train_x=dataset.x[split.train],
        train_y=take(split.train, dataset.y),
        holdout_x=dataset.x[split.holdout],
        holdout_y=take(split.holdout, dataset.y),
        test_x=dataset.x[split.test],
        test_y=take(split.test, dataset.y),
        train_groups=take(split.train, dataset.groups),
        holdout_groups=take(split.holdout, dataset.groups),
        test_groups=take(split.test, dataset.groups),
    )


def _data_keys(config: ExperimentConfig) -> tuple:
    """What the partition and the site files are made from."""
    return (config.seed, config.data, config.partition, config.audit.input_canaries)


def _prepared(config: ExperimentConfig, layout: RunLayout) -> bool:
    """Whether ``layout`` already holds this config's partition and site files.

    ``dataset.json`` is written last, so a preparation cut short reads as not prepared.
    """
    if not layout.dataset.exists() or not layout.config.exists():
        return False
    try:
        stored = load_config(layout.config)
    except ConfigError:
        return False
    sites = range(config.partition.num_sites)
    return _data_keys(stored) == _data_keys(config) and all(
        layout.site_file(s).exists() for s in sites
    )


def adopt_config(config: ExperimentConfig, layout: RunLayout) -> None:
    """Check ``config`` against the one ``layout`` holds, field by field, before anything
    runs in it (:func:`simulations.resume.check_same_run`: a mismatch is refused, naming the
    keys; so is a ``config.yaml`` edited by hand,
    :func:`~simulations.config_file.check_config_digest`). A changed ``audit.*`` sets the audits
    on disk aside (``audits-superseded-<k>``), so every site audits again under the new
    settings. Then ``config.yaml`` is the new one.
    A directory without ``config.yaml`` is left as it is (its caller writes one once the
    set-up succeeded, so a config whose data cannot be loaded or partitioned leaves
    nothing behind).
    """
    from panoramia_fl.simulations.resume import audit_changed, check_same_run

    if not layout.config.exists():
        return
    check_config_digest(layout.config)
    try:
        stored = load_run_config(layout.config)
    except ConfigError as err:
        raise ConfigError(
            f"{layout.config}: cannot be read, so the run in {layout.root} cannot be "
            f"compared with the new config: {err}"
        ) from None
    check_same_run(stored, config, layout)
    if audit_changed(stored, config) and layout.audits.exists():
        moved = layout.superseded_audits()
        layout.audits.rename(moved)
        log.warning("audit.* changed: the audits of the old settings moved to %s", moved)
    write_run_config(layout, dump_config(config))


def prepare_run_dir(
    config: ExperimentConfig,
    layout: RunLayout,
    *,
    check: Callable[[DatasetMeta], None] | None = None,
    read_dataset: Callable[[], Dataset] | None = None,
) -> DatasetMeta:
    """Write config, partition summary and site files; idempotent for the same config.

    ``check(meta)`` runs once the data is known and before anything is written for it (a
    model that cannot be built leaves a new directory as it was). ``read_dataset()`` gives
    the config's dataset as :func:`load_run_dataset` reads it (the run's start reads it ahead:
    :func:`~simulations.ray_start.ray_started_ahead`); None: read here.

    A run directory that already holds a run must hold one this config may continue
    (:func:`adopt_config`). A run directory already prepared from the same data keys (seed,
    data, partition, canaries) keeps its partition and site files. With
    ``audit.input_canaries`` > 0 each site file also holds the site's canaries and coins
    (:func:`ml.canary_records.draw_input_canaries`).
    """
    layout.root.mkdir(parents=True, exist_ok=True)
    _refuse_folders_at_files(layout)
    adopt_config(config, layout)
    text = dump_config(config)
    if _prepared(config, layout):
        meta = DatasetMeta.read(layout)
        if check is not None:
            check(meta)
        return meta
    # The data first: a config whose data cannot be loaded leaves the directory as it was.
    dataset = load_run_dataset(config) if read_dataset is None else read_dataset()
    meta = DatasetMeta.of(dataset)
    if check is not None:
        check(meta)
    layout.dataset.unlink(missing_ok=True)
    seed = config.partition.seed_for(config.seed)
    sites = partition(dataset, config.partition, seed=seed)
    summary = partition_summary(dataset, sites, scheme=config.partition.scheme, seed=seed)
    _write_site_files(config, layout, dataset, sites)
    _write_public(layout, dataset)
    # The config only once the set-up succeeded: a partition that fails (too few records
    # for the sites) leaves nothing that would refuse the corrected command as another run.
    atomic_write_text(layout.partition, json.dumps(summary, indent=1))
    write_run_config(layout, text)
    meta.write(layout)
    return meta


def _refuse_folders_at_files(layout: RunLayout) -> None:
    """A folder where the run writes a file is an error naming it (before anything runs)."""
    written = (layout.config, layout.partition, layout.dataset, layout.metrics, layout.noise)
    for path in (*written, layout.final_model, layout.client_dp_accounting, layout.client_canaries):
        if path.is_dir():
            raise RunFileError(f"{path} is a directory where the run writes a file: move it away")


def load_run_dataset(config: ExperimentConfig) -> Dataset:
    """The config's dataset, refused when the audit draws reference pools from a public
    split it lacks."""
    dataset = load_dataset(config.data.name, root=config.data.root, options=config.data.options)
    if config.audit.enabled and config.audit.reference_pool and dataset.public_x is None:
        raise DataError(
            f"audit.reference_pool: dataset {config.data.name!r} has no public split "
            "(Dataset.public_x), which the sites' reference pools are drawn from"
        )
    return dataset


def _write_site_files(
    config: ExperimentConfig, layout: RunLayout, dataset: Dataset, sites: list[SiteSplit]
) -> None:
    """Each site's data file, with its canaries and coins when ``audit.input_canaries`` > 0."""
    for split in sites:
        data = site_data(dataset, split)
        if config.audit.input_canaries > 0:
            # Coins from (seed, site) only: the same whatever the partition or audit settings.
            input_canaries = draw_input_canaries(
                dataset, config.audit.input_canaries, seed=config.seed, site_id=split.site_id
            )
            data = data.with_input_canaries(
                input_canaries.x,
                input_canaries.y,
                input_canaries.included,
                kind=input_canaries.kind,
            )
        data.save(layout.site_file(split.site_id))


def _write_public(layout: RunLayout, dataset: Dataset) -> None:
    """The public split (``sites/public.npz``), when the dataset has one."""
    if dataset.public_x is None:
        return
    optional = {"y": dataset.public_y, "groups": dataset.public_groups}
    # Any, not ndarray: mypy would match ndarray values against savez's `allow_pickle: bool`.
    arrays: dict[str, Any] = {"x": dataset.public_x}
    arrays.update((key, value) for key, value in optional.items() if value is not None)
    atomic_write(layout.public, lambda fh: np.savez(fh, **arrays), private=True)


def read_public(path: Path) -> Records:
    """A public-records file (``x``, optional ``y`` and ``groups``)."""
    with np.load(path, allow_pickle=False) as f:
        if "x" not in f.files:
            raise ValueError(f"{path}: no 'x' array (the public records)")
        return Records(f["x"], *(f[k] if k in f.files else None for k in ("y", "groups")))


def load_public(layout: RunLayout) -> Records | None:
    """The run's public records, or ``None`` when the dataset has none."""
    path = layout.public
    return read_public(path) if path.exists() else None
