"""The transfer statistics: predictors from hand-built tables, correlations with known values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from transfer_tables import pair_rows, tables

from envduels.analysis.transfer import (
    _coefficient,
    correlate_gains,
    correlation,
    critical_r,
    fisher_interval,
    panel_pairs,
    unit_predictors,
)


def _two_pool_run():
    eps = []
    # alice's env a1: bob rescued on seed 1, fails both on seed 2; carol passes cold on seed 1
    eps += pair_rows("a1", "alice", "bob", 1, 0, 1) + pair_rows("a1", "alice", "bob", 2, 0, 0)
    eps += pair_rows("a1", "alice", "carol", 1, 1, 1) + pair_rows("a1", "alice", "carol", 2, 0, 1)
    # self-play and an incomplete episode never count
    eps += pair_rows("a1", "alice", "alice", 1, 0, 1)
    bad = pair_rows("a1", "alice", "bob", 3, 0, 1)
    bad[0]["outcome"] = "incomplete"
    eps += bad
    # bob's env b1: alice fails cold and is rescued on both seeds
    eps += pair_rows("b1", "bob", "alice", 1, 0, 1) + pair_rows("b1", "bob", "alice", 2, 0, 1)
    return tables([], eps)


def test_matched_pairs_drop_self_play_and_incomplete_pairs():
    pairs = panel_pairs(_two_pool_run().episodes)
    assert len(pairs) == 6
    assert set(pairs["solver"]) == {"bob", "carol", "alice"}
    assert not ((pairs["env_id"] == "a1") & (pairs["solver"] == "alice")).any()


def test_pool_predictors_equal_hand_computed_values():
    pred = unit_predictors(_two_pool_run().episodes, "author")
    a = pred.loc["alice"]
    # pairs on a1: (0,1) (0,0) (1,1) (0,1): lift 2/4
    assert a["mean_hint_lift"] == pytest.approx(0.5)
    # bob p=0 -> 0; carol p=1/2 -> 1/4; mean 1/8
    assert a["learnability"] == pytest.approx(0.125)
    # cold failures: (0,1) (0,0) (0,1) -> 2/3 rescued
    assert a["rescue_rate"] == pytest.approx(2 / 3)
    # seed 1: carol passes cold -> not all-fail; seed 2: all fail
    assert a["all_fail_fraction"] == pytest.approx(0.5)
    b = pred.loc["bob"]
    assert (b["mean_hint_lift"], b["learnability"], b["rescue_rate"], b["all_fail_fraction"]) == (
        1.0, 0.0, 1.0, 1.0)


def test_environment_predictors_are_per_environment():
    pred = unit_predictors(_two_pool_run().episodes, "env_id")
    assert list(pred.index) == ["a1", "b1"]
    assert pred.loc["b1", "mean_hint_lift"] == 1.0


def _exact_correlation(n: int, rho: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """y whose sample Pearson correlation with x is exactly rho."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 0.6, n)
    xc = x - x.mean()
    z = rng.normal(size=n)
    z -= z.mean()
    z -= (z @ xc) / (xc @ xc) * xc
    y = rho * xc / np.linalg.norm(xc) + np.sqrt(1 - rho**2) * z / np.linalg.norm(z)
    return x, y


def _bivariate_normal(rng: np.random.Generator, reps: int, n: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(reps, n))
    return x, rho * x + np.sqrt(1 - rho**2) * rng.normal(size=(reps, n))


@pytest.mark.parametrize("n", [5, 10, 20])
@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_pearson_intervals_cover_the_true_correlation_95_percent_of_the_time(n, rho):
    """Repeated samples with a known population ρ (the percentile bootstrap covered 0.89–0.91)."""
    x, y = _bivariate_normal(np.random.default_rng(int(10 * n + 100 * rho)), 4000, n, rho)
    r = _coefficient(x, y, "pearson")
    covered = [lo <= rho <= hi for lo, hi in (fisher_interval(float(v), n, "pearson") for v in r)]
    assert 0.93 <= np.mean(covered) <= 0.97, np.mean(covered)


@pytest.mark.parametrize("n", [10, 20])
@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_spearman_intervals_cover_the_population_rank_correlation(n, rho):
    x, y = _bivariate_normal(np.random.default_rng(int(10 * n + 100 * rho) + 1), 4000, n, rho)
    truth = 6 / np.pi * np.arcsin(rho / 2)  # Spearman's ρ of a bivariate normal
    intervals = [fisher_interval(float(v), n, "spearman") for v in _coefficient(x, y, "spearman")]
    covered = [iv is not None and iv[0] <= truth <= iv[1] for iv in intervals]
    assert 0.93 <= np.mean(covered) <= 0.97, np.mean(covered)


def test_correlation_reports_the_fisher_interval_and_none_where_it_cannot_be_trusted():
    x, y = _exact_correlation(24, 0.8, seed=3)
    c = correlation(x, y, "pearson", bootstrap=1, permutations=500, rng=np.random.default_rng(0))
    half = 1.959964 / np.sqrt(21)
    assert (c.ci_low, c.ci_high) == pytest.approx((np.tanh(np.arctanh(0.8) - half), np.tanh(np.arctanh(0.8) + half)))
    assert fisher_interval(0.5, 9, "spearman") is None  # too few units for the rank approximation
    assert fisher_interval(1.0, 12, "spearman") is None  # z = atanh(1) is infinite
    assert fisher_interval(0.5, 3, "pearson") is None


def test_the_verdict_follows_the_permutation_p_value_it_prints():
    # r = 0.675 is below the critical |r| = 0.707 for n = 8, yet the exact permutation p is 0.025
    x = np.array([-0.57, -1.03, -1.04, 0.27, 0.36, 1.32, -0.01, 1.04])
    y = np.array([0.72, 0.2, -2.62, 1.17, 0.52, 1.26, 0.29, 1.03])
    names = [f"p{i}" for i in range(8)]
    res = correlate_gains(_predictors(dict(zip(names, x, strict=True))), pd.Series(dict(zip(names, y, strict=True))),
                          unit="author", bootstrap=100, seed=0)
    lift = res.results[0]
    assert lift.pearson.p_value == pytest.approx(62 / 2520)  # 992 of the 40,320 orderings
    assert "p = 0.0246 < alpha = 0.05 (the permutation test decides; critical |r| = 0.71 for n = 8)" in lift.conclusion
    assert "gained higher in training" in lift.conclusion and "no evidence" not in lift.conclusion


def test_spearman_of_a_monotone_relation_is_one_with_exact_permutation_p():
    x = np.array([0.1, 0.2, 0.35, 0.4, 0.6, 0.9])
    c = correlation(x, np.exp(5 * x), "spearman", bootstrap=500, permutations=0,
                    rng=np.random.default_rng(0))
    assert c.r == pytest.approx(1.0)
    # exactly 2 of the 720 orderings reach |rho| = 1 (the identity and its reverse)
    assert c.permutation == "exact"
    assert c.p_value == pytest.approx(2 / 720)


def test_same_seed_gives_identical_results():
    x, y = _exact_correlation(15, 0.5, seed=1)
    a = correlation(x, y, "pearson", bootstrap=300, permutations=300, rng=np.random.default_rng(7))
    b = correlation(x, y, "pearson", bootstrap=300, permutations=300, rng=np.random.default_rng(7))
    assert a == b


def test_critical_r_matches_the_t_distribution_table():
    assert critical_r(10) == pytest.approx(0.632, abs=1e-3)
    assert critical_r(4) == pytest.approx(0.950, abs=1e-3)
    assert critical_r(2) is None


def _predictors(values: dict[str, float]) -> pd.DataFrame:
    df = pd.DataFrame({"mean_hint_lift": values})
    for col in ("learnability", "rescue_rate", "all_fail_fraction"):
        df[col] = df["mean_hint_lift"] * 0.5 + 0.1
    df.index.name = "author"
    return df


def test_three_pools_are_declared_too_few_to_conclude_anything():
    pred = _predictors({"a": 0.1, "b": 0.5, "c": 0.9})
    gains = pd.Series({"a": 0.0, "b": 0.2, "c": 0.3})
    res = correlate_gains(pred, gains, unit="author", bootstrap=200, seed=0)
    lift = res.results[0]
    assert lift.n == 3
    assert lift.pearson.ci_low is None
    assert "too few to conclude anything" in lift.conclusion


def test_a_correlation_below_the_critical_r_is_called_no_evidence():
    x, y = _exact_correlation(8, 0.3, seed=2)
    names = [f"p{i}" for i in range(8)]
    res = correlate_gains(_predictors(dict(zip(names, x, strict=True))), pd.Series(dict(zip(names, y, strict=True))),
                          unit="author", bootstrap=300, seed=0)
    lift = res.results[0]
    assert lift.pearson.r == pytest.approx(0.3)
    assert lift.critical_r == pytest.approx(0.707, abs=1e-3)
    assert "no evidence" in lift.conclusion


def test_json_has_null_for_missing_predictor_values():
    pred = _predictors({"a": 0.1, "b": 0.5, "c": 0.9, "d": 0.4})
    pred.loc["d", "rescue_rate"] = np.nan
    gains = pd.Series({"a": 0.0, "b": 0.2, "c": 0.3, "d": 0.1})
    doc = correlate_gains(pred, gains, unit="author", bootstrap=100, seed=0).to_json()
    point_d = next(p for p in doc["points"] if p["unit"] == "d")
    assert point_d["rescue_rate"] is None
    assert next(r for r in doc["results"] if r["predictor"] == "rescue_rate")["n"] == 3


def test_transfer_pairs_are_the_report_pairs_and_a_replayed_episode_counts_once_the_last_time():
    from envduels.analysis import matched_pairs as report_pairs

    eps = pair_rows("a1", "alice", "bob", 1, 0, 0) + pair_rows("a1", "alice", "carol", 1, 1, 1)
    # bob's hinted episode was played again (a resumed run): the later row is the one that counts
    replay = pair_rows("a1", "alice", "bob", 1, 0, 1)[1]
    eps.append(replay)
    episodes = tables([], eps).episodes
    pairs = panel_pairs(episodes)
    assert pairs[pairs["solver"] == "bob"][["y0", "yh"]].values.tolist() == [[0, 1]]
    expected = report_pairs(episodes)[["env_id", "author", "solver", "seed", "trial", "y0", "yh"]]
    pd.testing.assert_frame_equal(pairs, expected.astype({"y0": int, "yh": int}), check_dtype=False)
