"""Input canaries: made-up records for the one-run audit (``audit.input_canaries``;
simulation only).

Each site gets ``n`` made-up records that no real record equals, and an independent fair
coin per canary that says whether the site trains on it. After training, the site's audit
guesses the coins from the final model's losses
(:func:`audit.canaries.input_canaries.input_canary_audit`): the ground truth that
PANORAMIA's estimates can be read against.

The coins come from their own random stream, seeded by ``(seed, site_id)`` only and drawn
before the contents (which come from another stream). So the coins depend on nothing else:
not on the partition, the data, the audit settings or what the canaries look like; the
one-run audit's guarantee needs exactly that.

Canaries per modality, chosen to be easy to memorise and unlike the real records:

- image (``noise_image``): uniform pixel noise over the dataset's value range, in its dtype,
  with uniformly random labels;
- tabular (``rare_row``): every attribute at a rarely seen value (one of the least frequent
  levels of a categorical, an extreme quantile of a numeric column), labelled with the class
  a plain logistic regression on the dataset finds least likely for the row;
- text (``random_tokens``): chunks of uniformly random token ids of the vocabulary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from panoramia_fl.contracts.tabular_schema import (
    Attribute,
    attributes_from_schema,
    infer_attributes,
)
from panoramia_fl.ml.datasets import Dataset

__all__ = ["INPUT_CANARY_KINDS", "InputCanarySet", "input_canary_coins", "draw_input_canaries"]

INPUT_CANARY_KINDS = {"image": "noise_image", "tabular": "rare_row", "text": "random_tokens"}
"""The canary kind of each modality."""

_COIN_STREAM = 0xC0125
"""Fixed stream constants: the coins and the contents never share a generator."""
_CONTENT_STREAM = 0xC0A7E
_TAIL = 0.01
"""Numeric columns: canary values lie in the lowest or the highest 1% of the column."""
_RARE_LEVELS = 0.25
"""Categorical columns: canary levels are the least frequent quarter of the levels (>= 1)."""
_MAX_REDRAWS = 50

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray | None]]


@dataclass(frozen=True)
class InputCanarySet:
    """One site's canaries: records, labels (``None`` for text) and their coins."""

    x: np.ndarray
    y: np.ndarray | None
    included: np.ndarray
    """Bool, one independent fair coin per canary: true where the site trains on it."""
    kind: str

    def __len__(self) -> int:
        return int(len(self.x))


def input_canary_coins(n: int, *, seed: int, site_id: int) -> np.ndarray:
    """The ``n`` inclusion coins of a site: independent fair coins from ``(seed, site_id)``."""
    rng = np.random.default_rng([seed, site_id, _COIN_STREAM])
    return rng.integers(0, 2, size=n).astype(bool)


def draw_input_canaries(dataset: Dataset, n: int, *, seed: int, site_id: int) -> InputCanarySet:
    """Draw ``n`` canaries of ``dataset``'s modality and their coins for one site.

    Parameters
    ----------
    dataset
        The dataset the sites draw from: the canaries take its record format, and no
        canary equals one of its records (pool or public) or another canary.
    n
        Number of canaries (at least 1).
    seed, site_id
        The run's seed and the site: the coins depend on these two only.

    Returns
    -------
    InputCanarySet
        Records in the dtype and shape of ``dataset.x``; coins drawn before the contents.
    """
    if n < 1:
        raise ValueError(f"number of canaries must be at least 1, got {n!r}")
    modality = dataset.modality
    if modality not in INPUT_CANARY_KINDS:
        raise ValueError(
            f"no canaries for modality {modality!r}; known: {sorted(INPUT_CANARY_KINDS)}"
        )
    # Coins first, from their own generator: nothing drawn below can change them.
    included = input_canary_coins(n, seed=seed, site_id=site_id)
    rng = np.random.default_rng([seed, site_id, _CONTENT_STREAM])
    draw = {"image": _image_draw, "tabular": _tabular_draw, "text": _text_draw}[modality]
    x, y = _distinct(draw(dataset), rng, n, dataset)
    return InputCanarySet(x=x, y=y, included=included, kind=INPUT_CANARY_KINDS[modality])


# -- per modality ---------------------------------------------------------------------


def _image_draw(dataset: Dataset) -> Draw:
    lo, hi = dataset.x.min(), dataset.x.max()
    shape = dataset.x.shape[1:]
    dtype = dataset.x.dtype

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        if np.issubdtype(dtype, np.integer):
            x = rng.integers(int(lo), int(hi), size=(k, *shape), endpoint=True, dtype=dtype)
        else:
            x = rng.uniform(float(lo), float(hi), size=(k, *shape)).astype(dtype)
        return x, rng.integers(0, dataset.num_classes, size=k).astype(np.int64)

    return draw


def _text_draw(dataset: Dataset) -> Draw:
    length = dataset.x.shape[1]
    # The compact vocabulary's ids are 0 .. num_classes - 1 (the LM's output classes).
    vocab = dataset.num_classes

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        return rng.integers(0, vocab, size=(k, length)).astype(dataset.x.dtype), None

    return draw


def _tabular_draw(dataset: Dataset) -> Draw:
    from sklearn.linear_model import LogisticRegression

    x_pool = np.asarray(dataset.x)
    schema = dataset.info.get("schema")
    attributes = (
        attributes_from_schema(schema, x_pool.shape[1])
        if schema is not None
        else infer_attributes(x_pool)
    )
    fillers = [_rare_values(attr, x_pool) for attr in attributes]
    # "Not the label a plain model would predict": the class a linear model fitted on the
    # dataset finds least likely for the canary row.
    plain = LogisticRegression(max_iter=1000).fit(x_pool, dataset.y)

    def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        x = np.zeros((k, x_pool.shape[1]), dtype=x_pool.dtype)
        for attr, fill in zip(attributes, fillers, strict=True):
            x[:, attr.columns] = fill(rng, k)
        least_likely = plain.classes_[np.argmin(plain.predict_proba(x), axis=1)]
        return x, least_likely.astype(np.int64)

    return draw


def _rare_values(
    attr: Attribute, x_pool: np.ndarray
) -> Callable[[np.random.Generator, int], np.ndarray]:
    """``fill(rng, k) -> (k, width)``: rarely seen values of one attribute."""
    block = x_pool[:, attr.columns]
    if attr.kind == "onehot":
        counts = (block > 0.5).sum(axis=0)
        n_rare = max(1, int(np.ceil(_RARE_LEVELS * attr.width)))
        rare = np.argsort(counts, kind="stable")[:n_rare]
        eye = np.eye(attr.width, dtype=x_pool.dtype)
        return lambda rng, k: eye[rng.choice(rare, size=k)]
    column = block[:, 0]

    def fill(rng: np.random.Generator, k: int) -> np.ndarray:
        # An extreme quantile, on the low or the high side by a coin of the content stream.
        q = rng.uniform(0.0, _TAIL, size=k)
        q = np.where(rng.random(k) < 0.5, q, 1.0 - q)
        return np.quantile(column, q, method="inverted_cdf").astype(x_pool.dtype)[:, None]

    return fill


# -- no canary equals a real record or another canary -----------------------------------


def _row_digests(x: np.ndarray) -> list[bytes]:
    rows = np.ascontiguousarray(x).reshape(len(x), -1)
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


def _distinct(
    draw: Draw, rng: np.random.Generator, n: int, dataset: Dataset
) -> tuple[np.ndarray, np.ndarray | None]:
    """Draw ``n`` canaries, redrawing any whose record equals a real one or an earlier one."""
    seen = set(_row_digests(dataset.x))
    if dataset.public_x is not None:
        seen.update(_row_digests(np.asarray(dataset.public_x, dtype=dataset.x.dtype)))
    x, y = draw(rng, n)
    todo = np.arange(n)
    for _ in range(_MAX_REDRAWS):
        clash = []
        for i, digest in zip(todo, _row_digests(x[todo]), strict=True):
            if digest in seen:
                clash.append(i)
            else:
                seen.add(digest)
        if not clash:
            return x, y
        todo = np.asarray(clash)
        new_x, new_y = draw(rng, len(todo))
        x[todo] = new_x
        if y is not None and new_y is not None:
            y[todo] = new_y
    raise ValueError(
        f"could not draw {n} distinct canaries unlike every record of {dataset.name!r} "
        f"({len(todo)} still clash after {_MAX_REDRAWS} redraws): ask for fewer canaries"
    )
