"""Client-level DP: Flower's strategy wrappers, and each site's client-level accounting over
the rounds.

Each round the sampled sites' updates are clipped to an L2 norm ``C`` and Gaussian noise of
std ``z * C`` is added to their sum, i.e. ``z * C / k`` to their uniform mean (``k`` sites per
round). *Central* (``dp.level: client``): the server receives each update and Flower's
``DifferentialPrivacy*Clipping`` wrappers around our strategies clip (on the server, or by
Flower's client mods) and noise the mean. *Distributed* (``dp.level: distributed``): each of
the ``k`` sites clips its own update and adds ``N(0, z^2 C^2 / k)`` per coordinate
(:mod:`clients.distributed_dp`), so the sum carries ``N(0, z^2 C^2)``, the central mechanism's
noise exactly: the same accounting, and with secure aggregation the server never holds one
site's update. Accounting is ours but uses Flower's own ``RdpAccountant`` (the
``dp-accounting`` package) with one event per round a site took part in:

* no amplification by sampling is claimed: the strategy samples sites from the run's seed,
  which is not secret, so a round counts fully for every site it sampled and not at all for
  the others (the aggregate does not depend on a site that was not sampled);
* ``epsilon``: add or remove one whole site (Flower's neighbouring relation);
* ``epsilon_record``: what this implies for one record of a site. Changing a record can move
  the site's clipped update by up to ``2 C``, so the same releases have noise multiplier
  ``z / 2`` at the record level. It holds against those who see only the global model, never
  against the server, which sees each update before the noise;
* a round in which fewer sites were averaged than sampled (a site failed, dropped out, or
  its reply was rejected) is counted as it happened, never refused: centrally, Flower sizes
  the noise for the ``k`` sampled sites (``z C / k``) while the mean has ``k' < k`` updates,
  so that round's release has the smaller multiplier ``z k' / k``; distributed, only the
  ``k'`` reporting sites' shares are in the sum (``z C sqrt(k' / k)``), multiplier
  ``z sqrt(k' / k)``. The accounting records it under ``short_rounds`` and accounts it so (a
  round that averaged no site released nothing);
* ``epsilon_server`` / ``epsilon_record_server``: what holds against the server itself.
  Central: nothing (it sees each update before the noise). Distributed without secure
  aggregation: each update it receives carries its site's share alone, multiplier
  ``z / sqrt(k)``. Distributed with (ideal) secure aggregation: it holds only the sum, so the
  site-level epsilon holds against it too.

The accounting lives in the run directory (``client_dp.json``) and is written with each round's
metrics before the round's checkpoint, so ``--resume`` continues it (rounds past the last
checkpoint are dropped and redone).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    Strategy,
)
from flwr.serverapp.strategy.dp_adaptive_clipping import DifferentialPrivacyAdaptiveBase
from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase

from panoramia_fl.contracts.dp_level import SecureAggregationMode
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.registry import Registry
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import ClientDPFile, ClientDPSite, ShortRound, from_dict
from panoramia_fl.contracts.wire import ClientClipping

CLIENT_DP_SCHEMA_VERSION = 2
"""2: ``mechanism``, ``secure_aggregation`` and each site's epsilons against the server."""
ACCOUNTANT = "Flower RdpAccountant (dp-accounting RDP)"
SAMPLING = "no-amplification"
NEIGHBOURING = "add-or-remove-one site"
Mechanism = Literal["central", "distributed"]
"""Who adds the client-level noise: the server (Flower's wrappers) or each site's share."""


@dataclass(frozen=True)
class ClientDPSettings:
    """Client-level DP of a run (the ``dp.client`` section, noise resolved)."""

    noise_multiplier: float
    delta: float
    clipping: ClientClipping = "fixed"
    """``fixed`` or ``adaptive`` (Andrew et al. 2021, Flower's geometric update)."""
    clipping_side: str = "server"
    """``server``: the wrapper clips; ``client``: Flower's clipping mod at each site."""
    clipping_norm: float = 1.0
    """Fixed clipping: the norm; adaptive: the first round's norm."""
    target_clipped_quantile: float = 0.5
    clip_norm_lr: float = 0.2
    clipped_count_stddev: float | None = None
    mechanism: Mechanism = "central"
    """``central``: Flower's wrappers on the server; ``distributed``: each site clips and
    adds its share of the noise (fixed clipping, at the site)."""
    secure_aggregation: SecureAggregationMode = "none"
    """``ideal``: the server's strategy receives only each round's sum."""

    def __post_init__(self) -> None:
        CLIPPINGS.get(self.clipping)  # an unknown clipping names dp.client.clipping
        if self.clipping_side not in CLIPPING_SIDES:
            raise ValueError(
                f"dp.client.clipping_side: unknown side {self.clipping_side!r}; "
                f"known: {list(CLIPPING_SIDES)}"
            )


CLIPPING_SIDES = ("server", "client")
WrapStrategy = Callable[[Strategy, ClientDPSettings, int], Strategy]
"""``wrap(strategy, settings, sites_per_round)``: the strategy inside a Flower DP wrapper."""

CLIPPINGS: Registry[WrapStrategy] = Registry("clipping", config_key="dp.client.clipping")
"""Flower's DP wrapper of each kind of clipping, on the side ``settings`` name."""


@CLIPPINGS.register("fixed")
def _fixed_clipping(
    strategy: Strategy, settings: ClientDPSettings, sites_per_round: int
) -> Strategy:
    wrapper: type[DifferentialPrivacyFixedClippingBase] = (
        DifferentialPrivacyServerSideFixedClipping
        if settings.clipping_side == "server"
        else DifferentialPrivacyClientSideFixedClipping
    )
    return wrapper(
        strategy,
        noise_multiplier=settings.noise_multiplier,
        clipping_norm=settings.clipping_norm,
        num_sampled_clients=sites_per_round,
    )


@CLIPPINGS.register("adaptive")
def _adaptive_clipping(
    strategy: Strategy, settings: ClientDPSettings, sites_per_round: int
) -> Strategy:
    wrapper: type[DifferentialPrivacyAdaptiveBase] = (
        DifferentialPrivacyServerSideAdaptiveClipping
        if settings.clipping_side == "server"
        else DifferentialPrivacyClientSideAdaptiveClipping
    )
    return wrapper(
        strategy,
        noise_multiplier=settings.noise_multiplier,
        num_sampled_clients=sites_per_round,
        initial_clipping_norm=settings.clipping_norm,
        target_clipped_quantile=settings.target_clipped_quantile,
        clip_norm_lr=settings.clip_norm_lr,
        clipped_count_stddev=settings.clipped_count_stddev,
    )


def wrap_strategy(
    strategy: Strategy, settings: ClientDPSettings, *, sites_per_round: int
) -> Strategy:
    """``strategy`` inside the Flower wrapper that ``settings`` name."""
    return CLIPPINGS.get(settings.clipping)(strategy, settings, sites_per_round)


def client_clipping(settings: ClientDPSettings | None) -> ClientClipping | None:
    """The clipping a train message asks a site to run on its own update (Flower's mod);
    None when the sites do not clip."""
    if settings is None or settings.mechanism != "central" or settings.clipping_side != "client":
        return None
    return settings.clipping


def gaussian_epsilon(
    noise_multiplier: float, *, releases: int, delta: float, population_size: int = 1
) -> float:
    """Epsilon at ``delta`` of ``releases`` Gaussian releases (no amplification), by
    Flower's RDP accountant."""
    return mixed_gaussian_epsilon(
        {noise_multiplier: releases}, delta=delta, population_size=population_size
    )


def mixed_gaussian_epsilon(
    releases: dict[float, int], *, delta: float, population_size: int = 1
) -> float:
    """Epsilon at ``delta`` of Gaussian releases of several noise multipliers
    (``{multiplier: count}``, no amplification), composed by Flower's RDP accountant."""
    from flwr.serverapp import (
        NeighboringRelation,
        PrivacyConfig,
        RdpAccountant,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    releases = {z: n for z, n in releases.items() if n > 0}
    if not releases:
        return 0.0
    accountant = RdpAccountant(
        PrivacyConfig(
            target_delta=delta,
            population_size=population_size,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
    for z, count in sorted(releases.items()):
        event = GaussianPrivacyEvent(
            noise_multiplier=z, sample_size=1, population_size=population_size
        )
        accountant.compose(event, count=count)
    return float(accountant.get_epsilon(delta))


def calibrate_noise_multiplier(target_epsilon: float, *, rounds: int, delta: float) -> float:
    """The smallest ``z`` (to 0.1%) whose ``rounds`` releases stay within ``target_epsilon``
    for a site sampled in every round."""
    if target_epsilon <= 0 or rounds < 1:
        raise ValueError("dp.client.target_epsilon and fl.rounds must be positive")
    lo, hi = 1e-3, 1.0
    while gaussian_epsilon(hi, releases=rounds, delta=delta) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            raise ValueError(f"dp.client.target_epsilon {target_epsilon} is out of reach")
    while hi - lo > 1e-3 * hi:
        mid = math.sqrt(lo * hi)
        if gaussian_epsilon(mid, releases=rounds, delta=delta) > target_epsilon:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass
class ClientDPAccounting:
    """Which rounds each site took part in under client-level DP, and what they cost."""

    settings: ClientDPSettings
    population_size: int
    sites_per_round: int
    rounds: dict[int, list[int]] = field(default_factory=dict)
    """site id -> the global rounds it was sampled in."""
    short_rounds: dict[int, int] = field(default_factory=dict)
    """global round -> sites averaged, for rounds that averaged fewer than ``sites_per_round``
    (the noise, sized for all of them, is then smaller relative to the mean)."""
    noise_note: str | None = None
    """How the noise was drawn (``contracts.run_files.NOISE_NOTES``)."""

    def record_round(
        self, server_round: int, sites: Iterable[int], *, aggregated: int | None = None
    ) -> None:
        """The sampled ``sites`` of a round; ``aggregated``: how many updates the mean had
        (None: all of them). A round that averaged none released nothing."""
        if aggregated is not None and aggregated < self.sites_per_round:
            self.short_rounds[server_round] = aggregated
        if aggregated == 0:
            return
        for site in sites:
            done = self.rounds.setdefault(int(site), [])
            if server_round not in done:
                done.append(server_round)

    def truncate(self, last_round: int) -> None:
        """Forget rounds past the last checkpoint (they are redone)."""
        self.rounds = {s: [r for r in rs if r <= last_round] for s, rs in self.rounds.items()}
        self.short_rounds = {r: n for r, n in self.short_rounds.items() if r <= last_round}

    def round_multiplier(self, server_round: int) -> float:
        """The release's noise multiplier in a round: ``z``, or, when only ``k'`` of the
        ``k`` sampled sites were averaged, ``z k' / k`` (central: the noise was sized for
        ``k``) or ``z sqrt(k' / k)`` (distributed: only ``k'`` shares are in the sum)."""
        z = self.settings.noise_multiplier
        if server_round not in self.short_rounds:
            return z
        share = self.short_rounds[server_round] / self.sites_per_round
        return z * (math.sqrt(share) if self.settings.mechanism == "distributed" else share)

    def server_multiplier(self) -> float | None:
        """The noise multiplier of what the server receives from one site each round: None
        centrally (each update in the clear), ``z / sqrt(k)`` for a distributed share alone,
        and the sum's own under secure aggregation (:meth:`round_multiplier`)."""
        settings = self.settings
        if settings.mechanism == "central" or settings.secure_aggregation != "none":
            return None
        return settings.noise_multiplier / math.sqrt(self.sites_per_round)

    def _releases(self, site: int, scale: float, *, to_server: bool = False) -> dict[float, int]:
        releases: dict[float, int] = {}
        share = self.server_multiplier() if to_server else None
        for server_round in self.rounds.get(site, []):
            z = (share if share is not None else self.round_multiplier(server_round)) * scale
            releases[z] = releases.get(z, 0) + 1
        return releases

    def epsilon(self, site: int) -> float:
        """Site level: add or remove the whole site."""
        return mixed_gaussian_epsilon(self._releases(site, 1.0), delta=self.settings.delta)

    def epsilon_record(self, site: int) -> float:
        """Record level: one record moves the clipped update by up to twice the norm."""
        return mixed_gaussian_epsilon(self._releases(site, 0.5), delta=self.settings.delta)

    def epsilon_server(self, site: int, *, scale: float = 1.0) -> float | None:
        """Site level against the server itself (``scale`` 0.5: record level); None when
        the server sees the site's update before any noise (central)."""
        if self.settings.mechanism == "central":
            return None
        releases = self._releases(site, scale, to_server=True)
        return mixed_gaussian_epsilon(releases, delta=self.settings.delta)

    def to_dict(self) -> dict[str, Any]:
        return ClientDPFile(
            schema_version=CLIENT_DP_SCHEMA_VERSION,
            accountant=ACCOUNTANT,
            **asdict(self.settings),
            population_size=self.population_size,
            sites_per_round=self.sites_per_round,
            sampling=SAMPLING,
            neighboring_relation=NEIGHBOURING,
            rounds_done=max((r for rs in self.rounds.values() for r in rs), default=0),
            short_rounds={
                str(r): ShortRound(self.sites_per_round, n, self.round_multiplier(r))
                for r, n in sorted(self.short_rounds.items())
            },
            noise=self.noise_note,
            sites={
                str(site): ClientDPSite(
                    sorted(rounds),
                    self.epsilon(site),
                    self.epsilon_record(site),
                    self.epsilon_server(site),
                    self.epsilon_server(site, scale=0.5),
                )
                for site, rounds in sorted(self.rounds.items())
            },
        ).to_dict()

    def save(self, layout: RunLayout) -> Path:
        path = layout.client_dp_accounting
        return atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load_or_new(
        cls,
        layout: RunLayout,
        settings: ClientDPSettings,
        *,
        population_size: int,
        sites_per_round: int,
    ) -> ClientDPAccounting:
        """The run's accounting; refuses one written under other DP settings."""
        accounting = cls(settings, population_size=population_size, sites_per_round=sites_per_round)
        path = layout.client_dp_accounting
        if not path.exists():
            return accounting
        try:
            file = from_dict(ClientDPFile, json.loads(path.read_text()))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        kept = {k: getattr(file, k) for k in asdict(settings)}
        if kept != asdict(settings):
            raise ValueError(
                f"{path}: written under other client-level DP settings ({kept}); "
                "a resumed run must keep dp.client"
            )
        accounting.rounds = {int(s): list(v.rounds) for s, v in file.sites.items()}
        accounting.short_rounds = {int(r): v.aggregated for r, v in file.short_rounds.items()}
        return accounting
