"""Sweeps and replicate sets: their reports, tables, figures and what each party can measure."""
