"""The server's run logs, each one typed record that the writer (``server``) and the reader
(``reporting``) share: a line of ``metrics.jsonl`` (:class:`RoundRecord`) and the client-level
DP ledger ``client_dp.json`` (:class:`ClientDPFile`).

:func:`read_record` and :func:`read_rounds` read them through the one checked decoder
(:func:`contracts.json_values.from_dict`). Their ``to_dict`` leaves out top-level keys that
are None or empty (a round without central evaluation or failures); a site's numbers are
always all there (null when unknown).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.model_flags import ModelFlag
from panoramia_fl.contracts.run_files import RunLayout

R = TypeVar("R")


@dataclass(frozen=True)
class SiteRound:
    """One site's numbers in one round."""

    train_loss: float | None = None
    """None under record-level DP: the site does not send it."""
    dp_epsilon: float | None = None
    """Record-level accountant epsilon so far (DP-SGD at the site)."""
    num_examples: int | None = None
    """None under record-level DP: the site does not send it."""
    dp_epsilon_client: float | None = None
    """Site-level epsilon of client-level DP so far."""
    sent: list[str] | None = None
    """Every key the site's train reply carried, as the server received it
    (``contracts.wire.message_keys``; what covers each: ``contracts.reply_keys.REPLY_KEYS``); None
    in files written before it was kept."""


@dataclass(frozen=True)
class RoundRecord:
    """One line of ``metrics.jsonl``: a round's global evaluation (on the public split, when
    the run has one) and each trained site's numbers."""

    round: int
    global_loss: float | None = None
    global_accuracy: float | None = None
    global_perplexity: float | None = None
    """Text tasks only."""
    elapsed_s: float | None = None
    sites: dict[str, SiteRound] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    """site id -> why its update was lost this round."""
    flagged: dict[str, ModelFlag] = field(default_factory=dict)
    """site id -> its checks' verdict on the round's model, which it refused (trained
    nothing, sent nothing; ``contracts.model_flags``); those sites are in ``failures`` too."""

    def to_dict(self) -> dict[str, Any]:
        return _compact(json_safe(self))

    @property
    def empty(self) -> bool:
        """No site's update was aggregated: the global model was carried over unchanged."""
        return not self.sites


def empty_rounds(rounds: list[RoundRecord]) -> list[int]:
    """The rounds in which no site's update was aggregated."""
    return [r.round for r in rounds if r.empty]


def untrained_reason(rounds: list[RoundRecord]) -> str | None:
    """One line saying that no round aggregated any update (the global model is the
    initial one), with the first lost update's reason; None when some round trained (or
    there are no rounds yet)."""
    if not rounds or not all(r.empty for r in rounds):
        return None
    first = next(((r.round, s, why) for r in rounds for s, why in r.failures.items()), None)
    why = (
        "no site replied"
        if first is None
        else f"e.g. round {first[0]}, site {first[1]}: {first[2].splitlines()[0][:200]}"
    )
    n = len(rounds)
    where = "in the run's one round" if n == 1 else f"in any of the {n} rounds"
    return (
        f"no site's update was aggregated {where} ({why}): the global model is the initial, "
        "untrained one"
    )


@dataclass(frozen=True)
class ClientDPSite:
    rounds: list[int] = field(default_factory=list)
    """The global rounds the site's update was aggregated in."""
    epsilon: float | None = None
    """Site level: add or remove the whole site."""
    epsilon_record: float | None = None
    """The record-level epsilon it implies (one record moves the clipped update by at most
    twice the clipping norm)."""
    epsilon_server: float | None = None
    """Site level against the server itself; None when the server sees each update before
    the noise (central client-level DP)."""
    epsilon_record_server: float | None = None
    """The record level of ``epsilon_server``."""


@dataclass(frozen=True)
class ShortRound:
    """A round that averaged fewer updates than it sampled (its noise was sized for all)."""

    sampled: int
    aggregated: int
    noise_multiplier: float


@dataclass(frozen=True)
class ClientDPFile:
    """``client_dp.json``: which rounds each site's update took part in under client-level
    DP, and its epsilons (written by ``server.client_dp`` each round)."""

    schema_version: int | None = None
    accountant: str | None = None
    noise_multiplier: float | None = None
    clipping: str | None = None
    clipping_side: str | None = None
    clipping_norm: float | None = None
    target_clipped_quantile: float | None = None
    clip_norm_lr: float | None = None
    clipped_count_stddev: float | None = None
    """The last three: adaptive clipping's settings."""
    mechanism: str = "central"
    """``central`` (the server's wrappers; every file before schema 2) or ``distributed``
    (each site adds its share of the noise)."""
    secure_aggregation: str = "none"
    """``ideal``: the server received only each round's sum."""
    delta: float | None = None
    population_size: int | None = None
    sites_per_round: int | None = None
    sampling: str | None = None
    neighboring_relation: str | None = None
    rounds_done: int | None = None
    short_rounds: dict[str, ShortRound] = field(default_factory=dict)
    noise: str | None = None
    """How the noise was drawn (``contracts.run_files.NOISE_NOTES``)."""
    sites: dict[str, ClientDPSite] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _compact(json_safe(self))


@dataclass(frozen=True)
class PlatformInfo:
    """``platform.json``: the machine and build that trained a run. Floating-point results
    differ between CPUs and builds, so the same config and seed may train elsewhere to
    another model; on one machine a run is reproduced number for number."""

    cpu_model: str | None = None
    cpu_capability: str | None = None
    """The vector instructions torch's CPU kernels use (``AVX2``, ``AVX512`` ...)."""
    cpu_count: int | None = None
    machine: str | None = None
    system: str | None = None
    python: str | None = None
    torch: str | None = None
    """torch's version, with its build tag (``+cpu``, ``+cu128`` ...)."""
    torch_git: str | None = None
    torch_cuda_build: str | None = None
    """The CUDA version torch was built with (None: a CPU-only build)."""
    torch_threads: int | None = None
    """torch's intra-op threads in the harness's process (its central evaluation of the
    last round)."""
    evaluation_threads_beside_training: int | None = None
    """torch's threads of the harness's central evaluation of the other rounds, which runs
    while the sites train: the cores they leave, at least one (None: no central
    evaluation)."""
    torch_interop_threads: int | None = None
    site_torch_threads: int | None = None
    """``resources.torch_threads``: what each site sets in its own process."""
    omp_num_threads: str | None = None
    """``$OMP_NUM_THREADS`` (None: unset)."""
    cuda_device: str | None = None
    """The GPU the run trained on; None: CUDA was not used (the CPU trained it)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(json_safe(self))


def read_json(path: Path) -> Any:
    """The JSON of a run file; a :class:`~contracts.errors.RunFileError` naming the file
    when it cannot be read or is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path} is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RunFileError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise RunFileError(f"{path} cannot be read: {exc}") from exc


def read_record(cls: type[R], path: Path) -> R | None:
    """The record ``cls`` in the JSON file ``path`` (:func:`~contracts.json_values.from_dict`);
    None without the file, a :class:`~contracts.errors.RunFileError` naming it when malformed."""
    if not path.exists():
        return None
    data = read_json(path)
    try:
        return from_dict(cls, data)
    except ValueError as exc:
        raise RunFileError(f"{path}: {exc}") from exc


def read_rounds(layout: RunLayout) -> list[RoundRecord]:
    """``metrics.jsonl``'s rounds in round order (none without the file); a
    :class:`~contracts.errors.RunFileError` naming the file and line of a malformed one."""
    path = layout.metrics
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path} cannot be read: {exc}") from exc
    rounds = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rounds.append(from_dict(RoundRecord, json.loads(line)))
            except ValueError as exc:  # JSONDecodeError included
                raise RunFileError(f"{path}:{lineno}: {exc}") from exc
    return sorted(rounds, key=lambda r: r.round)


def site_order(key: str) -> tuple[int, int, str]:
    """Sort key of a site id as a string: numbers in numeric order, then any other name."""
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def _compact(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None and v != {}}
