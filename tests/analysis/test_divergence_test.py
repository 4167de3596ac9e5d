"""Issue 34: the divergence test says when authoring and solving rank the models differently, and
says nothing was found when they rank them alike (its rates over 1,000 tournaments per cell are
in docs/analysis.md, "The divergence test"; bench/divergence_table.py)."""

from __future__ import annotations

from functools import cache
from itertools import permutations

import numpy as np
import pytest

from envduels.analysis import compute_ratings, divergence, matched_pairs, simulate_tournament
from envduels.analysis.divergence_test import crossings, divergence_test
from envduels.analysis.lifts import EnvironmentLifts
from envduels.analysis.ratings import Rating

ABILITY = np.linspace(-1.5, 1.5, 9)
STRONG = {"author_teaching": list(1.0 - ABILITY), "author_difficulty": list(-ABILITY)}
"""The issue's strong divergence: hint quality and environment difficulty exactly opposite to
solving skill (the authors' mean lifts run from about 0.2 down to about −0.05)."""
ALIGNED = {"author_teaching": list(1.0 + ABILITY), "author_difficulty": list(ABILITY)}
"""The issue's no divergence: the best solver writes the best hints and the hardest environments."""


@cache
def _uneven(shape: str, seed: int):
    run = simulate_tournament(players=9, envs_per_author=10, rounds=1, seeds=4, seed=seed, transcripts=False,
                              environments="uneven", ability=list(ABILITY),
                              **(STRONG if shape == "strong" else ALIGNED))
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=50, seed=seed,
                        kinds=("author", "solver"))
    return r, divergence(r["author"], r["solver"], seed=seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_issues_strong_divergence_at_the_reference_design_is_claimed(seed):
    """9 models × 10 environments per author, uneven environments: main withheld everything
    ("a description of this run, not a finding") although ρ was near −0.95. The test rejects,
    and the clearest crossing puts the strongest solver against one of the best authors."""
    r, d = _uneven("strong", seed)
    assert d["reliability_author"] < 0.90 and d["ci_low"] is None  # the interval is still withheld
    assert d["p_value"] < 0.01 and d["claim"] is True and d["test_note"] is None
    c = d["clearest_crossing"]
    assert c["better_solver"] == "m08" and c["better_author"] in ("m00", "m01", "m02")


@pytest.mark.parametrize("seed", [0, 1])
def test_the_issues_no_divergence_claims_nothing(seed):
    _, d = _uneven("aligned", seed)
    assert d["p_value"] > 0.5 and d["claim"] is False and d["crossings"] == []


def test_an_author_with_one_environment_gets_no_test_and_a_reason():
    run = simulate_tournament(players=4, envs_per_author=1, rounds=1, seeds=2, seed=0, transcripts=False)
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=20, kinds=("author", "solver"))
    d = divergence(r["author"], r["solver"])
    assert (d["p_value"], d["claim"]) == (None, False)
    assert d["test_note"] == ("no divergence test: m00, m01, m02, ... wrote fewer than 4 environments with results, "
                              "too few to tell an author's strength from its environments' luck; write more "
                              "environments per author")


def test_two_models_get_no_test_and_a_reason():
    run = simulate_tournament(players=2, envs_per_author=4, rounds=1, seeds=2, seed=0, transcripts=False)
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=20, kinds=("author", "solver"))
    d = divergence(r["author"], r["solver"])
    assert d["p_value"] is None and d["test_note"] == (
        "no divergence test: fewer than 3 models are rated both as author and as solver")


def _lifts(values: np.ndarray, author: np.ndarray, n: int) -> EnvironmentLifts:
    """Environments whose lift on every solver is `values` (one matched pair each); solvers are
    the authors, so each environment lacks its own author's column as in a run."""
    names = [f"m{i}" for i in range(n)]
    den = np.ones((len(values), n))
    den[np.arange(len(values)), author] = 0.0
    return EnvironmentLifts(names, names, author, values[:, None] * den, den)


def test_over_every_arrangement_of_alike_environments_the_test_rejects_about_5_percent():
    """Exchangeable environments (the null's least favourable case): over all 2,520 ways of
    giving 8 environment values to 4 authors (2 each), the test rejects at 0.05 in about 5% of
    them (exactly 5% in expectation; 999 Monte Carlo rearrangements each)."""
    values = np.array([0.30, -0.10, 0.05, 0.50, 0.00, 0.20, -0.25, 0.12])
    theta = {f"m{i}": float(i) for i in range(4)}
    seen, rejected = set(), 0
    for order in permutations(range(8)):
        labels = tuple(np.array(order) // 2)
        if labels in seen:
            continue
        seen.add(labels)
        test = divergence_test(_lifts(values, np.array(labels), 4), theta, list(theta), permutations=999,
                               seed=len(seen), min_environments=2)
        rejected += test.p_value < 0.05
    assert len(seen) == 2520
    # 5% of 2,520 is 126; the Monte Carlo p-values move it by about ±11
    assert 95 <= rejected <= 150, rejected


def test_author_strength_falling_with_solver_rank_gives_a_small_p_and_rising_a_large_one():
    author = np.repeat(np.arange(4), 3)
    falling = 0.3 - 0.1 * author + np.tile([-0.02, 0.0, 0.02], 4)
    theta = {f"m{i}": float(i) for i in range(4)}
    down = divergence_test(_lifts(falling, author, 4), theta, list(theta), seed=1, min_environments=3)
    up = divergence_test(_lifts(falling[::-1].copy(), author, 4), theta, list(theta), seed=1, min_environments=3)
    assert down.p_value < 0.01 and up.p_value > 0.99
    assert down.author_strength["m0"] > down.author_strength["m3"]
    assert down.solver_rank == {"m0": 1.0, "m1": 2.0, "m2": 3.0, "m3": 4.0}


def test_a_crossing_is_certain_only_when_both_rank_claims_hold():
    players = ["a", "b", "c"]
    theta_s, theta_a = np.array([1.0, 0.0, -1.0]), np.array([-1.0, 0.0, 1.0])
    p = np.full((3, 3), np.nan)
    p_solver, p_author = p.copy(), p.copy()
    p_solver[0, 1], p_solver[0, 2], p_solver[1, 2] = 0.2, 1e-4, 0.3  # a certainly above c as a solver
    p_author[2, 0], p_author[1, 0], p_author[2, 1] = 1e-4, 0.04, 0.5  # c certainly above a as an author
    above_s, above_a = np.zeros((3, 3), bool), np.zeros((3, 3), bool)
    above_s[0, 2], above_a[2, 0] = True, True

    def rating(kind: str, theta: np.ndarray, above: np.ndarray, p: np.ndarray | None) -> Rating:
        return Rating(kind, players, np.zeros((3, 3)), theta, np.zeros((0, 3)), np.ones(3, bool), above=above,
                      pair_p=p)

    author, solver = rating("author", theta_a, above_a, p_author), rating("solver", theta_s, above_s, p_solver)
    found = crossings(players, author, solver)
    assert [(c.better_solver, c.better_author, c.certain) for c in found] == [
        ("a", "c", True), ("a", "b", False), ("b", "c", False)]
    assert crossings(players, rating("author", theta_a, above_a, None), solver) == []


def test_a_clear_reversal_on_many_environments_is_a_certain_crossing():
    """Alike environments, 6 models × 12 environments each, hint-writing skill 3.5 logits from
    best to worst in the reverse order of solving: both rank rules certify crossings, and the
    clearest is the best solver against the best author."""
    ability = np.linspace(-2.0, 2.0, 6)
    run = simulate_tournament(players=6, envs_per_author=12, rounds=1, seeds=4, seed=0, transcripts=False,
                              ability=list(ability), author_teaching=list(1.5 - ability), author_difficulty=[0.0] * 6)
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=50, kinds=("author", "solver"))
    d = divergence(r["author"], r["solver"])
    assert d["claim"] is True and len(d["crossings"]) >= 5
    assert d["clearest_crossing"]["better_solver"] == "m05" and d["clearest_crossing"]["better_author"] == "m00"
    assert all(c["certain"] for c in d["crossings"]) and d["crossings"][0] == d["clearest_crossing"]


def test_each_solvers_uptake_of_hints_is_scaled_out_and_an_environment_nobody_solves_stays_at_zero():
    """Lifts that are an environment's effect times a solver's uptake of hints, each environment
    without its own author's column, as in a run: the scaled fit gives every environment its
    effect (up to one common factor), so authors who wrote the same environments get the same
    strength whoever lacks which column, and one nobody solves stays at exactly 0. The additive
    fit (γ_e + β_s, before this) moved every environment of an author by that author's missing
    β, which made alike authors' environments unlike and the test claim in 0.053–0.056 of
    tournaments of alike authors (docs/analysis.md)."""
    effect = np.tile([0.0, 0.1, 0.3, 0.6], 3)
    author = np.repeat(np.arange(3), 4)
    uptake = np.array([1.6, 1.0, 0.4])  # the strongest solver, last, gains least from hints
    den = np.ones((12, 3))
    den[np.arange(12), author] = 0.0
    lifts = EnvironmentLifts(["m0", "m1", "m2"], ["m0", "m1", "m2"], author, effect[:, None] * uptake * den, den)
    gamma, has = lifts.solver_adjusted()
    assert has.all() and np.all(gamma[effect == 0] == 0.0)
    scale = gamma[effect > 0] / effect[effect > 0]
    assert np.allclose(scale, scale[0], rtol=1e-8) and scale[0] > 0
    test = divergence_test(lifts, {"m0": 0.0, "m1": 1.0, "m2": 2.0}, ["m0", "m1", "m2"], min_environments=4)
    strength = np.array(list(test.author_strength.values()))
    assert np.allclose(strength, strength[0], rtol=1e-8)
