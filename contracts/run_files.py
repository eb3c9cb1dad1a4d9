"""Files of a run directory that one side writes and another reads."""

CLIENT_DP_LEDGER = "client_dp.json"
"""The server's client-level DP ledger (``server.client_dp``), read by the report."""
