"""Page primitives: self-contained HTML (inline CSS, the sort script), SVG plots, printing to
PDF."""
