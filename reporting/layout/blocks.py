"""A report's sections as blocks, laid out once and rendered to Markdown (:func:`to_markdown`)
and to HTML (:func:`to_html`): a section added to a report shows in both formats.

A block marked ``only="html"`` (a figure, a note on hovering) or ``only="md"`` is left out
of the other format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..numbers.meanings import MEANING_POINTS
from ..pages.html_page import esc
from ..schemas.lost_sites import LOST_HEADLINE
from .banners import CHANCE_FLAGS_HEADLINE, UNTRAINED_HEADLINE, VIOLATION_HEADLINE
from .columns import Column, ColumnGroup, html_table, md_table, md_text

Format = Literal["md", "html"]


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2
    only: Format | None = None


@dataclass(frozen=True)
class Para:
    text: str
    only: Format | None = None


@dataclass(frozen=True)
class Bullets:
    items: Sequence[str]
    only: Format | None = None
    ordered: bool = False


@dataclass(frozen=True)
class Errors:
    """Items ``label: error text``; the error text is set as code in HTML."""

    items: Sequence[tuple[str, str]]
    only: Format | None = None


@dataclass(frozen=True)
class Table:
    columns: Sequence[Column[Any]]
    rows: Sequence[Any]
    attrs: str = ""
    """On ``<table>`` (an id, a class)."""
    row_class: Callable[[Any], str | None] | None = None
    row_title: Callable[[Any], str | None] | None = None
    wide: bool = False
    """Scrolls sideways in HTML instead of widening the page."""
    only: Format | None = None


@dataclass(frozen=True)
class Figure:
    """An inline SVG plot with its caption (HTML only: Markdown has no plots)."""

    svg: str | None
    caption: str
    alt: str
    only: Format | None = "html"


@dataclass(frozen=True)
class Banner:
    """Loud lines at the top: sites the run lost, rounds that aggregated nothing, bound
    violations, or the canaries a model trained with."""

    kind: Literal["lost", "untrained", "violation", "chance_flags", "canaries"]
    lines: Sequence[str]
    only: Format | None = None


@dataclass(frozen=True)
class Meaning:
    """What eps_tilde means and does not mean (folded in HTML)."""

    only: Format | None = None


@dataclass(frozen=True)
class Raw:
    """Markup a renderer built itself, its input text escaped (HTML only)."""

    html: str
    only: Format | None = "html"


@dataclass(frozen=True)
class Fold:
    """Blocks folded under a one-line summary (HTML only)."""

    summary: str
    blocks: Sequence[Block]
    only: Format | None = "html"


Block = Heading | Para | Bullets | Errors | Table | Figure | Banner | Meaning | Raw | Fold


def grouped_table(
    groups: Sequence[ColumnGroup[Any]],
    rows: Sequence[Any],
    *,
    attrs: str = "",
    row_class: Callable[[Any], str | None] | None = None,
    row_title: Callable[[Any], str | None] | None = None,
) -> list[Block]:
    """A wide table in HTML: its first group as a table, each further group folded under
    its title (``attrs`` go on the first)."""
    lead, *rest = groups

    def table(columns: Sequence[Column[Any]], table_attrs: str = "") -> Table:
        return Table(columns, rows, table_attrs, row_class, row_title, wide=True, only="html")

    return [table(lead.columns, attrs), *(Fold(g.title, [table(g.columns)]) for g in rest)]


MEANING_HEADING = "What eps_tilde means (read before drawing conclusions)"


def to_markdown(blocks: Sequence[Block]) -> str:
    """The Markdown text of the blocks (``only="html"`` ones left out)."""
    lines: list[str] = []
    for block in blocks:
        if block.only != "html":
            lines += _markdown(block)
    return "\n".join(lines)


def _markdown(block: Block) -> list[str]:
    match block:
        case Heading(text, level):
            return ["#" * level + " " + text, ""]
        case Para(text):
            return [md_text(text), ""]
        case Bullets(items):
            return [*(f"- {md_text(x)}" for x in items), ""] if items else []
        case Errors(items):
            return [*(f"- {label}: {md_text(text)}" for label, text in items), ""] if items else []
        case Table(columns, rows):
            return [*md_table(columns, rows), ""]
        case Banner("lost", lines) if lines:
            return [f"> **{LOST_HEADLINE}**", ">", *(f"> - {md_text(x)}" for x in lines), ""]
        case Banner("untrained", lines) if lines:
            return [*(f"> **{UNTRAINED_HEADLINE}** {md_text(x)}" for x in lines), ""]
        case Banner("violation", lines) if lines:
            return [f"> **{VIOLATION_HEADLINE}**", ">", *(f"> - {md_text(x)}" for x in lines), ""]
        case Banner("chance_flags", lines) if lines:
            head = CHANCE_FLAGS_HEADLINE
            return [f"> **{head}**", ">", *(f"> - {md_text(x)}" for x in lines), ""]
        case Banner("canaries", lines) if lines:
            return [*(f"> **Canaries.** {md_text(x)}" for x in lines), ""]
        case Meaning():
            return ["## " + MEANING_HEADING, "", *_markdown(Bullets(MEANING_POINTS))]
    return []


def to_html(blocks: Sequence[Block]) -> list[str]:
    """The HTML body parts of the blocks (``only="md"`` ones left out)."""
    return [_html(block) for block in blocks if block.only != "md"]


def _lis(items: Sequence[str]) -> str:
    return "".join(f"<li>{esc(x)}</li>" for x in items)


def _alert(headline: str, rest: str) -> str:
    return f'<div class="violation" role="alert"><strong>{esc(headline)}</strong>{rest}</div>'


def _html(block: Block) -> str:
    match block:
        case Heading(text, level):
            return f"<h{level}>{esc(text)}</h{level}>"
        case Para(text):
            return f"<p>{esc(text)}</p>"
        case Bullets(items, _, ordered):
            tag = "ol" if ordered else "ul"
            return f"<{tag}>{_lis(items)}</{tag}>" if items else ""
        case Errors(items):
            lis = "".join(
                f'<li>{esc(label)}: <span class="error">{esc(text)}</span></li>'
                for label, text in items
            )
            return f"<ul>{lis}</ul>" if items else ""
        case Table(columns, rows, attrs, row_class, row_title, wide):
            table = html_table(
                columns,
                rows,
                attrs=attrs,
                row_class=row_class or (lambda row: None),
                row_title=row_title or (lambda row: None),
            )
            return f'<div class="wide">{table}</div>' if wide else table
        case Figure(None, _, alt):
            return f"<p><em>{esc(alt)}: no data to plot.</em></p>"
        case Figure(svg, caption, alt):
            # role="img" and the label name the plot to screen readers.
            return (
                f'<figure><div class="plot" role="img" aria-label="{esc(alt)}">{svg}</div>'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
        case Banner("lost", lines):
            return _alert(LOST_HEADLINE, f"<ul>{_lis(lines)}</ul>") if lines else ""
        case Banner("untrained", lines):
            return "".join(_alert(UNTRAINED_HEADLINE, f" {esc(x)}") for x in lines)
        case Banner("violation", lines):
            return _alert(VIOLATION_HEADLINE, f"<ul>{_lis(lines)}</ul>") if lines else ""
        case Banner("chance_flags", lines):
            return _alert(CHANCE_FLAGS_HEADLINE, f"<ul>{_lis(lines)}</ul>") if lines else ""
        case Banner("canaries", lines):
            return "".join(
                f'<div class="canaries"><strong>Canaries.</strong> {esc(x)}</div>' for x in lines
            )
        case Meaning():
            # Folded: the numbers come first, the explanation one click away.
            return (
                '<details class="meaning"><summary><strong>What eps_tilde means and does not '
                "mean</strong> (read before drawing conclusions)</summary>"
                f"<ul>{_lis(MEANING_POINTS)}</ul></details>"
            )
        case Raw(markup):
            return markup
        case Fold(summary, blocks):
            inner = "".join(_html(b) for b in blocks)
            return f'<details class="fold"><summary>{esc(summary)}</summary>{inner}</details>'
    return ""
