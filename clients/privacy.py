"""DP-SGD for one site: its sampling constants, noise calibration over the whole training
and its persistent accountant history.

The accountant's history (noise multiplier, sample rate, steps) spans every round the site
takes part in. It lives in the site's Flower ``Context.state`` (kept across messages) and in
an optional site-local file, so a resumed run does not forget what was already spent.

Opacus's accountants assume add/remove adjacency, under which the record count itself is
secret, yet ``make_private`` derives the sampling rate from ``len(loader)`` and the divisor
of the noisy sum from ``len(dataset)``. Here every such constant comes from the site's
*declared size*, fixed before training (:class:`Sampling`): the mechanism then is the one the
accountant analyses, given that number.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from panoramia_fl.contracts.files import atomic_write_text


@dataclass(frozen=True)
class DPSettings:
    """A site's DP-SGD policy (from the ``dp`` section of the config)."""

    target_epsilon: float | None
    noise_multiplier: float | None
    delta: float
    max_grad_norm: float
    accountant: str
    total_epochs: int
    """Local epochs over all rounds the site may take part in (calibration horizon)."""
    total_steps: int | None = None
    """Local steps over all rounds (``fl.local_steps``), in place of ``total_epochs``."""
    declared_size: int | None = None
    """The record count the site declared before training (``dp.declared_size``, else its
    member count when the run starts); None: the records' count at each call (a caller
    outside a run)."""

    _noise_found: dict[float, float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """sigma per sample rate, once searched: Opacus's search costs about a second of CPU
    (RDP; more with PRV), and a site asks every round."""

    def sampling(self, *, records: int, batch_size: int) -> Sampling:
        """The round's sampling constants: from :attr:`declared_size`, else ``records``."""
        declared = records if self.declared_size is None else self.declared_size
        return Sampling(declared_size=declared, batch_size=batch_size)

    def noise_for(self, sample_rate: float) -> float:
        """sigma such that ``total_epochs`` (or ``total_steps``) at ``sample_rate`` meet the
        target epsilon; searched once per settings object and rate."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        if sample_rate not in self._noise_found:
            self._noise_found[sample_rate] = self._search_noise(sample_rate)
        return self._noise_found[sample_rate]

    def _search_noise(self, sample_rate: float) -> float:
        horizon = (
            {"epochs": self.total_epochs}
            if self.total_steps is None
            else {"steps": self.total_steps}
        )
        from opacus.accountants.utils import get_noise_multiplier  # heavy; DP sites only

        assert self.target_epsilon is not None
        return float(
            get_noise_multiplier(
                target_epsilon=self.target_epsilon,
                target_delta=self.delta,
                sample_rate=sample_rate,
                **horizon,
                accountant=self.accountant,
            )
        )


@dataclass(frozen=True)
class Sampling:
    """DP-SGD's constants from a declared size N and the batch size B, none of them a
    function of the records: ``steps_per_epoch`` = ceil(N / B) Poisson draws at rate
    ``sample_rate`` = 1 / steps_per_epoch, each noisy sum divided by
    ``expected_batch_size`` = int(N * rate) (what Opacus computes from ``len(dataset)``). With
    N the records' count they equal Opacus's own."""

    declared_size: int
    batch_size: int

    @property
    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.declared_size / self.batch_size))

    @property
    def sample_rate(self) -> float:
        return 1.0 / self.steps_per_epoch

    @property
    def expected_batch_size(self) -> int:
        return max(1, int(self.declared_size * self.sample_rate))


History = list[tuple[float, float, int]]


@dataclass
class AccountantHistory:
    """The accountant history of one site, persisted as JSON."""

    accountant: str
    history: History

    def epsilon(self, delta: float) -> float:
        if not self.history:
            return 0.0
        from opacus.accountants import create_accountant

        acc = create_accountant(self.accountant)
        acc.history = list(self.history)
        return float(acc.get_epsilon(delta=delta))

    def to_json(self) -> str:
        return json.dumps({"accountant": self.accountant, "history": self.history})

    @classmethod
    def from_json(cls, text: str) -> AccountantHistory:
        data = json.loads(text)
        return cls(accountant=data["accountant"], history=[tuple(h) for h in data["history"]])

    @classmethod
    def load(cls, path: Path | None, *, accountant: str) -> AccountantHistory:
        if path is not None and path.exists():
            return cls.from_json(path.read_text())
        return cls(accountant=accountant, history=[])

    def save(self, path: Path | None) -> None:
        if path is None:
            return
        # Site-local: the site's own account only, durable before the reply leaves.
        atomic_write_text(path, self.to_json(), private=True)
