"""MST-style synthetic tables: select, measure, generate on a tree of 2-way marginals.

Select: every pair of attributes (label included) is weighted by its mutual information on
the training table and the maximum spanning tree of that graph is kept (Chow-Liu; MST of
McKenna et al. 2021 picks the tree the same way, privately).
Measure: the 1-way marginal of every attribute and the 2-way marginal of every tree edge
are counted and perturbed with Gaussian noise whose scale follows from a zCDP budget
``rho(epsilon, delta)`` shared equally by the measurements.
Generate: for a tree-structured graphical model the maximum-likelihood distribution given
its edge marginals is ``p(root) * prod p(child | parent)``, so no iterative estimation is
needed: draw the root (the label) from its noisy 1-way marginal, then each attribute from the
noisy conditional of its edge, in breadth-first order. Negative noisy counts are clipped;
a parent level with no mass in an edge table falls back to the child's 1-way marginal.

Privacy: only the measurements are noisy. The tree selection and the bin edges of
continuous columns read the data directly, so this generator is NOT differentially
private; PANORAMIA does not need it to be (the paper runs MST at epsilon = 1000), and
``epsilon`` only sets how noisy the marginals are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def zcdp_rho(epsilon: float, delta: float) -> float:
    """zCDP parameter rho whose (epsilon, delta)-DP conversion gives ``epsilon``.

    Uses eps = rho + 2 sqrt(rho log(1/delta)) (Bun and Steinke 2016), solved for rho.
    """
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    log_term = math.log(1.0 / delta)
    return (math.sqrt(epsilon + log_term) - math.sqrt(log_term)) ** 2


def joint_counts(a: np.ndarray, b: np.ndarray, size_a: int, size_b: int) -> np.ndarray:
    """Contingency table ``(size_a, size_b)`` of two code columns."""
    return np.bincount(a * size_b + b, minlength=size_a * size_b).reshape(size_a, size_b)


def mutual_information(counts: np.ndarray) -> float:
    """Mutual information (nats) of the empirical distribution of a contingency table."""
    total = counts.sum()
    if total <= 0:
        return 0.0
    p = counts / total
    pa, pb = p.sum(axis=1, keepdims=True), p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log(p[nz] / (pa @ pb)[nz])).sum())


def maximum_spanning_tree(weights: np.ndarray) -> list[tuple[int, int]]:
    """Edges of a maximum spanning tree of a complete graph (Kruskal, union-find).

    Ties are broken by the vertex indices, so the tree is deterministic.
    """
    k = len(weights)
    parent = list(range(k))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs = sorted((-weights[i, j], i, j) for i in range(k) for j in range(i + 1, k))
    edges: list[tuple[int, int]] = []
    for _, i, j in pairs:
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[ri] = rj
            edges.append((i, j))
            if len(edges) == k - 1:
                break
    return edges


def _normalise(counts: np.ndarray, axis: int | None = None) -> np.ndarray:
    clipped = np.clip(counts, 0.0, None)
    total = clipped.sum(axis=axis, keepdims=axis is not None)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, clipped / np.where(total > 0, total, 1.0), 0.0)


def _draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``probs`` ``(n, L)`` (rows sum to 1)."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    return np.minimum((u[:, None] >= cdf).sum(axis=1), probs.shape[1] - 1)


@dataclass
class TreeSynthesizer:
    """Select-measure-generate on integer codes (see the module docstring).

    Parameters
    ----------
    epsilon, delta
        Budget that sets the Gaussian noise of the measured marginals.
    root
        Attribute drawn first (the label, so labels are generated jointly with the rest).
    """

    epsilon: float = 1000.0
    delta: float = 1e-9
    root: int = 0
    sizes: list[int] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    sigma: float = 0.0
    _order: list[tuple[int, int | None]] = field(default_factory=list)
    _one_way: list[np.ndarray] = field(default_factory=list)
    _conditionals: dict[int, np.ndarray] = field(default_factory=dict)

    def fit(
        self, codes: np.ndarray, sizes: list[int], *, rng: np.random.Generator
    ) -> TreeSynthesizer:
        n, k = codes.shape
        if k != len(sizes):
            raise ValueError(f"{k} code columns but {len(sizes)} attribute sizes")
        if n == 0:
            raise ValueError("cannot fit a generator on an empty table")
        self.sizes = list(sizes)
        # Select.
        weights = np.zeros((k, k))
        tables: dict[tuple[int, int], np.ndarray] = {}
        for i in range(k):
            for j in range(i + 1, k):
                tables[i, j] = joint_counts(codes[:, i], codes[:, j], sizes[i], sizes[j])
                weights[i, j] = weights[j, i] = mutual_information(tables[i, j])
        self.edges = maximum_spanning_tree(weights) if k > 1 else []
        # Measure: k one-way + (k - 1) two-way queries, each of L2 sensitivity 1.
        measurements = k + len(self.edges)
        self.sigma = math.sqrt(measurements / (2.0 * zcdp_rho(self.epsilon, self.delta)))
        self._one_way = [
            np.bincount(codes[:, i], minlength=sizes[i]) + rng.normal(0.0, self.sigma, sizes[i])
            for i in range(k)
        ]
        noisy_edges = {
            e: tables[e] + rng.normal(0.0, self.sigma, tables[e].shape) for e in self.edges
        }
        # Generate's plan: breadth-first from the root; P(child | parent) per edge.
        neighbours: dict[int, list[int]] = {i: [] for i in range(k)}
        for i, j in self.edges:
            neighbours[i].append(j)
            neighbours[j].append(i)
        self._order, self._conditionals = [(self.root, None)], {}
        seen, frontier = {self.root}, [self.root]
        while frontier:
            nxt = []
            for p in frontier:
                for c in sorted(neighbours[p]):
                    if c in seen:
                        continue
                    table = noisy_edges[(p, c)] if (p, c) in noisy_edges else noisy_edges[(c, p)].T
                    cond = _normalise(table, axis=1)
                    empty = cond.sum(axis=1) == 0
                    cond[empty] = _normalise(self._one_way[c])
                    self._conditionals[c] = cond
                    self._order.append((c, p))
                    seen.add(c)
                    nxt.append(c)
            frontier = nxt
        return self

    def sample(self, n: int, *, rng: np.random.Generator) -> np.ndarray:
        """``(n, k)`` codes drawn from the fitted tree model."""
        if not self._order:
            raise RuntimeError("fit() the synthesizer before sampling")
        out = np.zeros((n, len(self.sizes)), dtype=np.int64)
        root_p = _normalise(self._one_way[self.root])
        if root_p.sum() == 0:
            root_p = np.full(self.sizes[self.root], 1.0 / self.sizes[self.root])
        out[:, self.root] = _draw(np.broadcast_to(root_p, (n, len(root_p))), rng)
        for child, parent in self._order[1:]:
            out[:, child] = _draw(self._conditionals[child][out[:, parent]], rng)
        return out


def marginal_tv(
    real: np.ndarray, synthetic: np.ndarray, sizes: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Total-variation distances of all 1-way and 2-way marginals of two code tables.

    Returns ``(tv_1way (k,), tv_2way (k*(k-1)/2,))``.
    """
    k = len(sizes)
    one = np.array(
        [
            0.5
            * np.abs(
                np.bincount(real[:, i], minlength=sizes[i]) / len(real)
                - np.bincount(synthetic[:, i], minlength=sizes[i]) / len(synthetic)
            ).sum()
            for i in range(k)
        ]
    )
    two = []
    for i in range(k):
        for j in range(i + 1, k):
            a = joint_counts(real[:, i], real[:, j], sizes[i], sizes[j]) / len(real)
            b = joint_counts(synthetic[:, i], synthetic[:, j], sizes[i], sizes[j]) / len(synthetic)
            two.append(0.5 * np.abs(a - b).sum())
    return one, np.asarray(two)
