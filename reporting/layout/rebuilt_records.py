"""The section of a site's own page for an attack that rebuilds the site's records (the
inversion audit, a dishonest server): what came back, how to read it, one row per attacked
round, and the site's own gallery, linked from the page (never inlined, never sent)."""

from __future__ import annotations

from dataclasses import dataclass

from ..pages.html_page import esc
from .blocks import Block, Heading, Para, Raw, Table


@dataclass(frozen=True)
class Gallery:
    """What the site-local image of its records beside the attack's rebuilds shows."""

    alt: str
    caption: str
    """What the image shows (the link follows it)."""


def rebuilt_records_section(
    *,
    heading: str,
    sentence: str,
    how_to_read: str,
    table: Table,
    gallery: Gallery,
    link: str | None,
) -> list[Block]:
    """The attack's section: its heading, its sentence, how to read it, its table and, when
    the site kept one (``link``: where), its gallery."""
    blocks: list[Block] = [
        Heading(heading),
        Para(sentence),
        Para(f"How to read it: {how_to_read}."),
        table,
    ]
    if link is not None:
        href = esc(link)
        blocks.append(
            Raw(
                f'<figure class="site-local"><img src="{href}" alt="{gallery.alt}">'
                f'<figcaption>{gallery.caption} <a href="{href}">{href}</a></figcaption>'
                "</figure>"
            )
        )
    return blocks
