"""Flower ServerApp side: strategy, rounds, checkpoints and the audit phase's fan-out.

The server never sees raw client records: it exchanges weights, metrics and audit summaries.
"""
