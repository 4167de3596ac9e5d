"""Learning slopes: each author's slope has a t-test p and a Holm-adjusted p across authors, so
"some author's lift changed" keeps its 5% error when many authors are read at once (issue 20:
uncorrected, some author's interval excluded 0 in 0.205 of null runs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import linregress

from envduels.analysis.learning import CORRECTION, holm, learning_curves, ols_slope


def test_the_slope_p_is_the_t_test_of_ordinary_least_squares():
    x = np.array([1, 1, 2, 2, 3, 3, 4], float)
    y = np.array([0.1, 0.3, 0.2, 0.5, 0.4, 0.45, 0.7])
    out, ref = ols_slope(x, y), linregress(x, y)
    assert out["slope"] == pytest.approx(ref.slope) and out["p"] == pytest.approx(ref.pvalue)
    assert ols_slope(np.array([1.0, 2.0]), np.array([0.0, 1.0]))["p"] is None  # n < 3: no test
    assert ols_slope(np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.5, 0.5]))["p"] == 1.0  # flat, exact
    assert ols_slope(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.5, 1.0]))["p"] == 0.0  # exact line


def test_holm_adjusts_step_down_and_skips_missing_values():
    assert holm([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.06, 0.06])
    assert holm([0.5, 0.01]) == pytest.approx([0.5, 0.02])
    assert holm([None]) == [None]


def null_learning(rng: np.random.Generator, authors: int = 10, rounds: int = 3, envs: int = 4):
    """Environments whose lifts do not change over rounds: pairs with yh − y0 drawn alike."""
    env_rows, pair_rows = [], []
    for a in range(authors):
        for r in range(1, rounds + 1):
            for k in range(envs):
                e = f"a{a}-r{r}-{k}"
                env_rows.append({"env_id": e, "author": f"a{a}", "round": r, "valid": True})
                for s in range(6):
                    y0 = int(rng.random() < 0.4)
                    pair_rows.append({"env_id": e, "author": f"a{a}", "round": r, "domain": "logic", "solver": f"s{s}",
                                      "y0": y0, "yh": int(rng.random() < 0.6)})
    return pd.DataFrame(env_rows), pd.DataFrame(pair_rows)


def test_with_no_learning_holm_keeps_any_false_claim_near_5_percent_where_raw_intervals_do_not():
    """Ten authors, three rounds of four environments, lifts alike in every round: the slopes
    exactly as `learning_curves` computes them (`ols_slope` on environment lifts, `holm` across
    authors), without the tables around them."""
    rng = np.random.default_rng(20)
    rounds = np.repeat([1.0, 2.0, 3.0], 4)
    holm_hits = raw_hits = 0
    runs = 400
    for _ in range(runs):
        lifts = ((rng.random((10, 12, 6)) < 0.6).astype(float) - (rng.random((10, 12, 6)) < 0.4)).mean(axis=2)
        slopes = [ols_slope(rounds, lift) for lift in lifts]
        holm_hits += any(p < 0.05 for p in holm([s["p"] for s in slopes]))
        raw_hits += any(s["ci_low"] > 0 or s["ci_high"] < 0 for s in slopes)
    assert holm_hits / runs <= 0.08  # family-wise 0.05; 400 runs: sd 0.011
    assert raw_hits / runs >= 0.3  # ten authors' uncorrected intervals: 1 − 0.95¹⁰ ≈ 0.40


def test_learning_says_what_is_corrected_and_what_is_not():
    out = learning_curves(*null_learning(np.random.default_rng(1), authors=3))
    assert out["correction"] == CORRECTION
    assert "Holm-adjusted across authors" in CORRECTION and "not corrected" in CORRECTION
    ps = [a["lift_slope"]["p"] for a in out["authors"]]
    assert [a["lift_slope"]["p_holm"] for a in out["authors"]] == pytest.approx(holm(ps))
