"""Each kind of audit's part of the reports, kept in one module of its own and registered
under the kind's name.

A kind of audit is a field of :class:`audit.site_results.SiteResults`. Beside the PANORAMIA
game, the input canaries and the accountants, which every site's report is built around
(:mod:`.metrics`), a kind shows in the reports through one module: its numbers (entries of
the metric registry, :class:`.metrics.Metric`), the section of a site's page and of the
consortium's page, and their prose. That module registers its :class:`ReportPart` in
:data:`REPORT_PARTS` (``REPORT_PARTS.register("<kind>")(ReportPart(...))``), and
:data:`PART_MODULES` is the one list of them. Every reader takes the kinds from here: the
metric registry's full list (:func:`site_metrics`, :func:`metric_keys`), the ordering check
(:func:`lower_bounds`), the release gate (:func:`rebuilt_shares`), the pages
(:func:`report_parts`).

The registry lives below the pages it feeds, and its entries above them (they are laid
out with ``reporting.layout``): a lookup imports a kind's module by name when first asked,
as ``contracts.registry`` does for every registry of the project.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.registry import Registry

from ..schemas.schema import RunReport, SitePageReport
from .metrics import LOWER_BOUNDS, METRICS, Metric


@dataclass(frozen=True, kw_only=True)
class ReportPart:
    """What the reports show of one kind of audit."""

    metrics: tuple[Metric, ...] = ()
    """Each number of it a report shows, in the order a replicate set pools them; a lower
    bound on epsilon (:attr:`.metrics.Metric.checked`) joins the ordering check."""
    rebuilt: tuple[Metric, ...] = ()
    """Of :attr:`metrics`, the shares of the site's records an attack rebuilt (unit
    ``fraction``): what a release policy's ``max_rebuilt_share`` holds each to."""
    site_section: Callable[[SitePageReport], list[Any]] | None = None
    """Its section of a site's own page (blocks of ``reporting.layout.blocks``)."""
    run_section: Callable[[RunReport], list[Any]] | None = None
    """Its section of the consortium's page."""


PART_MODULES: dict[str, str] = {
    "gradient_canaries": "panoramia_fl.reporting.layout.gradient_canary_report",
    "inversion": "panoramia_fl.reporting.layout.inversion_report",
    "attribute_inference": "panoramia_fl.reporting.layout.attribute_report",
    "dishonest_server": "panoramia_fl.reporting.layout.dishonest_server_report",
}
"""Each kind's module, by the kind's name, in the order the pages show their sections: the
one list a new kind of audit adds its module to."""


def _a_kind(name: str, part: ReportPart) -> None:
    kinds = [f.name for f in dataclasses.fields(SiteResults)]
    if name not in kinds:
        raise ValueError(f"report part {name!r} names no kind of audit; kinds: {kinds}")
    if not set(part.rebuilt) <= set(part.metrics):
        raise ValueError(f"report part {name!r}: a rebuilt share must be one of its metrics")


REPORT_PARTS: Registry[ReportPart] = Registry(
    "report part", config_key="SiteResults field", builtins=PART_MODULES, check=_a_kind
)
"""Every kind's :class:`ReportPart`, by the kind's name (a field of ``SiteResults``)."""


def report_parts() -> list[ReportPart]:
    """Every kind's part: the built-in ones in :data:`PART_MODULES`' order, then any other
    registered (imports each kind's module on first use)."""
    return [
        REPORT_PARTS.get(name) for name in dict.fromkeys([*PART_MODULES, *REPORT_PARTS.names()])
    ]


def site_metrics() -> tuple[Metric, ...]:
    """Every number of a site the reports show: :data:`.metrics.METRICS`, then each kind's."""
    return (*METRICS, *(m for part in report_parts() for m in part.metrics))


def metric_keys() -> dict[str, Metric]:
    """Every number of :func:`site_metrics` by its key (what a release policy names)."""
    return {m.key: m for m in site_metrics()}


def lower_bounds() -> tuple[Metric, ...]:
    """The measured lower bounds on epsilon, in the order the ordering check lists its
    violations: :data:`.metrics.LOWER_BOUNDS`, then each kind's."""
    return (
        *LOWER_BOUNDS,
        *(m for part in report_parts() for m in part.metrics if m.checked is not None),
    )


def rebuilt_shares() -> tuple[Metric, ...]:
    """The shares of a site's records an attack rebuilt, every kind's."""
    return tuple(m for part in report_parts() for m in part.rebuilt)
