"""Canary clients in the federated rounds (simulation only): a Flower strategy wrapper.

:class:`CanaryClients` wraps the strategy that Flower's client-level DP wrapper (if any)
wraps, and adds one reply per canary sampled in the round to the real sites' replies
before that DP wrapper reads them, so a canary is clipped, averaged and noised exactly like
a site (as far as the DP mechanism is concerned it is a client). A canary's reply is the
round's global model plus its fixed unit direction over the trainable parameters, times
the clipping norm (client-level DP) or the median norm of the real sites' updates in that
round (no DP). The noise of the mean is sized for every client averaged, canaries included,
so the noise multiplier keeps its meaning. The math (directions, cosines, estimates) is
:mod:`audit.canaries.client_canaries`; :func:`measure_canary_clients` reads the round
checkpoints after training and writes ``client_canaries.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from panoramia_fl.audit.canaries.client_canaries import (
    LB_METHOD,
    THREAT_MODELS,
    CanaryClientCosines,
    CanaryClientDesign,
    ClientCanaryResult,
    estimate_threat,
)
from panoramia_fl.audit.stats.one_run_methods import DEFAULT_BETA, DEFAULT_DELTA
from panoramia_fl.contracts.checkpoint import StateDict, load_checkpoint
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.wire import ARRAYS, METRICS
from panoramia_fl.server.client_dp import gaussian_epsilon
from panoramia_fl.server.strategy import DelegatingStrategy


@dataclass(frozen=True)
class CanaryClientSettings:
    """The canary clients of a run (``audit.canary_clients``)."""

    count: int
    """K: 2K directions, each inserted by a fair coin."""
    seed: int
    fraction: float
    """Probability that an inserted canary takes part in a round (``fl.fraction_train``)."""
    keys: tuple[str, ...]
    """The trainable parameters, in the order the directions flatten them."""
    delta: float = DEFAULT_DELTA
    """delta of the estimate and the bound (``dp.delta``)."""
    beta: float = DEFAULT_BETA
    """Level of the lower bound."""

    def design(self, dim: int) -> CanaryClientDesign:
        return CanaryClientDesign(count=self.count, dim=dim, seed=self.seed)

    def in_round(self, included: np.ndarray, global_round: int) -> np.ndarray:
        """Indices of the inserted canaries taking part in ``global_round`` (seeded)."""
        inserted = np.flatnonzero(included)
        rng = np.random.default_rng([self.seed, 0xCA, global_round])
        return inserted[rng.random(inserted.size) < self.fraction]


def flat(arrays: ArrayRecord | StateDict, keys: Iterable[str]) -> np.ndarray:
    """The named arrays, flattened in ``keys`` order (float64)."""
    parts = []
    for key in keys:
        value = arrays[key]
        data = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        parts.append(np.asarray(data, dtype=np.float64).ravel())
    return np.concatenate(parts)


class CanaryClients(DelegatingStrategy):
    """Adds the round's canary replies to the real ones, inside the screening and outside
    Flower's DP wrapper (``inner``), which clips and noises them with the sites'."""

    def __init__(
        self,
        inner: Strategy,
        settings: CanaryClientSettings,
        *,
        weighted_by_key: str,
        sites_per_round: int,
        round_offset: int = 0,
        dp_wrapper: Strategy | None = None,
        clipping_norm: float | None = None,
    ) -> None:
        """``dp_wrapper``: Flower's central DP wrapper that ``inner`` is, whose clipping norm
        scales the canaries and whose noise they are counted in; ``clipping_norm``: the norm
        of distributed DP (the sites noise the sum; the canaries add none)."""
        super().__init__(inner)
        self.settings = settings
        self.weighted_by_key = weighted_by_key
        self.sites_per_round = sites_per_round
        self.round_offset = round_offset
        self.dp_wrapper = dp_wrapper
        self.clipping_norm = clipping_norm
        self._directions: np.ndarray | None = None
        self._included: np.ndarray | None = None
        self._current: ArrayRecord | None = None

    def _design(self, arrays: ArrayRecord) -> tuple[np.ndarray, np.ndarray]:
        if self._directions is None or self._included is None:
            design = self.settings.design(flat(arrays, self.settings.keys).size)
            self._directions, self._included = design.directions(), design.included()
        return self._directions, self._included

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._current = arrays
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        real = list(replies)
        ok = [m for m in real if not m.has_error()]
        if not ok or self._current is None:
            return self.inner.aggregate_train(server_round, real)  # nothing to hide among
        canary_replies = list(self._canary_client_replies(server_round, ok))
        if self.dp_wrapper is not None:
            # Flower sizes the noise (z C / k) for k clients averaged: canaries count.
            self._dp_fields().num_sampled_clients = self.sites_per_round + len(canary_replies)
        return self.inner.aggregate_train(server_round, real + canary_replies)

    def _dp_fields(self) -> Any:
        """The Flower DP wrapper, whose noise fields (``clipping_norm``,
        ``num_sampled_clients``) its declared type, ``Strategy``, does not name."""
        return self.dp_wrapper

    def _canary_client_replies(self, server_round: int, real: list[Message]) -> Iterator[Message]:
        assert self._current is not None
        directions, included = self._design(self._current)
        chosen = self.settings.in_round(included, self.round_offset + server_round)
        if chosen.size == 0:
            return
        keys = self.settings.keys
        base = flat(self._current, keys)
        weights = [
            cast(float, m.content.metric_records[METRICS][self.weighted_by_key]) for m in real
        ]
        if self.dp_wrapper is not None or self.clipping_norm is not None:
            wrapper = self._dp_fields()
            norm: float | None = self.clipping_norm if wrapper is None else wrapper.clipping_norm
            assert norm is not None
            scale, weight = float(norm), 1.0
        else:
            norms = [
                np.linalg.norm(flat(m.content.array_records[ARRAYS], keys) - base) for m in real
            ]
            scale, weight = float(np.median(norms)), float(np.median(weights))
        current = {k: self._current[k].numpy() for k in keys}
        # Flower averages only replies with the same metric keys: a real site's keys, whose
        # averaged values nobody reads (the per-site metrics are kept before aggregation).
        metrics = MetricRecord(dict(real[0].content.metric_records[METRICS]))
        metrics[self.weighted_by_key] = weight
        for j in chosen:
            vector = base + scale * directions[j].astype(np.float64)
            arrays = dict(self._current.items())
            start = 0
            for key, value in current.items():
                part = vector[start : start + value.size]
                arrays[key] = Array(part.reshape(value.shape).astype(value.dtype))
                start += value.size
            content = RecordDict(
                {
                    ARRAYS: ArrayRecord(arrays),
                    METRICS: metrics,
                }
            )
            yield Message(content=content, dst_node_id=0, message_type=MessageType.TRAIN)


def measure_canary_clients(
    layout: RunLayout,
    settings: CanaryClientSettings,
    *,
    initial_state: Callable[[], StateDict],
    rounds: int,
    real_sites: int,
    sites_per_round: int,
    noise_multiplier: float | None,
    clipping: str | None,
) -> ClientCanaryResult:
    """Read the canaries in the round checkpoints; write ``client_canaries.json``."""
    keys, delta = settings.keys, settings.delta

    initial = flat(initial_state(), keys)

    def deltas() -> Iterator[np.ndarray]:
        before = initial
        for r in range(1, rounds + 1):
            after = flat(load_checkpoint(layout.round_checkpoint(r)).state_dict, keys)
            yield after - before
            before = after

    design = settings.design(initial.size)
    included = design.included()
    values = CanaryClientCosines.from_deltas(design.directions(), deltas())
    per_round = [settings.in_round(included, r).size for r in range(1, rounds + 1)]
    result = ClientCanaryResult(
        canary_clients=settings.count,
        inserted=int(included.sum()),
        dim=design.dim,
        rounds=rounds,
        real_sites=real_sites,
        sites_per_round=sites_per_round,
        mean_canaries_per_round=float(np.mean(per_round)),
        delta=delta,
        beta=settings.beta,
        lb_method=LB_METHOD,
        scale="median site update norm" if noise_multiplier is None else "clipping norm",
        accountant_epsilon=(
            None
            if noise_multiplier is None
            else gaussian_epsilon(noise_multiplier, releases=rounds, delta=delta)
        ),
        estimates={
            t: estimate_threat(t, values.of(t), included, delta=delta, beta=settings.beta)
            for t in THREAT_MODELS
        },
        notes=[] if clipping in (None, "fixed") else [f"{clipping} clipping"],
    )
    write_result(layout, result)
    return result


def write_result(layout: RunLayout, result: ClientCanaryResult) -> Path:
    path = layout.client_canaries
    return atomic_write_text(path, json.dumps(json_safe(result), indent=1) + "\n")
