"""A server that does not play fair (``fl.adversary``; simulations only, a deployment refuses
it): in chosen rounds it sends chosen sites crafted weights instead of the global model (the
architecture stays the agreed one), reads what it then holds of their updates, and rebuilds
records from it with :mod:`audit.adversary`'s attacks.

:class:`DishonestServer` stands inside the reply screening (or the secure sum) and outside
every aggregating strategy, Flower's client-level DP wrappers included (the server sees each
update before its own noise, and keeps its own weights sane):

* ``configure_train``: each attacked site's message carries its model: ``imprint`` or
  ``trap`` weights, or under ``inconsistent`` the real (or a crafted) model to the target
  and a model whose update is zero (every first-layer ReLU dead) to every other site;
* ``aggregate_train``: the server reads each attacked site's update (its reply's weights
  minus what it was sent), or under ideal secure aggregation the round's sum over the
  target's weight, which ``inconsistent`` makes the target's own update; then hands the
  strategy each reply moved back onto the real global model (the update applied to it), so
  the run's model is the one an honest server would build from those updates.

What the server holds (:class:`Holdings`) goes to each attacked site with its audit query
(:mod:`contracts.held_rounds`): the site scores it against its own records; the logs
and the reports get the site's summary numbers only. The server keeps it with the run's
state too, one file a round (:meth:`RunLayout.server_held`, 0600), so that a run resumed
after its attacked rounds still hands it to the sites: what it rebuilt and the local models
it read, never a site's records.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from torch import nn

from panoramia_fl.audit.adversary import ATTACKS, CraftedModel, SiteOptimizer, craft_dead, rebuild
from panoramia_fl.audit.inversion.attack import LocalTraining, simulate_update
from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.held_rounds import (
    BASELINE,
    HELD_ROUNDS,
    HELD_ROUNDS_KEY,
    REBUILT,
    AttackName,
    CraftName,
    HeldRound,
    held_model_name,
    held_rounds_json,
    read_held_rounds,
    rebuilt_name,
)
from panoramia_fl.contracts.run_files import SERVER_HELD_DIR, RunLayout
from panoramia_fl.contracts.secure_sum import weight_of
from panoramia_fl.contracts.wire import ARRAYS, CONFIG
from panoramia_fl.server.strategy import DelegatingStrategy, SiteAwareMixin

log = logging.getLogger(__name__)

StateArrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Attack:
    """One entry of ``fl.adversary``."""

    attack: AttackName
    rounds: tuple[int, ...]
    sites: tuple[int, ...]
    crafted: CraftName | None
    """The crafted model the targets get (None: ``inconsistent`` sends the real one)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The crafting function's keyword options (``bins``, ``units``)."""


@dataclass(frozen=True)
class AdversarySettings:
    """The dishonest server's attacks and what it knows: the public records, the agreed
    model and local training."""

    attacks: tuple[Attack, ...]
    make_model: Callable[[], nn.Module]
    public: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    """Public records in the model's input space, and their labels."""
    training: LocalTraining
    """The sites' agreed local training; its ``num_examples`` stands in where a reply does
    not say its count (record-level DP)."""
    optimizer: SiteOptimizer
    """The sites' agreed local step, which the crafted weights are scaled for."""
    seed: int

    def at(self, global_round: int) -> list[Attack]:
        return [a for a in self.attacks if global_round in a.rounds]


@dataclass
class Held:
    """What the server holds of one attacked site's round."""

    meta: HeldRound
    model: StateArrays
    """The site's local model as the server holds it: what it sent plus the update read."""
    rebuilt: torch.Tensor | None
    baseline: torch.Tensor | None


@dataclass
class Holdings:
    """Everything the dishonest server held, by site, in round order; with ``layout``,
    each round is also written with the run's state (:meth:`load` reads it back)."""

    by_site: dict[int, list[Held]] = field(default_factory=dict)
    layout: RunLayout | None = None

    def add(self, site: int, held: Held) -> None:
        self.by_site.setdefault(site, []).append(held)
        if self.layout is not None:
            self._write(held.meta.round)

    def _write(self, global_round: int) -> None:
        """The round's file: every site held that round (a redone round overwrites it)."""
        assert self.layout is not None
        sites = {
            site: _held_state(h)
            for site, kept in self.by_site.items()
            for h in kept
            if h.meta.round == global_round
        }
        state = {"version": _HELD_VERSION, "round": global_round, "sites": sites}
        path = self.layout.server_held(global_round)
        atomic_write(path, lambda f: torch.save(state, f), private=True)

    @classmethod
    def load(cls, layout: RunLayout) -> Holdings:
        """What the server held of the rounds a resumed run keeps (those with a round
        checkpoint); a round past them is redone, so its file is dropped."""
        holdings = cls(layout=layout)
        kept = layout.round_checkpoints()
        for path in sorted((layout.root / SERVER_HELD_DIR).glob("round-*.pt")):
            match = re.fullmatch(r"round-(\d+)\.pt", path.name)
            if match is None:
                continue
            if int(match.group(1)) not in kept:
                path.unlink()
                continue
            state = torch.load(path, weights_only=True)
            for site, held in sorted(state["sites"].items()):
                holdings.by_site.setdefault(int(site), []).append(_held_of(held))
        return holdings

    def audit_records(self, site: int) -> dict[str, Any]:
        """The records the site's audit query carries (none for a site not attacked)."""
        kept = self.by_site.get(site, [])
        if not kept:
            return {}
        records: dict[str, Any] = {
            HELD_ROUNDS: ConfigRecord({HELD_ROUNDS_KEY: held_rounds_json([h.meta for h in kept])})
        }
        for h in kept:
            records[held_model_name(h.meta.round)] = ArrayRecord(
                {k: Array(np.ascontiguousarray(v)) for k, v in h.model.items()}
            )
            if h.rebuilt is not None and h.baseline is not None:
                records[rebuilt_name(h.meta.round)] = ArrayRecord(
                    {REBUILT: Array(h.rebuilt.numpy()), BASELINE: Array(h.baseline.numpy())}
                )
        return records


_HELD_VERSION = 1


def _held_state(held: Held) -> dict[str, Any]:
    """One site's round as the server's state file holds it (tensors and text only)."""
    return {
        "meta": held_rounds_json([held.meta]),
        "model": {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in held.model.items()},
        "rebuilt": held.rebuilt,
        "baseline": held.baseline,
    }


def _held_of(state: Mapping[str, Any]) -> Held:
    [meta] = read_held_rounds(state["meta"])
    model = {k: v.numpy() for k, v in state["model"].items()}
    return Held(meta=meta, model=model, rebuilt=state["rebuilt"], baseline=state["baseline"])


class HeldSum(Protocol):
    """What ideal secure aggregation lets the server read of a round
    (:mod:`server.secure_aggregation`)."""

    held_sum: StateArrays | None


@dataclass
class _Sent:
    """One attacked site's model of the round."""

    attack: Attack
    state: StateArrays
    crafted: CraftedModel | None
    """What the server decodes records with (None: the real or the dead model)."""
    target: bool


class DishonestServer(DelegatingStrategy):
    """Sends crafted models in the attacked rounds and keeps what it then holds."""

    def __init__(
        self,
        inner: Strategy,
        sites: SiteAwareMixin,
        settings: AdversarySettings,
        holdings: Holdings,
    ) -> None:
        super().__init__(inner)
        self.sites, self.settings, self.holdings = sites, settings, holdings
        self.secure_sum: HeldSum | None = None
        """Set under ideal secure aggregation: the server then holds each round's sum only."""
        self._sent: dict[int, dict[int, _Sent]] = {}
        self._real: StateArrays = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = list(self.inner.configure_train(server_round, arrays, config, grid))
        attacks = self.settings.at(self.sites.round_offset + server_round)
        if not attacks:
            return messages
        self._real = {k: a.numpy() for k, a in arrays.items()}
        sent = self._models(server_round, arrays, attacks)
        self._sent[server_round] = sent
        out = []
        for msg in messages:
            site = self.sites.site_of_node.get(msg.metadata.dst_node_id)
            if site not in sent:
                out.append(msg)
                continue
            # Flower's messages share one RecordDict: each attacked site gets its own.
            content = RecordDict(
                {
                    ARRAYS: ArrayRecord({k: Array(v) for k, v in sent[site].state.items()}),
                    CONFIG: msg.content.config_records[CONFIG],
                }
            )
            out.append(
                Message(
                    content=content,
                    dst_node_id=msg.metadata.dst_node_id,
                    message_type=msg.metadata.message_type,
                )
            )
        return out

    def _models(
        self, server_round: int, arrays: ArrayRecord, attacks: list[Attack]
    ) -> dict[int, _Sent]:
        """Each attacked site's model this round (sites not sampled included: harmless)."""
        global_round = self.sites.round_offset + server_round
        public_x, _ = self.settings.public()
        sent: dict[int, _Sent] = {}
        for i, attack in enumerate(attacks):
            seed = _seed(self.settings.seed, global_round, i)
            crafted = None
            if attack.crafted is not None:
                crafted = ATTACKS.get(attack.crafted)(
                    self._real_model(arrays),
                    public=public_x,
                    seed=seed,
                    optimizer=self.settings.optimizer,
                    batch_size=self.settings.training.batch_size,
                    **attack.options,
                )
            target = _numpy(crafted.state_dict) if crafted is not None else dict(self._real)
            for site in attack.sites:
                sent[site] = _Sent(attack, target, crafted, target=True)
            if attack.attack == "inconsistent":
                dead = _numpy(
                    craft_dead(self._real_model(arrays), public=public_x, seed=seed).state_dict
                )
                for site in set(self.sites.site_of_node.values()) - set(attack.sites):
                    sent[site] = _Sent(attack, dead, None, target=False)
        return sent

    def _real_model(self, arrays: ArrayRecord) -> nn.Module:
        model = self.settings.make_model()
        model.load_state_dict(arrays.to_torch_state_dict())
        return model

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        sent = self._sent.pop(server_round, None)
        if sent is None:
            return self.inner.aggregate_train(server_round, replies)
        replies = list(replies)
        if self.secure_sum is not None:
            self._read_sum(server_round, sent)
        else:
            for msg in replies:
                self._read_update(server_round, msg, sent)
        return self.inner.aggregate_train(server_round, replies)

    def _read_update(self, server_round: int, msg: Message, sent: dict[int, _Sent]) -> None:
        """One screened reply: keep the target's update, and move the reply back onto the
        real global model (its update applied to it)."""
        site = self.sites.site_of_node[msg.metadata.src_node_id]
        if site not in sent:
            return
        model = {k: a.numpy() for k, a in msg.content.array_records[ARRAYS].items()}
        update = {k: _minus(model[k], sent[site].state[k]) for k in model}
        msg.content[ARRAYS] = ArrayRecord(
            {k: Array(_plus(self._real[k], update[k])) for k in model}
        )
        if sent[site].target:
            self._keep(server_round, site, sent[site], update, "update")

    def _read_sum(self, server_round: int, sent: dict[int, _Sent]) -> None:
        """Under secure aggregation: the round's weighted sum over each target's weight,
        its own update when every other site's is zero."""
        assert self.secure_sum is not None
        total = self.secure_sum.held_sum
        record = self.sites.rounds.get(server_round)
        if total is None or record is None:
            return  # the server read no sum this round
        key = self.sites.weighted_by_key
        for site, s in sorted(sent.items()):
            if not s.target or site not in record.sites:
                continue
            weight = weight_of(record.sites[site].to_record(), key)
            update = {k: total[k] / weight for k in s.state}
            self._keep(server_round, site, s, update, "sum")

    def _keep(
        self, server_round: int, site: int, sent: _Sent, update: StateArrays, held: str
    ) -> None:
        global_round = self.sites.round_offset + server_round
        rebuilt = baseline = None
        if sent.crafted is not None:
            rebuilt = rebuild(sent.crafted, _tensors(update)).detach().cpu().float()
            baseline = self._baseline(sent.crafted, server_round, site)
        meta = HeldRound(
            round=global_round,
            attack=sent.attack.attack,
            decoded=sent.attack.crafted,
            server_held="sum" if held == "sum" else "update",
        )
        model = {k: _plus(sent.state[k], update[k]) for k in sent.state}
        self.holdings.add(site, Held(meta=meta, model=model, rebuilt=rebuilt, baseline=baseline))
        log.info(
            "round %d: the dishonest server held site %d's %s (%s)",
            global_round,
            site,
            meta.server_held,
            meta.attack,
        )

    def _baseline(self, crafted: CraftedModel, server_round: int, site: int) -> torch.Tensor:
        """The attack's rebuild of the same local training on public records: chance."""
        x, y = self.settings.public()
        training = self.settings.training
        reply = self.sites.rounds[server_round].sites.get(site)
        if reply is not None and reply.num_examples is not None:
            training = replace(training, num_examples=reply.num_examples)
        n = training.records
        rng = np.random.default_rng(
            [self.settings.seed, self.sites.round_offset + server_round, site]
        )
        pick = torch.as_tensor(rng.choice(len(x), size=n, replace=n > len(x)))
        update = simulate_update(
            self.settings.make_model(),
            dict(crafted.state_dict),
            x[pick],
            y[pick],
            training,
            differentiable=False,
        )
        return rebuild(crafted, update).detach().cpu().float()


def _seed(seed: int, global_round: int, index: int) -> int:
    """The crafting seed of one attack of one round (from the run's seed)."""
    return int(np.random.SeedSequence([seed, global_round, index]).generate_state(1)[0])


def _numpy(state: Mapping[str, torch.Tensor]) -> StateArrays:
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def _tensors(update: StateArrays) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in update.items()}


def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` in float64 (zero for integer arrays: counters, not weights)."""
    if not np.issubdtype(a.dtype, np.floating):
        return np.zeros(a.shape)
    return a.astype(np.float64) - b.astype(np.float64)


def _plus(base: np.ndarray, update: np.ndarray) -> np.ndarray:
    """``base + update`` in ``base``'s dtype (integer arrays kept as they are)."""
    if not np.issubdtype(base.dtype, np.floating):
        return np.array(base)
    return np.asarray(base.astype(np.float64) + update).astype(base.dtype)
