"""A site's checks on the model it receives, before it trains (``audit.received_model``).

Two messages a round: ``query.announce`` (:data:`contracts.model_flags.ANNOUNCE`), by which
the site publishes the server's announcement of the round on the bulletin
(:class:`FileBulletin`), then ``train``, before which the site runs every check on the model
it got: consistency (against the bulletin), plausibility (against the last global model it
received, kept in its node state) and structure (on its own records). A flagged model is
refused: :func:`check_received` returns the :class:`~contracts.model_flags.ModelFlag` and
the ClientApp trains nothing and sends it back as the round's error reply.

The bulletin is a folder of one write-once file per site and round, written by sites only:
in simulation the run directory's ``bulletin/`` (the server process never writes it); a
deployment needs a place every site can append to and the server cannot rewrite (a shared
folder the sites own, a transparency log, a second party: ``docs/model_checks.md``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context

from panoramia_fl.audit.received_model.consistency import BulletinEntry, consistency
from panoramia_fl.audit.received_model.digest import model_digest
from panoramia_fl.audit.received_model.plausibility import AgreedTraining, plausibility
from panoramia_fl.audit.received_model.structure import structure
from panoramia_fl.clients.site_training import TrainableTask
from panoramia_fl.contracts.files import PRIVATE_FILE_MODE, private_dir
from panoramia_fl.contracts.model_flags import (
    CheckOutcome,
    CheckRecord,
    ModelFlag,
    RoundAnnouncement,
)

PREVIOUS_MODEL = "model-checks.previous"
"""Node state: the trained parameters of the last global model the site accepted."""
PREVIOUS_ROUND = "model-checks.previous-round"


@dataclass(frozen=True)
class ModelCheckSettings:
    """What a site checks a received model against."""

    batch_size: int
    """The agreed batch size (a lone unit fires for at most one record a batch)."""
    agreed: AgreedTraining | None
    """The agreed local training (plausibility); None: the steps per round are unknown."""
    bulletin: Path | None
    """The bulletin's folder (consistency); None: no bulletin, consistency not checked."""
    min_sites: int = 1
    """The agreed number of sites per round."""
    records: int = 512
    """The site's records the structure checks run on (its first ones)."""
    refuse: bool = True
    """Refuse a flagged model; False (``record``, simulation only): log the verdict and
    train anyway, so that a run measures an attack and whether the checks see it."""
    log: Path | None = None
    """The site's own log of every check (:class:`contracts.model_flags.CheckRecord`)."""


class BulletinConflict(RuntimeError):
    """A site's entry for a round exists with another announcement (it is write-once)."""


class FileBulletin:
    """``<root>/round-<r>/site-<s>.json``, each written once by its site."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, server_round: int, site_id: int) -> Path:
        return self.root / f"round-{server_round}" / f"site-{site_id}.json"

    def publish(self, entry: BulletinEntry) -> None:
        """Write the entry; the same entry again (a resumed run) is a no-op, another one
        raises :class:`BulletinConflict`."""
        path = self.path(entry.server_round, entry.site_id)
        private_dir(path.parent)
        text = json.dumps(
            {"site_id": entry.site_id, "server_round": entry.server_round,
             "digest": entry.digest, "sites": list(entry.sites)}, sort_keys=True
        )  # fmt: skip
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        except FileExistsError:
            if path.read_text() != text:
                raise BulletinConflict(
                    f"round {entry.server_round} was announced to site {entry.site_id} twice, "
                    "with different models or sites"
                ) from None
            return
        try:
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, server_round: int) -> list[BulletinEntry]:
        folder = self.root / f"round-{server_round}"
        entries = []
        for path in sorted(folder.glob("site-*.json")) if folder.is_dir() else []:
            data = json.loads(path.read_text())
            entries.append(
                BulletinEntry(
                    site_id=int(data["site_id"]),
                    server_round=int(data["server_round"]),
                    digest=str(data["digest"]),
                    sites=tuple(int(s) for s in data["sites"]),
                )
            )
        return entries


def publish(settings: ModelCheckSettings, site_id: int, announced: RoundAnnouncement) -> None:
    """Publish the server's announcement to ``site_id`` on the bulletin (none: nothing)."""
    if settings.bulletin is None:
        return
    entry = BulletinEntry(
        site_id=site_id,
        server_round=announced.server_round,
        digest=announced.digest,
        sites=announced.sites,
    )
    FileBulletin(settings.bulletin).publish(entry)


def numpy_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a message's record, as the digest reads them."""
    return {name: array.numpy() for name, array in record.items()}


def check_received(
    settings: ModelCheckSettings,
    *,
    site_id: int,
    server_round: int,
    received: ArrayRecord,
    task: TrainableTask,
    records: np.ndarray,
    labels: np.ndarray | None,
    context: Context,
) -> ModelFlag | None:
    """Every check of the model ``received`` for ``server_round`` (the structure checks on
    the first :attr:`ModelCheckSettings.records` of the site's ``records`` and their
    ``labels``, which the task's tensors may need), logged at the
    site; the verdict when one flags it, else None. The model becomes the site's previous one unless
    the site refuses it."""
    outcomes: list[CheckOutcome] = []
    if settings.bulletin is not None:
        outcomes.append(
            consistency(
                site_id=site_id,
                server_round=server_round,
                received=model_digest(numpy_arrays(received)),
                entries=FileBulletin(settings.bulletin).read(server_round),
                min_sites=settings.min_sites,
            )
        )
    model = task.make_model()
    model.load_state_dict(received.to_torch_state_dict())
    params = {k: p.detach().cpu().numpy() for k, p in model.named_parameters()}
    previous = _previous(context)
    if settings.agreed is not None and previous is not None and previous[0] < server_round:
        checked = plausibility(
            previous[1], params, agreed=settings.agreed, rounds=server_round - previous[0]
        )
        outcomes += [checked] if checked is not None else []
    n = settings.records
    inputs = task.tensors(records[:n], None if labels is None else labels[:n])[0]
    outcomes += structure(model, inputs, batch_size=settings.batch_size)
    record = CheckRecord(site_id=site_id, server_round=server_round, outcomes=outcomes)
    refused = settings.refuse and bool(record.flagged)
    if settings.log is not None:
        _append(settings.log, replace(record, refused=refused))
    if not refused:
        _keep(context, server_round, params)
    if not record.flagged:
        return None
    return ModelFlag(site_id=site_id, server_round=server_round, flagged=record.flagged)


def _append(path: Path, record: CheckRecord) -> None:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    try:
        os.write(fd, (record.to_line() + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def _previous(context: Context) -> tuple[int, Mapping[str, np.ndarray]] | None:
    if PREVIOUS_MODEL not in context.state.array_records:
        return None
    server_round = context.state.config_records[PREVIOUS_ROUND]["round"]
    assert isinstance(server_round, int)
    return server_round, numpy_arrays(context.state.array_records[PREVIOUS_MODEL])


def _keep(context: Context, server_round: int, params: Mapping[str, np.ndarray]) -> None:
    context.state.array_records[PREVIOUS_MODEL] = ArrayRecord(
        {k: Array(np.ascontiguousarray(v)) for k, v in params.items()}
    )
    context.state.config_records[PREVIOUS_ROUND] = ConfigRecord({"round": server_round})
