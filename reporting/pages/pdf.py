"""Printing a page to PDF with headless Chromium (``--print-to-pdf``).

Chromium lays out the very HTML the reports are (inline CSS and SVG, nothing loaded from
outside) and honours the page's ``@page`` size, so the PDF is the page as a browser shows
it; the test suite already uses it to check the pages (``make browser`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.files import atomic_write

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""The executables tried, in order."""
TIMEOUT_S = 180


class PdfError(UserError):
    """The PDF cannot be printed: no Chromium, or Chromium failed (the message says)."""


def chromium() -> str:
    """Chromium's executable; a :class:`PdfError` naming what to install without one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise PdfError(
        "--pdf: the evidence pack is printed by headless Chromium, which is not installed: "
        "install it with `sudo apt-get install chromium` (or `make browser`)"
    )


def print_pdf(html: str, out: Path) -> Path:
    """``html`` (a self-contained page) printed to ``out`` as PDF, written atomically."""
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="panoramia-pdf-") as tmp:
        page, pdf = Path(tmp) / "pack.html", Path(tmp) / "pack.pdf"
        page.write_text(html, encoding="utf-8")
        command = [
            browser,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--no-pdf-header-footer",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--print-to-pdf={pdf}",
            page.as_uri(),
        ]
        if os.geteuid() == 0:
            # Chromium's sandbox refuses root; the page is ours and loads nothing.
            command.insert(1, "--no-sandbox")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise PdfError(f"{browser} did not print {out.name} within {TIMEOUT_S} s") from None
        if done.returncode != 0 or not pdf.is_file() or pdf.stat().st_size == 0:
            raise PdfError(
                f"{browser} could not print {out.name} (exit {done.returncode}): "
                f"{done.stderr.strip()[-500:]}"
            )
        return atomic_write(out, lambda fh: fh.write(pdf.read_bytes()))
