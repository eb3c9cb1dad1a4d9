"""A site's audit, the one type both sides of a run agree on: what the site's reply carries
(:class:`SiteAudit`; its Flower record form is :func:`contracts.wire.audit_record`) and what
the server keeps of it in ``audits/site-<id>.json`` (:class:`SiteAuditFile`: the same plus
the outcome and the round of the model audited). Both are written by
:func:`contracts.json_values.json_safe` and read by :func:`contracts.json_values.from_dict`.

The audit's results are a type parameter, ``K``: a dataclass with one field per kind of audit
a site can run, each None or empty when it did not run (``audit.site_results.SiteResults``
in this project). Its keys sit beside the site's sizes in the JSON (:data:`INLINE`), as they
always have, so contracts need not know the audit's types and a new kind of audit is a new
field of ``K`` alone: its name is its key in the file and, as ``<name>-json``, in the reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Generic, Literal, TypeVar

from panoramia_fl.contracts.json_values import INLINE

K = TypeVar("K")
"""The audit's results: a dataclass of the kinds of audit, each optional."""

SiteAuditStatus = Literal["ok", "failed"]


@dataclass(frozen=True, kw_only=True)
class SiteAudit(Generic[K]):
    """A site's finished audit: summary numbers and curves, never records.

    The sizes and time are None only in an audit file of a site whose audit failed (and in
    files older than them); a reply always has them (:func:`contracts.wire.audit_reply`).
    """

    site_id: int
    n_members: int | None = None
    """The site's members (its training records) the audit played."""
    n_holdout: int | None = None
    """The site's real held-out records (RM;RN's and O(1)'s non-members)."""
    elapsed_s: float | None = None
    """Wall time of the site's audit."""
    dp_epsilon: float | None = None
    """The site's record-level (Opacus) epsilon; None without record-level DP."""
    results: K = field(metadata=INLINE)
    """Each kind of audit the site ran."""


@dataclass(frozen=True, kw_only=True)
class SiteAuditFile(SiteAudit[K]):
    """``audits/site-<id>.json``: a site's audit as the server received it, with its outcome.

    An ``ok`` file holds the site's audit (``results`` with its main audit, ``result``); a
    ``failed`` one the error, the site's short traceback when it sent one, and empty
    results. Both say the round of the global model audited, when known (files older than
    it count as current).
    """

    status: SiteAuditStatus
    error: str | None = None
    traceback: str | None = None
    model_round: int | None = None

    @classmethod
    def of(cls, audit: SiteAudit[K], *, model_round: int) -> SiteAuditFile[K]:
        """The ``ok`` file of a site's audit of round ``model_round``'s model."""
        sent = {f.name: getattr(audit, f.name) for f in fields(audit)}
        return cls(**sent, status="ok", model_round=model_round)

    @property
    def ok(self) -> bool:
        return self.status == "ok"
