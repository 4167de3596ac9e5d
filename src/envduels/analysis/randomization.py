"""Randomization tests over environments, exact under the null they test whatever the values'
distribution. The claims they back are made at Bonferroni or Holm levels of 0.05/36 and below,
where a t or z reference was measured to be optimistic for the few discrete values an
environment gives (9 × 10 × 1 identical players: 0.09 false significant duel edges and 0.08
false solver rank claims against a nominal 0.05; docs/analysis.md).

The values behind a duel or a solver comparison are points: multiples of ½. For such values
the randomization distribution is computed exactly by dynamic programming over the possible
sums (a few milliseconds per pair even with hundreds of environments); other values fall back to
`MONTE_CARLO` random rearrangements, whose p-value (1 + #{T* ≥ T})/(1 + B) is valid too.
"""

from __future__ import annotations

import numpy as np

MONTE_CARLO = 19_999
"""Random rearrangements when the values are not on a grid of ½ (never for points)."""
MAX_GRID = 200_000
"""Largest range of sums (in half-points) computed exactly; beyond it, Monte Carlo."""


def _half_units(values: np.ndarray) -> np.ndarray | None:
    """The values in half-points as integers, or None when they are not multiples of ½."""
    scaled = np.asarray(values, float) * 2.0
    ints = np.rint(scaled)
    return ints.astype(np.int64) if np.all(np.abs(scaled - ints) < 1e-9) else None


def sign_flip_pvalue(d: np.ndarray, *, rng: np.random.Generator | None = None) -> float:
    """Two-sided sign-flip test that the independent, symmetric-under-the-null values `d` centre
    on 0: the share of the 2^n sign patterns whose |Σ ±d| is at least the observed |Σ d|."""
    d = np.asarray(d, float)
    d = d[np.abs(d) > 1e-12]
    if not len(d):
        return 1.0
    units = _half_units(d)
    if units is None or 2 * np.abs(units).sum() + 1 > MAX_GRID:
        rng = rng or np.random.default_rng(0)
        signs = rng.choice([-1.0, 1.0], size=(MONTE_CARLO, len(d)))
        return (1 + int(np.sum(np.abs(signs @ d) >= abs(d.sum()) - 1e-9))) / (1 + MONTE_CARLO)
    a = np.abs(units)
    total = int(a.sum())
    dist = np.zeros(2 * total + 1)  # P(Σ ±a = s − total)
    dist[total] = 1.0
    for x in a:  # each value adds +x or −x with probability ½
        shifted = np.zeros_like(dist)
        shifted[: len(dist) - x] += dist[x:]
        shifted[x:] += dist[: len(dist) - x]
        dist = shifted / 2.0
    obs = abs(int(units.sum()))
    s = np.arange(-total, total + 1)
    return float(min(1.0, dist[np.abs(s) >= obs].sum()))


def two_sample_pvalues(x: np.ndarray, y: np.ndarray, *, rng: np.random.Generator | None = None,
                       permutations: int = MONTE_CARLO) -> tuple[float, float]:
    """Permutation test of mean(x) against mean(y): (p that x is larger, p that y is larger), one
    sided, over every way of splitting the pooled values into groups of their sizes. Exact when
    x and y are exchangeable; with equal group sizes (a round robin's) the difference of means
    is also asymptotically valid when only the means are equal. Needs two values a side.
    `permutations`: random splits when the values are off the ½ grid (Monte Carlo)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    values = np.concatenate([x, y])
    nx, n = len(x), len(values)
    units = _half_units(values)
    if units is not None:
        units = units - units.min()
        span = int(units.sum())
        if (span + 1) * (nx + 1) <= MAX_GRID * 4:
            # count[k, s]: subsets of the values seen so far with k members summing to s
            count = np.zeros((nx + 1, span + 1))
            count[0, 0] = 1.0
            for v in units:
                if v:
                    count[1:, v:] += count[:-1, : span + 1 - v].copy()
                else:
                    count[1:] += count[:-1].copy()
            dist = count[nx] / count[nx].sum()
            obs = int(units[:nx].sum())
            return float(min(1.0, dist[obs:].sum())), float(min(1.0, dist[: obs + 1].sum()))
    rng = rng or np.random.default_rng(0)
    first = np.argsort(rng.random((permutations, n)), axis=1) < nx
    sums = np.where(first, values[None, :], 0.0).sum(axis=1)
    obs_sum = x.sum()
    up = (1 + int(np.sum(sums >= obs_sum - 1e-9))) / (1 + permutations)
    down = (1 + int(np.sum(sums <= obs_sum + 1e-9))) / (1 + permutations)
    return up, down
