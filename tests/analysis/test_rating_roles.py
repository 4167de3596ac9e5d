"""Ratings when players have one role only: authors that never solve, solvers that never author."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import expit

from envduels.analysis import ELO_CENTER, ELO_SCALE, RIDGE, analyze, compute_ratings, matched_pairs

from .tables import env, pair, tables


def _authors_only_and_solvers_only():
    """A and B only author, C and D only solve. A's environment: C and D fail cold and win with
    the hint (lift 1 on each); B's: C always fails, D always wins (lift 0 on each)."""
    t = tables(["A", "B", "C", "D"], [env("eA", "A"), env("eB", "B")], [
        pair("eA", "A", "C", 0, 0, 1), pair("eA", "A", "D", 0, 0, 1),
        pair("eA", "A", "C", 1, 0, 1), pair("eA", "A", "D", 1, 0, 1),
        pair("eB", "B", "C", 0, 0, 0), pair("eB", "B", "D", 0, 1, 1),
        pair("eB", "B", "C", 1, 0, 0), pair("eB", "B", "D", 1, 1, 1)])
    t.players["roles"] = [["author"], ["author"], ["solver"], ["solver"]]
    return t


def test_authors_are_compared_on_solvers_that_never_author():
    t = _authors_only_and_solvers_only()
    author = compute_ratings(t, matched_pairs(t.episodes), bootstrap=20)["author"]
    rows = {r["model"]: r for r in author.rows}
    # A's lift beats B's on C and on D: 2 wins of 2 comparisons
    assert (rows["A"]["points"], rows["A"]["games"], rows["B"]["points"], rows["B"]["games"]) == (2.0, 2.0, 0.0, 2.0)
    # by hand: θ_A = −θ_B = d/2 with 2·(1 − σ(d)) = RIDGE·d/2 (the ridge's stationarity condition)
    d = brentq(lambda x: 2 * (1 - expit(x)) - RIDGE * x / 2, 0.0, 200.0)
    assert rows["A"]["rating"] == pytest.approx(ELO_CENTER + ELO_SCALE * d / 2, abs=1e-6)
    assert rows["B"]["rating"] == pytest.approx(ELO_CENTER - ELO_SCALE * d / 2, abs=1e-6)
    assert author.players == ["A", "B"] and np.all(author.rated)


def test_solver_only_and_author_only_players_keep_their_roles_in_the_report():
    j = analyze(_authors_only_and_solvers_only(), bootstrap=20, permutations=10).json
    assert [r["model"] for r in j["ratings"]["author"]] == ["A", "B"]
    assert {r["model"] for r in j["ratings"]["solver"]} == {"C", "D"}
    # no model is rated in both roles, so there is nothing to correlate
    assert (j["divergence"]["models"], j["divergence"]["spearman"]) == (0, None)
