"""Divergence of authoring and solving skill: Spearman between the author and solver ratings.

Noise in both ratings attenuates a rank correlation toward 0: the Spearman of estimated ratings
is biased toward "they diverge", and the percentile interval of bootstrap draws (each of which
adds the same noise once more) keeps that bias (true ρ 0.93: mean estimate 0.77, percentile
coverage 0.37). The bootstrap estimates the attenuation, the draws standing to the estimate as
the estimate stands to the truth, so the interval reaches the *basic* one, reflected through
the estimate (2ρ̂ − q₉₇.₅, 2ρ̂ − q₂.₅); near ρ = 0, where there is no attenuation to undo and the
rank statistic is lumpy, the reflection can miss where the percentile one does not, so the
interval is the union of the two, clipped to [−1, 1]. `spearman_bias_corrected` is 2ρ̂ − the
draws' mean. When noise dominates either rating (reliability 1 − mean squared distance of the
bootstrap draws from the estimate / variance of the ratings, below `MIN_RELIABILITY`) no
interval holds its level (0.73 or less at ±0.4 logits in the coverage table; 0.68 on uneven
environments when only the draws' variance was counted), so none is given and `ci_note` says
why; likewise without author intervals (no within-author replication).

Whether authoring and solving rank the models differently is not read off that interval, which
on environments like real ones is withheld at every design measured, but tested
(`divergence_test`): the entry's `p_value`, `claim`, `crossings` and `clearest_crossing`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
from scipy.stats import rankdata

from envduels.analysis._ties import snap
from envduels.analysis.divergence_test import (
    TEST_LEVEL,
    TEST_PERMUTATIONS,
    crossings,
    divergence_test,
)
from envduels.analysis.ratings import MIN_AUTHOR_ENVS, Rating

DivergenceEntry = dict[str, Any]
"""The divergence's JSON entry: numbers (ρ, bounds, reliabilities, model count, the test's
p-value), names, flags, notes and the crossings (`analysis.result.Divergence` types each key)."""

MIN_RELIABILITY = 0.90
"""Both ratings' reliability must reach this for a divergence interval (docs/analysis.md)."""


def _spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # tied strengths share an average rank, also in a bootstrap draw (_ties.py)
    ra = rankdata(snap(a), axis=-1)
    rb = rankdata(snap(b), axis=-1)
    ra = ra - ra.mean(axis=-1, keepdims=True)
    rb = rb - rb.mean(axis=-1, keepdims=True)
    den = np.sqrt((ra * ra).sum(-1) * (rb * rb).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1), np.nan)


def _best(models: list[str], theta: np.ndarray) -> list[str]:
    """The models tied for the highest strength, by name."""
    v = snap(theta)
    return sorted((m for m, x in zip(models, v, strict=True) if x == v.max()), key=str)


def reliability(theta: np.ndarray, draws: np.ndarray, *, shift: bool = True) -> float | None:
    """Share of the ratings' spread that is not resampling noise: 1 − noise/var(θ̂), at least 0
    (the classical reliability of a set of estimates; 1 = noiseless). The noise is the draws'
    mean squared distance from the estimate, their variance plus their shift from it; a
    bootstrap whose draws sit away from the estimate (the author ratings' on uneven
    environments, the shift their bias allowance covers) is noise too. `shift=False` counts the
    variance alone (the gate before 2026-12-01, kept for the coverage bench)."""
    if draws.shape[0] < 2 or len(theta) < 3 or np.var(theta) <= 0:
        return None
    with np.errstate(invalid="ignore"):
        noise = float(np.nanmean(np.nanvar(draws, axis=0, ddof=1)))
        if shift:
            noise += float(np.nanmean((np.nanmean(draws, axis=0) - theta) ** 2))
    return max(0.0, 1.0 - noise / float(np.var(theta, ddof=1)))


def divergence(author: Rating, solver: Rating, *, min_reliability: float = MIN_RELIABILITY,
               shift: bool = True, seed: int = 0, permutations: int = TEST_PERMUTATIONS,
               min_environments: int = MIN_AUTHOR_ENVS) -> DivergenceEntry:
    """Spearman ρ over models rated as both author and solver, with a 95% bootstrap interval,
    and whether the best solver is also the best author. Fewer than 3 common models: nulls.
    `min_reliability` and `shift` are the gate (the coverage bench measures others beside it),
    `min_environments` the test's (bench/divergence_table.py measures below it).

    Then the divergence test (`divergence_test`, from the author rating's environment lifts):
    `p_value`, and `claim`, True exactly when p < `TEST_LEVEL` (the report then states that
    authoring and solving rank these models differently); `test_note` says why there is no test;
    `crossings` lists the pairs that both rank rules order oppositely (a certain crossing: A
    certainly the better solver, B certainly the better author), `clearest_crossing` the pair
    the two ratings order oppositely with the most evidence (a certain one when there is one)."""
    common = [m for i, m in enumerate(author.players) if author.rated[i] and m in solver.players
              and solver.rated[solver.players.index(m)]]
    out: DivergenceEntry = {"spearman": None, "ci_low": None, "ci_high": None, "models": len(common),
                           "best_solver": None, "best_author": None, "best_solver_is_best_author": None,
                           "spearman_bias_corrected": None, "ci_method": None, "ci_note": None,
                           "reliability_author": None, "reliability_solver": None}
    out |= _test_entry(author, solver, common, seed=seed, permutations=permutations, min_environments=min_environments)
    if len(common) < 2:
        return out
    ai = [author.players.index(m) for m in common]
    si = [solver.players.index(m) for m in common]
    # a tie for best is named by its first member by name; "the best solver is the best author"
    # when some model is among the best in both (_ties.py)
    top_s, top_a = _best(common, solver.theta[si]), _best(common, author.theta[ai])
    out |= {"best_solver": top_s[0], "best_author": top_a[0], "best_solver_is_best_author": bool(set(top_s) & set(top_a))}
    if len(common) < 3:
        return out
    rho = float(_spearman_rows(author.theta[ai], solver.theta[si]))
    ra = rs = None
    if author.draws.shape[0]:
        ra = reliability(author.theta[ai], author.draws[:, ai], shift=shift)
        rs = reliability(solver.theta[si], solver.draws[:, si], shift=shift)
    out |= {"reliability_author": ra, "reliability_solver": rs}
    out["spearman"] = None if np.isnan(rho) else rho
    note = author.note or solver.note
    if note is not None:
        out["ci_note"] = f"no interval: the {'author' if author.note else 'solver'} rating has none ({note})"
        return out
    if np.isnan(rho) or ra is None or rs is None:
        return out
    if min(ra, rs) < min_reliability:
        weak, low = ("author", ra) if ra <= rs else ("solver", rs)
        out["ci_note"] = (f"no interval: resampling noise (the bootstrap draws' spread and shift) is "
                          f"{1 - low:.0%} of the {weak} ratings' spread "
                          f"(reliability {low:.2f} < {min_reliability}), which attenuates the rank correlation "
                          "beyond what an interval can correct; more environments per author narrow the ratings")
        return out
    reps = _spearman_rows(author.draws[:, ai], solver.draws[:, si])
    reps = reps[~np.isnan(reps)]
    if len(reps):
        q_lo, q_hi = np.percentile(reps, [2.5, 97.5])
        out["ci_low"] = float(max(-1.0, min(q_lo, 2 * rho - q_hi)))
        out["ci_high"] = float(min(1.0, max(q_hi, 2 * rho - q_lo)))
        out["spearman_bias_corrected"] = float(np.clip(2 * rho - reps.mean(), -1.0, 1.0))
        out["ci_method"] = "bootstrap, basic ∪ percentile (attenuation-aware)"
    return out


def _test_entry(author: Rating, solver: Rating, common: list[str], *, seed: int, permutations: int,
                min_environments: int) -> DivergenceEntry:
    """The divergence test's keys of the entry: p_value, claim, test_note, crossings,
    clearest_crossing."""
    out: DivergenceEntry = {"p_value": None, "claim": False, "test_note": None, "crossings": [],
                            "clearest_crossing": None}
    if author.lifts is None:
        out["test_note"] = "no divergence test: the author rating carries no environment lifts"
        return out
    solver_theta = {m: float(solver.theta[solver.players.index(m)]) for m in common}
    test = divergence_test(author.lifts, solver_theta, common, permutations=permutations, seed=seed,
                           min_environments=min_environments)
    if isinstance(test, str):
        out["test_note"] = f"no divergence test: {test}"
        return out
    out["p_value"] = test.p_value
    out["claim"] = bool(test.p_value < TEST_LEVEL)
    found = crossings(common, author, solver)
    out["crossings"] = [asdict(c) for c in found if c.certain]
    out["clearest_crossing"] = asdict(found[0]) if found else None
    return out
