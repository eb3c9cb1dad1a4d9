"""Keys of the records exchanged between the ServerApp and the ClientApps."""

UNIT_WEIGHT = "unit-weight"
"""A train reply's weight 1: under client-level DP the aggregate is a uniform mean, which
is what Flower's noise (``z * C / k``) is calibrated for."""

CANARY_JSON = "canary-json"
"""An audit reply's canary one-run audit (``audit.canary.CanaryResult.to_dict`` as JSON)."""

CLIENT_CLIPPING = "client-clipping"
"""A train config's ``fixed`` / ``adaptive``: the site runs Flower's clipping mod of that
kind on its update (client-level DP with ``dp.client.clipping_side: client``)."""
