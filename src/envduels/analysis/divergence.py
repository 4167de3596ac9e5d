"""Divergence of authoring and solving skill: Spearman between the author and solver ratings.

The interval comes from the ratings' shared bootstrap draws (same resampled environments for
both ratings), so it reflects the uncertainty of both rankings at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import rankdata

from envduels.analysis.ratings import Rating


def _spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ra = rankdata(a, axis=-1)
    rb = rankdata(b, axis=-1)
    ra = ra - ra.mean(axis=-1, keepdims=True)
    rb = rb - rb.mean(axis=-1, keepdims=True)
    den = np.sqrt((ra * ra).sum(-1) * (rb * rb).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1), np.nan)


def divergence(author: Rating, solver: Rating) -> dict[str, Any]:
    """Spearman ρ over models rated as both author and solver, with a 95% bootstrap interval,
    and whether the best solver is also the best author. Fewer than 3 common models: nulls."""
    common = [m for i, m in enumerate(author.players) if author.rated[i] and m in solver.players
              and solver.rated[solver.players.index(m)]]
    out: dict[str, Any] = {"spearman": None, "ci_low": None, "ci_high": None, "models": len(common),
                           "best_solver": None, "best_author": None, "best_solver_is_best_author": None}
    if len(common) < 2:
        return out
    ai = [author.players.index(m) for m in common]
    si = [solver.players.index(m) for m in common]
    best_s = common[int(np.argmax(solver.theta[si]))]
    best_a = common[int(np.argmax(author.theta[ai]))]
    out |= {"best_solver": best_s, "best_author": best_a, "best_solver_is_best_author": best_s == best_a}
    if len(common) < 3:
        return out
    rho = float(_spearman_rows(author.theta[ai], solver.theta[si]))
    out["spearman"] = None if np.isnan(rho) else rho
    if author.draws.shape[0] and author.draws.shape[0] == solver.draws.shape[0]:
        reps = _spearman_rows(author.draws[:, ai], solver.draws[:, si])
        reps = reps[~np.isnan(reps)]
        if len(reps):
            out["ci_low"], out["ci_high"] = (float(v) for v in np.percentile(reps, [2.5, 97.5]))
    return out
