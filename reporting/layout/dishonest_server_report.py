"""What a dishonest server (``fl.adversary``, simulations only) rebuilt of a site's
records, in the reports: its plain sentence, its rows and section on the site's own page
(its part of the reports, :data:`~.report_parts.REPORT_PARTS`). Its number is an entry of
:mod:`..numbers.metrics` (the consortium's and the sweeps' tables name it too)."""

from __future__ import annotations

from panoramia_fl.contracts.held_rounds import DishonestServerResult

from ..numbers.formatting import MISSING
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import DISHONEST_SERVER
from ..numbers.report_parts import REPORT_PARTS, ReportPart
from ..schemas.schema import SitePageReport
from .blocks import Block, Table
from .columns import Column, column
from .rebuilt_records import Gallery, rebuilt_records_section


def dishonest_server_sentence(result: DishonestServerResult) -> str:
    """One plain sentence: what the dishonest server rebuilt in that round."""
    held = (
        "the round's sum, which its different models made your update"
        if result.server_held == "sum"
        else "your update"
    )
    if result.share_rebuilt is None:
        return (
            f"In round {result.round} the server sent you the real model and every other "
            f"site a model whose update is zero ({result.attack}), and held {held}: its "
            "audits of your update below read what it held."
        )
    what = "images" if result.measure == "ssim" else "records"
    how = "" if result.attack == result.decoded else f" ({result.attack})"
    return (
        f"In round {result.round} the server sent you {result.decoded} weights{how} and, from "
        f"{held}, rebuilt {result.share_rebuilt:.0%} of the {result.n_records:,} {what} your "
        f"update came from, against {result.baseline_share_rebuilt or 0:.0%} from an update "
        f"of public records. Your checks of the model you received: {result.site_checks}."
    )


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _share(share: float | None) -> str:
    return MISSING if share is None else _pct(share)


DISHONEST_SERVER_COLUMNS: tuple[Column[DishonestServerResult], ...] = (
    column("round", lambda r: str(r.round)),
    column("attack (model decoded)", lambda r: f"{r.attack} ({r.decoded or 'none'})", cls="text"),
    column(
        "the server held",
        lambda r: "the round's sum" if r.server_held == "sum" else "your update",
        cls="text",
    ),
    column(
        "records in the update / rows returned", lambda r: f"{r.n_records:,} / {r.n_returned:,}"
    ),
    column("rebuilt", lambda r: _share(r.share_rebuilt)),
    column("baseline (public records)", lambda r: _share(r.baseline_share_rebuilt)),
    column(
        "looser (images: SSIM >= 0.6; rows: categories right)",
        lambda r: _share(r.share_rebuilt_loose),
    ),
    column("your checks of the model received", lambda r: r.site_checks, cls="text"),
)
"""What a dishonest server rebuilt of a site's records, one row per attacked round (its own
page)."""


def dishonest_server_section(report: SitePageReport) -> list[Block]:
    """What the run's dishonest server (fl.adversary) rebuilt of the site's records."""
    results = report.site.results.dishonest_server
    if not results:
        return []
    return rebuilt_records_section(
        heading="What a server that does not play fair could rebuild",
        sentence=" ".join(dishonest_server_sentence(r) for r in results),
        how_to_read=NOTES[Note.DISHONEST_SERVER],
        table=Table(DISHONEST_SERVER_COLUMNS, results, attrs=' id="dishonest-server"'),
        link=report.rebuilt_gallery_link,
        gallery=Gallery(
            alt="your records beside what the server rebuilt of them",
            caption="Your site's own thumbnails (site-local, linked, never sent): the records "
            "of the first attacked round that came back best, each as original | the "
            "server's rebuild.",
        ),
    )


REPORT_PARTS.register("dishonest_server")(
    ReportPart(
        metrics=(DISHONEST_SERVER,),
        rebuilt=(DISHONEST_SERVER,),
        site_section=dishonest_server_section,
    )
)
