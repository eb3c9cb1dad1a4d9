"""A site's side of the ideal secure sum (``fl.secure_aggregation: ideal``).

After training (:func:`commit`) the site keeps its update of the round, in float64, and a
fresh X25519 key pair (from the OS's entropy) in its own state directory, and sends only the
public key. Told which sites' updates go into the sum and their keys
(:class:`~contracts.secure_sum.SecureSumInstructions`), it weights its update, writes it in
fixed point (:data:`~contracts.secure_sum.FIXED_POINT_BITS`) and adds, for every other site
``j``, the mask that both derive from their shared X25519 secret (HKDF-SHA256, then a
ChaCha20 key stream of 64-bit words): ``+mask`` when its id is below ``j``'s, ``-mask``
otherwise, modulo ``2**64`` (:func:`masked_update`). Alone, a masked update is uniformly
random to whoever lacks the secrets; in the sum of all the sites named, every mask cancels
exactly, so the server reads the weighted sum and nothing else.

The masks do not touch the result (they cancel bit for bit), so they come from the OS's
entropy in simulations too; the sum stays reproducible.

This is the guarantee against an honest-but-curious server, not a deployable protocol: the
keys are not authenticated (a server that answers with keys of its own could unmask), a site
that drops between the two steps voids the round (no recovery of its masks), and nothing
stops a site from sending any values. Hence ``ideal``, and deployments refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.run_files import secure_sum_state_name
from panoramia_fl.contracts.secure_sum import (
    FIXED_POINT_BITS,
    MIN_PARTIES,
    SecureSumInstructions,
    SecureSumKey,
    max_abs_value,
)

_STATE_VERSION = 1
_CONTEXT = b"panoramia-fl secure sum"


class SecureSumError(RuntimeError):
    """A site will not send its masked update (the reason says why)."""


@dataclass(frozen=True)
class SecureSumSettings:
    """Where a site keeps its update between the two steps of a secure sum."""

    site_id: int
    state_dir: Path
    """The site's own folder (never sent)."""

    @property
    def path(self) -> Path:
        return self.state_dir / secure_sum_state_name(self.site_id)


def commit(
    settings: SecureSumSettings,
    server_round: int,
    update: dict[str, np.ndarray],
    weights: dict[str, float],
) -> SecureSumKey:
    """Keep the round's ``update`` (name -> float64 array, the global weights' names and
    shapes), the weights it may be asked to use (train-reply key -> value) and a fresh key
    pair; return the public key to send."""
    private = X25519PrivateKey.generate()
    kept = {
        "version": _STATE_VERSION,
        "round": server_round,
        "private_key": private.private_bytes_raw(),
        "weights": dict(weights),
        "update": {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in update.items()},
    }
    # Site-local, durable before the reply leaves: the update never goes out in the clear.
    atomic_write(settings.path, lambda f: torch.save(kept, f), private=True)
    return SecureSumKey(public_key=private.public_key().public_bytes_raw())


def masked_update(
    settings: SecureSumSettings, asked: SecureSumInstructions
) -> dict[str, np.ndarray]:
    """The site's weighted update in fixed point plus its pairwise masks (``uint64``), for
    the sum of exactly the sites ``asked`` names; the kept update is then removed.

    Raises
    ------
    SecureSumError
        When the site kept no update of that round, is not among the sites named, would be
        summed with no other site, or its weighted update is too large for the fixed point.
    """
    kept = _kept(settings, asked.server_round)
    me = settings.site_id
    if me not in asked.peers:
        raise SecureSumError(f"site {me} is not among the sites of the sum {sorted(asked.peers)}")
    if len(asked.peers) < MIN_PARTIES:
        raise SecureSumError(
            f"a sum of {len(asked.peers)} update would reveal it; at least {MIN_PARTIES} needed"
        )
    private = X25519PrivateKey.from_private_bytes(kept["private_key"])
    if asked.peers[me] != private.public_key().public_bytes_raw():
        raise SecureSumError(f"the key listed for site {me} is not the one it sent")
    weight = float(kept["weights"][asked.weight_key])
    update = {k: v.numpy() * weight for k, v in kept["update"].items()}
    largest = max((float(np.abs(v).max()) for v in update.values() if v.size), default=0.0)
    if largest > max_abs_value(len(asked.peers)):
        raise SecureSumError(
            f"a weighted update value of {largest:.3g} is beyond the fixed point's range "
            f"({max_abs_value(len(asked.peers)):.3g} for {len(asked.peers)} sites)"
        )
    encoded = encode(update)
    size = sum(v.size for v in encoded.values())
    total = np.zeros(size, dtype=np.uint64)
    for peer, public in sorted(asked.peers.items()):
        if peer == me:
            continue
        pair = (me, peer)
        mask = pair_mask(private, public, server_round=asked.server_round, sites=pair, size=size)
        total = total + mask if me < peer else total - mask
    out, start = {}, 0
    for name, values in encoded.items():
        # asarray: a 0-d entry (BatchNorm's batch count) would come out a numpy scalar,
        # which no Flower Array holds.
        out[name] = np.asarray(values + total[start : start + values.size].reshape(values.shape))
        start += values.size
    settings.path.unlink()
    return out


def encode(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Fixed point modulo ``2**64``: ``round(v * 2**FIXED_POINT_BITS)`` as ``uint64``."""
    scale = float(2**FIXED_POINT_BITS)
    return {k: np.rint(v * scale).astype(np.int64).view(np.uint64) for k, v in values.items()}


def pair_mask(
    private: X25519PrivateKey,
    peer_public: bytes,
    *,
    server_round: int,
    sites: tuple[int, int],
    size: int,
) -> np.ndarray:
    """The ``size`` 64-bit words both sites of a pair derive from their shared secret."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    low, high = sorted(sites)
    info = b"|".join([_CONTEXT, *(str(x).encode() for x in (server_round, low, high))])
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    # One key per pair and round, used once: a zero nonce is safe.
    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return np.frombuffer(stream.update(bytes(8 * size)), dtype="<u8").astype(np.uint64)


def _kept(settings: SecureSumSettings, server_round: int) -> dict:
    if not settings.path.exists():
        raise SecureSumError(f"site {settings.site_id} kept no update of round {server_round}")
    kept = torch.load(settings.path, weights_only=True)
    if kept.get("version") != _STATE_VERSION or kept.get("round") != server_round:
        raise SecureSumError(
            f"site {settings.site_id} kept the update of round {kept.get('round')}, "
            f"not of round {server_round}"
        )
    return kept
