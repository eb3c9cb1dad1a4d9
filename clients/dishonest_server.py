"""A site's scoring of what a dishonest server (``fl.adversary``, simulations only) rebuilt
of its records.

In the rounds the run's server attacks the site, the site keeps, in its own state directory,
the records its local steps used (:func:`keep_used`; a real site would not know it is
attacked: the harness, which plays both sides, tells it which rounds to keep). With its
audit query the server hands it what it held of each attacked round
(:mod:`contracts.held_rounds`): the site compares the rows the server rebuilt, and the
same attack's rows from public records (the baseline), with its own records of that round,
and replies with the shares only (:class:`contracts.held_rounds.DishonestServerResult`).
For images it also keeps, in its own state directory, thumbnails of its records beside the
server's rebuilds of them (:func:`write_thumbnails`), which only its own page links.
The held local model goes to the site's audits of its update (``audit.updates``,
``audit.inversion``) in place of its own copy (:func:`held_models`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from flwr.app import RecordDict

from panoramia_fl.audit.adversary import rebuilt_share
from panoramia_fl.audit.inversion.scores import image_scores
from panoramia_fl.clients.inversion import write_gallery
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.held_rounds import (
    BASELINE,
    CHECKS_NOT_RUN,
    HELD_ROUNDS,
    HELD_ROUNDS_KEY,
    REBUILT,
    DishonestServerResult,
    HeldRound,
    held_model_name,
    read_held_rounds,
    rebuilt_name,
)
from panoramia_fl.contracts.model_flags import read_check_records
from panoramia_fl.contracts.run_files import (
    model_checks_name,
    rebuilt_gallery_name,
    used_records_name,
)
from panoramia_fl.contracts.wire import WireError

_STATE_VERSION = 1
THUMBNAILS = 8
"""Records shown beside their rebuilds on the site's own page (the best rebuilt first)."""


@dataclass(frozen=True)
class DishonestServerSettings:
    """The rounds the run's dishonest server attacks this site, and where it keeps what its
    steps used (its own folder)."""

    rounds: tuple[int, ...]
    site_id: int
    state_dir: Path

    def wants(self, server_round: int) -> bool:
        return server_round in self.rounds

    def path(self, server_round: int) -> Path:
        return self.state_dir / used_records_name(self.site_id, server_round)

    @property
    def thumbnails_path(self) -> Path:
        return self.state_dir / rebuilt_gallery_name(self.site_id)

    def checks_verdict(self, server_round: int) -> str:
        """Whether the site's own checks (``fl.model_checks``) caught the round's model: what
        its check log says of that round."""
        logged = read_check_records(self.state_dir / model_checks_name(self.site_id))
        records = [r for r in logged if r.server_round == server_round]
        if not records:
            return CHECKS_NOT_RUN
        flagged = sorted({o.check for r in records for o in r.flagged})
        if not flagged:
            return "passed every check (not caught)"
        done = "refused" if any(r.refused for r in records) else "trained anyway"
        return f"caught by {', '.join(flagged)} ({done})"


def keep_used(
    settings: DishonestServerSettings, server_round: int, used: tuple[torch.Tensor, ...] | None
) -> None:
    """Keep the records the round's steps used (None: every member, over epochs)."""
    kept = {"version": _STATE_VERSION, "used": None if used is None else used[0]}
    atomic_write(settings.path(server_round), lambda f: torch.save(kept, f), private=True)


def held_rounds(content: RecordDict) -> list[HeldRound]:
    """The rounds the server says it attacked this site in (none: an honest server)."""
    if HELD_ROUNDS not in content.config_records:
        return []
    try:
        return read_held_rounds(str(content.config_records[HELD_ROUNDS][HELD_ROUNDS_KEY]))
    except (KeyError, ValueError) as err:
        raise WireError(f"audit query: {HELD_ROUNDS!r}: {err}") from None


def held_models(content: RecordDict, rounds: list[HeldRound]) -> dict[int, dict[str, torch.Tensor]]:
    """Each attacked round's local model of the site as the server holds it."""
    out: dict[int, dict[str, torch.Tensor]] = {}
    for held in rounds:
        name = held_model_name(held.round)
        if name not in content.array_records:
            raise WireError(f"audit query: no {name!r} weights")
        out[held.round] = dict(content.array_records[name].to_torch_state_dict())
    return out


def score_rebuilt(
    settings: DishonestServerSettings,
    task: Any,
    data: SiteData,
    content: RecordDict,
    rounds: list[HeldRound],
) -> list[DishonestServerResult]:
    """Each attacked round's rows, rebuilt and baseline, against the site's records of it;
    for images, the first decoded round's thumbnails (:func:`write_thumbnails`)."""
    out = []
    shown = False
    for held in rounds:
        truth = _round_records(settings, task, data, held.round)
        name = rebuilt_name(held.round)
        shares = base = None
        n_returned = 0
        if held.decoded is not None and name in content.array_records:
            arrays = content.array_records[name]
            schema = getattr(task, "schema", None)
            rebuilt = torch.as_tensor(arrays[REBUILT].numpy())
            n_returned = len(rebuilt)
            shares = rebuilt_share(rebuilt, truth, schema=schema)
            base = rebuilt_share(torch.as_tensor(arrays[BASELINE].numpy()), truth, schema=schema)
            if truth.dim() == 4 and n_returned and not shown:
                write_thumbnails(settings.thumbnails_path, truth, rebuilt)
                shown = True
        out.append(
            DishonestServerResult(
                round=held.round,
                attack=held.attack,
                decoded=held.decoded,
                server_held=held.server_held,
                measure="ssim" if str(task.modality) == "image" else "fields",
                n_records=len(truth),
                n_returned=n_returned,
                records_rebuilt=None if shares is None else round(shares.share * len(truth)),
                share_rebuilt=None if shares is None else float(shares.share),
                baseline_share_rebuilt=None if base is None else float(base.share),
                share_rebuilt_loose=None if shares is None else shares.share_loose,
                site_checks=settings.checks_verdict(held.round),
            )
        )
    return out


def write_thumbnails(path: Path, truth: torch.Tensor, rebuilt: torch.Tensor) -> None:
    """The site's records that came back best (at most :data:`THUMBNAILS`), each as
    original | the server's rebuild (its SSIM match), a PNG in the site's own folder."""
    scores = image_scores(truth, rebuilt)
    order = scores.quality.argsort()[::-1][:THUMBNAILS]
    gap = torch.ones((*truth.shape[1:-1], 1))
    rows = [torch.cat([truth[i], gap, rebuilt[scores.match[i]]], -1) for i in order]
    write_gallery(path, rows)


def _round_records(
    settings: DishonestServerSettings, task: Any, data: SiteData, server_round: int
) -> torch.Tensor:
    """The records the round's update came from: those its steps used, else every member."""
    path = settings.path(server_round)
    if path.exists():
        used = torch.load(path, weights_only=True)["used"]
        if used is not None:
            return used
    return task.tensors(data.training_x, data.training_y)[0]
