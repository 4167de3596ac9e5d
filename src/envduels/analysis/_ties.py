"""Ties are ties: values that agree within a stated tolerance are equal for every rank, "level"
and order the analysis and the report give.

A number computed two ways (another BLAS kernel, thread count or summation order) differs in
its last bits. Two models with identical records then get ratings 1e-12 apart, and which one
is "ahead" (in a table, a rank, Kendall's τ against the truth) would be decided by rounding:
on one machine kind τ was 0.733, on another 0.828, for the same run. So every place that
ranks, orders or calls models level goes through these helpers:

- `snap` groups the values by single linkage along their sorted order (neighbours at most
  `tol` apart share a group) and gives every member its group's mean. Ratings are snapped
  where they are fitted, so tied models carry *identical* numbers into the JSON, the intervals,
  the rank tests and every printed table; the snap moves a value by at most the group's width,
  far below anything printed.
- `order` lists names best first by snapped value, ties by name; `tie_ranks` gives tied values
  one (competition) rank.

Tolerances (docs/analysis.md, "Ties"): `RATING_TOLERANCE` 1e-6 logits (1.7e-4 Elo) is a
thousand times the fits' convergence tolerance (1e-9) and far below the printed point;
`ESTIMATE_TOLERANCE` 1e-4 for the item-response fit, which L-BFGS solves only to ~1e-5;
`SHARE_TOLERANCE` 1e-9 for rates and lifts (ratios of counts, exact but for rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

RATING_TOLERANCE = 1e-6
"""Logits: BT strengths (θ) closer than this are one tie."""
ESTIMATE_TOLERANCE = 1e-4
"""Logits: item-response estimates (abilities, difficulties, teaching) closer than this tie."""
SHARE_TOLERANCE = 1e-9
"""Rates, lifts and other ratios of counts closer than this tie."""


def snap(values: np.ndarray, tol: float = RATING_TOLERANCE) -> np.ndarray:
    """A copy of `values` (1-D, or 2-D: each row on its own) in which every tie group holds its
    mean: sorted, a gap above `tol` starts a new group. NaN stays NaN and ties with nothing.
    Values already further apart than `tol` come back unchanged, bit for bit."""
    v = np.array(values, dtype=float, copy=True)
    if v.ndim == 1:
        return snap(v[None], tol)[0]
    if v.size == 0:
        return v
    rows, n = v.shape
    idx = np.argsort(v, axis=1, kind="stable")  # NaN sorts last
    s = np.take_along_axis(v, idx, axis=1)
    new = np.ones((rows, n), dtype=bool)
    new[:, 1:] = ~(np.diff(s, axis=1) <= tol)  # NaN gaps are not ties
    group = np.cumsum(new, axis=1) - 1 + n * np.arange(rows)[:, None]
    flat, ok = group.ravel(), ~np.isnan(s.ravel())
    total = np.bincount(flat[ok], s.ravel()[ok], minlength=rows * n)
    count = np.bincount(flat[ok], minlength=rows * n)
    tied = count[flat] > 1
    out = s.ravel().copy()
    out[tied] = total[flat[tied]] / count[flat[tied]]
    np.put_along_axis(v, idx, out.reshape(rows, n), axis=1)
    return v


def order(names: Sequence[Any], values: Sequence[float] | np.ndarray, *, tol: float = RATING_TOLERANCE,
          descending: bool = True) -> list[Any]:
    """`names` sorted by their values (highest first unless `descending` is False), tied values
    by name (as strings); NaN last."""
    v = snap(np.asarray(values, dtype=float), tol)
    sign = -1.0 if descending else 1.0
    return [names[i] for i in sorted(range(len(names)),
                                     key=lambda i: (bool(np.isnan(v[i])), sign * v[i] if not np.isnan(v[i]) else 0.0,
                                                    str(names[i])))]


def tie_ranks(values: Sequence[float] | np.ndarray, *, tol: float = RATING_TOLERANCE,
              descending: bool = True) -> np.ndarray:
    """Competition ranks (1 = best; tied values share the best rank of their group)."""
    v = snap(np.asarray(values, dtype=float), tol)
    key = -v if descending else v
    return np.array([1 + int(np.sum(key < k)) for k in key], dtype=int)


def tied(a: float, b: float, tol: float = RATING_TOLERANCE) -> bool:
    """Whether two values are one tie (|a − b| ≤ tol); for a pair only, see `snap` for groups."""
    return bool(abs(a - b) <= tol)


def kendall_tau(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *,
                tol: float = RATING_TOLERANCE) -> float:
    """Kendall's τ-b between two orders, each value snapped first: a pair tied within `tol` on
    either side counts as a tie (neither concordant nor discordant), whatever its last bits."""
    from scipy.stats import kendalltau

    return float(kendalltau(snap(np.asarray(x, dtype=float), tol), snap(np.asarray(y, dtype=float), tol)).statistic)
