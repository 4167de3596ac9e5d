"""Randomization tests over environments: exact under the null they test, whatever the values'
distribution (the claims they back are made at Bonferroni or Holm levels of 0.05/36 and below,
where a t reference was measured to be optimistic for the few discrete values an environment
gives: 9 × 10 × 1 identical players, 0.09 false significant duel edges and 0.08 false solver
rank claims against a nominal 0.05; docs/analysis.md).

Both tests are Monte Carlo unless the randomization set is small enough to enumerate. The p-value
of B random rearrangements is (1 + #{T* ≥ T})/(1 + B), valid for any B. To stay fast, a first
pass of `FIRST_PASS` rearrangements settles every test whose p-value is clearly large (> 0.05,
above every level these p-values are compared with); only the rest get `resolution` fresh
rearrangements. That two-stage p-value is still valid: it is below a level α < 0.05 only when
the second, independent p-value is.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np

FIRST_PASS = 999
SCREEN = 0.05
"""A first-pass p-value above this is final: no claim is made at a level this loose."""


def resolution_for(level: float) -> int:
    """Rearrangements that resolve a p-value of `level` (the smallest reachable p is 1/(B + 1),
    and ~20 rearrangements beyond the observed value at the threshold keep the power loss small)."""
    return max(9_999, int(np.ceil(20.0 / max(level, 1e-9))))


def _two_sample_t(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Welch's t of mean(first group) − mean(second), per row of the boolean mask `first`
    (B, N). Zero variance in both groups gives ±inf (0 when the means are equal)."""
    nx = first.sum(axis=1)
    ny = first.shape[1] - nx
    v = values[None, :]
    sx = np.where(first, v, 0.0).sum(axis=1)
    sy = v.sum() - sx
    qx = np.where(first, v * v, 0.0).sum(axis=1)
    qy = (values * values).sum() - qx
    mx, my = sx / nx, sy / ny
    vx = np.maximum(qx - nx * mx * mx, 0.0) / (nx - 1) / nx
    vy = np.maximum(qy - ny * my * my, 0.0) / (ny - 1) / ny
    diff = mx - my
    se = np.sqrt(vx + vy)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 1e-12, diff / np.where(se > 1e-12, se, 1.0),
                        np.where(np.abs(diff) > 1e-12, np.sign(diff) * np.inf, 0.0))


def _label_masks(n: int, nx: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """(masks, exact): every way of choosing nx of n as the first group when there are at most
    `count` of them, else `count` random choices."""
    if comb(n, nx) <= count:
        masks = np.zeros((comb(n, nx), n), dtype=bool)
        for r, chosen in enumerate(combinations(range(n), nx)):
            masks[r, list(chosen)] = True
        return masks, True
    return np.argsort(rng.random((count, n)), axis=1) < nx, False


def two_sample_pvalues(x: np.ndarray, y: np.ndarray, *, resolution: int, rng: np.random.Generator) -> tuple[float, float]:
    """Studentized permutation test of mean(x) vs mean(y): (p that x is larger, p that y is
    larger), one-sided. Exact when x and y are exchangeable (Welch's t as the statistic keeps it
    asymptotically valid when only the means are equal; Janssen 1997). Needs two values a side."""
    values = np.concatenate([x, y]).astype(float)
    t_obs = float(_two_sample_t(values, np.arange(len(values))[None, :] < len(x))[0])
    if np.isnan(t_obs):
        return 1.0, 1.0
    tol = 1e-9

    def p_values(count: int) -> tuple[float, float, bool]:
        masks, exact = _label_masks(len(values), len(x), count, rng)
        t = _two_sample_t(values, masks)
        up, down = int(np.sum(t >= t_obs - tol)), int(np.sum(t <= t_obs + tol))
        if exact:  # the observed labelling is among the masks
            return up / len(t), down / len(t), True
        return (1 + up) / (1 + len(t)), (1 + down) / (1 + len(t)), False

    up, down, exact = p_values(FIRST_PASS)
    if not exact and min(up, down) <= SCREEN:
        up2, down2, _ = p_values(resolution)
        up = up2 if up <= SCREEN else up
        down = down2 if down <= SCREEN else down
    return up, down


def sign_flip_pvalue(d: np.ndarray, *, resolution: int, rng: np.random.Generator) -> float:
    """Two-sided sign-flip test that the independent, symmetric-under-the-null values `d` centre
    on 0, by |Σ d|. Exact (every sign pattern) for up to 13 non-zero values."""
    d = np.asarray(d, float)
    d = d[np.abs(d) > 1e-12]
    if not len(d):
        return 1.0
    obs = abs(d.sum()) - 1e-9
    if len(d) <= 13:
        signs = 1.0 - 2.0 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))[None, :]) & 1)
        return float(np.mean(np.abs(signs @ d) >= obs))

    def p_value(count: int) -> float:
        signs = rng.choice([-1.0, 1.0], size=(count, len(d)))
        return (1 + int(np.sum(np.abs(signs @ d) >= obs))) / (1 + count)

    p = p_value(FIRST_PASS)
    return p_value(resolution) if p <= SCREEN else p
