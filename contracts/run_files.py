"""Files of a run directory that one side writes and another reads."""

CONFIG_FILE = "config.yaml"
"""The resolved experiment config (written by the harness, read by the report)."""

CLIENT_DP_LEDGER = "client_dp.json"
"""The server's client-level DP ledger (``server.client_dp``), read by the report."""

SITE_STATE_DIR = "site_state"
"""Simulated sites' own files (site-local in a real deployment; the server never reads them)."""


def exposed_records_name(site_id: int) -> str:
    """The site's most exposed members (``audit.exposed_records``), in its state directory.

    Written by the site; the site's report only links it, never reads it.
    """
    return f"site-{site_id}-exposed-records.json"
