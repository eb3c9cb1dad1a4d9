"""Keys of the records exchanged between the ServerApp and the ClientApps."""

UNIT_WEIGHT = "unit-weight"
"""A train reply's weight 1: under client-level DP the aggregate is a uniform mean, which
is what Flower's noise (``z * C / k``) is calibrated for."""

CANARY_JSON = "canary-json"
"""An audit reply's canary one-run audit (``audit.canary.CanaryResult.to_dict`` as JSON)."""

CLIENT_CLIPPING = "client-clipping"
"""A train config's ``fixed`` / ``adaptive``: the site runs Flower's clipping mod of that
kind on its update (client-level DP with ``dp.client.clipping_side: client``)."""


def scalar(value: object) -> int | float | str | bytes:
    """A record value the other side sent as one number, string or bytes.

    Flower types a record's values as scalars or lists (or arrays); the keys exchanged here
    hold scalars, so this narrows the value for ``int()`` / ``float()`` / ``str()``.
    """
    if isinstance(value, int | float | str | bytes):
        return value
    raise TypeError(f"expected a scalar record value, got {type(value).__name__}")
