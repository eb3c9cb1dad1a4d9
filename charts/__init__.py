"""Small charts as inline SVG (:mod:`charts.svg`): panels in data units, drawn to markup.

Knows nothing of privacy or reports: the reports (``reporting.pages.plots``) fill the panels.
"""
