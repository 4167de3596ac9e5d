"""The divergence interval at the boundary: a true Spearman of ±1 (skills in the same or the
reverse order) stays in the interval unless the data reject it.

Known truth without the tournament machinery: nine models' author and solver strengths, the
estimate = truth + N(0, sd) per model, the bootstrap draws = estimate + N(0, sd), as the
ratings' bootstrap stands to the fit. The bootstrap's basic ∪ percentile interval alone misses
a boundary truth (every estimate lies below 1 while the draws spread both ways); the uneven
coverage table found 18 of 23 at 9 × 10 × 1 with ρ = 1.
"""

from __future__ import annotations

import numpy as np

from envduels.analysis.divergence import _spearman_rows, consistent_with_perfect_order, divergence
from envduels.analysis.ratings import Rating

TRUE = np.linspace(-1.5, 1.5, 9)
SCRAMBLED = np.array([4, 8, 1, 6, 0, 3, 7, 2, 5])  # the coverage table's uncorrelated order


def _rating(kind: str, theta: np.ndarray, draws: np.ndarray) -> Rating:
    n = len(theta)
    return Rating(kind=kind, players=[f"m{i}" for i in range(n)], scores=np.zeros((n, n)),
                  theta=theta - theta.mean(), draws=draws - draws.mean(axis=1, keepdims=True),
                  rated=np.ones(n, dtype=bool))


def _bootstrap_only(rho: float, da: np.ndarray, ds: np.ndarray) -> tuple[float, float]:
    """The interval before the boundary test: basic ∪ percentile, clipped."""
    q_lo, q_hi = np.percentile(_spearman_rows(da, ds), [2.5, 97.5])
    return max(-1.0, min(q_lo, 2 * rho - q_hi)), min(1.0, max(q_hi, 2 * rho - q_lo))


def _coverage(solver_truth: np.ndarray, sd: float, reps: int = 300, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    truth = float(_spearman_rows(TRUE, solver_truth))
    given = new = old = widened = 0
    for _ in range(reps):
        ea, es = TRUE + rng.normal(0, sd, 9), solver_truth + rng.normal(0, sd, 9)
        da, ds = ea + rng.normal(0, sd, (200, 9)), es + rng.normal(0, sd, (200, 9))
        d = divergence(_rating("author", ea, da), _rating("solver", es, ds))
        if d["ci_low"] is None:
            continue
        given += 1
        lo, hi = _bootstrap_only(d["spearman"], da, ds)
        old += lo - 1e-9 <= truth <= hi + 1e-9
        new += d["ci_low"] - 1e-9 <= truth <= d["ci_high"] + 1e-9
        widened += (d["ci_low"], d["ci_high"]) != (lo, hi)
    assert given >= reps // 2
    return {"old": old / given, "new": new / given, "widened": widened / given}


def test_a_true_rank_agreement_of_one_is_covered_where_the_bootstrap_interval_alone_misses_it():
    got = _coverage(TRUE, sd=0.3)
    assert got["old"] < got["new"]
    assert got["new"] >= 0.975


def test_a_true_reversal_is_covered_at_minus_one_likewise():
    got = _coverage(TRUE[::-1], sd=0.3)
    assert got["old"] < got["new"]
    assert got["new"] >= 0.975


def test_far_from_the_boundary_the_interval_is_the_bootstrap_one():
    """Truth ρ −0.08: ±1 is rejected in every replicate, so no interval is widened."""
    got = _coverage(TRUE[SCRAMBLED], sd=0.3)
    assert got["widened"] == 0.0
    assert got["new"] == got["old"] >= 0.95


def test_an_order_the_noise_cannot_explain_rejects_perfect_agreement():
    """Two swapped neighbours with noise far below their gap: ρ̂ 0.95 is evidence against 1."""
    rng = np.random.default_rng(1)
    solver = TRUE.copy()
    solver[[2, 3]] = solver[[3, 2]]
    solver[[6, 7]] = solver[[7, 6]]
    da = TRUE + rng.normal(0, 0.01, (200, 9))
    ds = solver + rng.normal(0, 0.01, (200, 9))
    rho = float(_spearman_rows(TRUE, solver))
    assert 0.9 < rho < 1.0
    assert not consistent_with_perfect_order(rho, (TRUE, da, 1.0), (solver, ds, 1.0), +1)
    d = divergence(_rating("author", TRUE, da), _rating("solver", solver, ds))
    assert d["ci_high"] < 1.0


def test_the_same_estimate_with_noise_as_large_as_the_gaps_keeps_perfect_agreement():
    rng = np.random.default_rng(1)
    solver = TRUE.copy()
    solver[[2, 3]] = solver[[3, 2]]
    solver[[6, 7]] = solver[[7, 6]]
    da = TRUE + rng.normal(0, 0.4, (200, 9))
    ds = solver + rng.normal(0, 0.4, (200, 9))
    rho = float(_spearman_rows(TRUE, solver))
    assert consistent_with_perfect_order(rho, (TRUE, da, 0.9), (solver, ds, 0.9), +1)
    assert not consistent_with_perfect_order(rho, (TRUE, da, 0.9), (solver, ds, 0.9), -1)
