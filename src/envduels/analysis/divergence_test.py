"""Do authoring and solving rank the models differently? A test with a p-value, and the crossings
the rank claims certify.

**The null** is that authoring and solving rank the models the same way: author strength is a
non-decreasing function of solver strength (equal authors included). Author strength here is
the mean lift of a model's environments with each solver's uptake of hints scaled out
(`EnvironmentLifts.solver_adjusted`), solver strength its solver rating.

**The statistic** is a studentized trend: with c_a the model's solver rank (ties averaged)
minus the mean rank, m_a the mean of its environments' lifts and v_a their variance over its
environments divided by their number,

    T = Σ c_a m_a / √(Σ c_a² v_a),

negative when author strength falls as solver strength rises. **Its null distribution** comes
from rearranging environments among the authors (their counts kept), `TEST_PERMUTATIONS`
times, with the solver ranks held as observed; p = (1 + #{T* ≤ T}) / (1 + rearrangements).
When every author writes alike, environments are exchangeable and the test is exact (up to
the solver each environment lacks, its own author); that configuration is the least favourable
one of the null: when author strength rises with solver strength, T sits above its
rearrangements and the test rejects less often. Studentizing keeps the test valid when authors
share a mean but not a spread (Janssen 1997: a studentized permutation statistic is
asymptotically exact under unequal variances, exact under exchangeability), and it raised the
power at the reference design from 0.92 to 0.98 by weighting the authors whose environments
agree more (docs/analysis.md, "The divergence test").

Why a test and not an interval on ρ: on uneven environments the author ratings' reliability
stays under the interval's 0.90 gate at every design measured, so the interval is withheld,
yet a Spearman of −0.95 and one of +0.82 are plainly different; noise pulls a correlation to 0,
and a test calibrated under exactly that noise can say which side of "the same order" a run is.
The test looks for author strength *falling* with solver strength; an author order unrelated
to the solver order is different too, but this test has little power there (docs/analysis.md).

**Crossings** are pairs (A, B) where A is certainly the better solver and B certainly the
better author: both rank claims hold under the ratings' family-wise rule (Holm at 0.05 over
each rating's pairs), so a crossing claim is false only when a solver or an author rank claim is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from envduels.analysis._ties import snap
from envduels.analysis.lifts import EnvironmentLifts
from envduels.analysis.ratings import MIN_AUTHOR_ENVS, Rating

TEST_PERMUTATIONS = 4_999
"""Rearrangements of environments among authors behind the divergence test's p-value."""
TEST_LEVEL = 0.05
"""The headline is stated when the test's p-value is below this."""
_CHUNK = 1_000


@dataclass(frozen=True)
class TrendTest:
    """The divergence test of one run: its one-sided p-value, its statistic and each model's
    author strength (mean environment lift, each solver's uptake of hints scaled out) and solver rank."""

    p_value: float
    statistic: float
    author_strength: dict[str, float]
    solver_rank: dict[str, float]


@dataclass(frozen=True)
class CrossedPair:
    """A pair where `better_solver` is ahead as a solver and `better_author` as an author, with the
    two rank tests' p-values (each favouring that side) and whether both are family-wise claims
    (a certain one is reported as `result.Crossing`)."""

    better_solver: str
    better_author: str
    p_solver: float
    p_author: float
    certain: bool


def _trend(labels: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """T for each row of `labels` (rearrangements × environments, an author index each)."""
    n = len(c)
    rows = len(labels)
    flat = (labels + n * np.arange(rows)[:, None]).ravel()
    count = np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(float)
    total = np.bincount(flat, np.tile(values, rows), minlength=rows * n).reshape(rows, n)
    square = np.bincount(flat, np.tile(values * values, rows), minlength=rows * n).reshape(rows, n)
    mean = total / count
    # the variance of an author's mean; an author whose environments all agree gets a floor, so
    # the statistic stays finite (only exact ties of lifts give 0)
    var = np.maximum((square - count * mean * mean) / (count - 1.0), 1e-12) / count
    return (c * mean).sum(axis=1) / np.sqrt((c * c * var).sum(axis=1))


def divergence_test(lifts: EnvironmentLifts, solver_theta: dict[str, float], models: list[str], *,
                    permutations: int = TEST_PERMUTATIONS, seed: int = 0,
                    min_environments: int = MIN_AUTHOR_ENVS) -> TrendTest | str:
    """The divergence test over `models` (rated both as author and as solver; `solver_theta` their
    solver strengths), or the reason it cannot be run, in words. Needs 3 models and
    `min_environments` environments with matched pairs per model (at least 2, to studentize): with
    2 per author (9 × 1 × 2) the test claimed in 0.070 of 2,000 tournaments of alike authors, so
    the report asks for the author rating's 4, as its intervals and ranks do."""
    if len(models) < 3:
        return "fewer than 3 models are rated both as author and as solver"
    gamma, has = lifts.solver_adjusted()
    where = {m: k for k, m in enumerate(models)}
    own = np.array([where.get(lifts.authors[a], -1) for a in lifts.author], dtype=int)
    rows = np.flatnonzero((own >= 0) & has)
    counts = np.bincount(own[rows], minlength=len(models))
    least = max(2, min_environments)
    if counts.min() < least:
        short = sorted(m for m, k in zip(models, counts, strict=True) if k < least)
        return (f"{', '.join(short[:3])}{', ...' if len(short) > 3 else ''} wrote fewer than {least} environments with "
                "results, too few to tell an author's strength from its environments' luck; write more environments "
                "per author")
    theta = snap(np.array([solver_theta[m] for m in models], dtype=float))
    rank = rankdata(theta)
    c = rank - rank.mean()
    if not np.any(c):
        return "every model has the same solver rating: no order to compare with"
    values, labels = gamma[rows], own[rows]
    observed = float(_trend(labels[None], values, c)[0])
    rng = np.random.default_rng(seed)
    below = 0
    for start in range(0, permutations, _CHUNK):
        k = min(_CHUNK, permutations - start)
        shuffled = np.take_along_axis(np.broadcast_to(labels, (k, len(labels))),
                                      np.argsort(rng.random((k, len(labels))), axis=1), axis=1)
        # T is continuous; a rearrangement equal to the observed one up to rounding counts
        below += int(np.sum(_trend(shuffled, values, c) <= observed + 1e-9 * max(1.0, abs(observed))))
    strength = np.bincount(labels, values, minlength=len(models)) / counts
    return TrendTest(p_value=(1 + below) / (1 + permutations), statistic=observed,
                     author_strength={m: float(strength[k]) for k, m in enumerate(models)},
                     solver_rank={m: float(rank[k]) for k, m in enumerate(models)})


def crossings(models: list[str], author: Rating, solver: Rating) -> list[CrossedPair]:
    """Every pair of `models` (A, B) that the two ratings order oppositely, A ahead as a solver and
    B as an author, in their estimates and in their rank tests' directions, clearest first:
    certain ones first, then by the larger of the two tests' p-values (the p-value of "A is the
    better solver *and* B the better author"), then by the two ratings' gaps summed (logits),
    then by name. `certain` when both orders are family-wise rank claims (`Rating.above`). A
    rating without rank tests (`pair_p` None) gives no crossing."""
    if author.pair_p is None or solver.pair_p is None:
        return []
    found: list[tuple[CrossedPair, float]] = []
    for x in models:
        for y in models:
            if x == y:
                continue
            si, sj = solver.players.index(x), solver.players.index(y)
            ai, aj = author.players.index(y), author.players.index(x)
            # the solver test must favour x and the author test y (`holm_above` reads them so)
            p_solver, p_author = solver.pair_p[si, sj], author.pair_p[ai, aj]
            if not (solver.theta[si] > solver.theta[sj] and author.theta[ai] > author.theta[aj]
                    and np.isfinite(p_solver) and np.isfinite(p_author)):
                continue
            certain = bool(solver.above is not None and author.above is not None
                           and solver.above[si, sj] and author.above[ai, aj])
            gap = float(solver.theta[si] - solver.theta[sj] + author.theta[ai] - author.theta[aj])
            found.append((CrossedPair(x, y, float(p_solver), float(p_author), certain), gap))
    # Monte Carlo p-values of clear pairs sit at the same floor: then the wider gap is clearer
    found.sort(key=lambda f: (not f[0].certain, max(f[0].p_solver, f[0].p_author), -f[1], f[0].better_solver,
                              f[0].better_author))
    return [c for c, _ in found]
