"""3-cycles and stochastic transitivity on planted and transitive win matrices."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from envduels.analysis import analyze, fit_bradley_terry, simulate_tournament, transitivity

NAMES = ["A", "B", "C", "D"]


def planted_cycle() -> np.ndarray:
    s = np.zeros((4, 4))
    for win, lose in (("A", "B"), ("B", "C"), ("C", "A")):
        s[NAMES.index(win), NAMES.index(lose)], s[NAMES.index(lose), NAMES.index(win)] = 38, 2
    for k in range(3):  # D loses to everyone, transitively
        s[k, 3], s[3, k] = 30, 10
    return s


def test_a_planted_significant_cycle_is_found_with_its_members():
    s = planted_cycle()
    t = transitivity(s, NAMES, fit_bradley_terry(s))
    assert (t["triads"], t["cycles"], t["significant_cycles"]) == (4, 1, 1)
    assert set(t["cycle_list"][0]["models"]) == {"A", "B", "C"}
    assert t["cycle_list"][0]["significant"] is True
    # every chain through the cycle violates weak transitivity (A>B>C but C>A)
    assert t["wst_violations"] > 0
    assert t["bt_log_loss"] > t["saturated_log_loss"]


def test_a_weak_cycle_is_raw_but_not_significant():
    s = planted_cycle()
    for a, b in ((0, 1), (1, 2), (2, 0)):
        s[a, b], s[b, a] = 22, 18
    t = transitivity(s, NAMES)
    assert (t["cycles"], t["significant_cycles"]) == (1, 0)


def test_transitive_data_reports_no_cycle_and_no_violation():
    theta = np.array([1.5, 0.5, -0.5, -1.5])
    p = expit(theta[:, None] - theta[None, :])
    s = np.round(40 * p)
    np.fill_diagonal(s, 0)
    t = transitivity(s, NAMES, fit_bradley_terry(s))
    assert (t["triads"], t["cycles"], t["significant_cycles"]) == (4, 0, 0)
    assert t["wst_violations"] == 0.0 and t["sst_violations"] == 0.0
    assert t["bt_log_loss"] == pytest.approx(t["saturated_log_loss"], abs=0.01)


def test_no_meetings_means_no_rates():
    t = transitivity(np.zeros((3, 3)), ["a", "b", "c"])
    assert t["triads"] == 0 and t["wst_violations"] is None and t["bt_log_loss"] is None


def test_a_simulated_transitive_tournament_has_no_significant_cycle():
    run = simulate_tournament(players=8, envs_per_author=4, rounds=2, seed=5, ability=list(np.linspace(-2, 2, 8)))
    t = analyze(run.tables, bootstrap=50, permutations=50).json["transitivity"]
    assert t["triads"] == 56 and t["significant_cycles"] == 0


# Latent strengths with a rock-paper-scissors structure in the duel: m00 (a fair solver who writes
# hard, hint-less environments) beats m01 (a poor solver whose easy environments teach well), m01
# beats m02 (a poor solver who writes very hard environments), and m02 beats m00. Expected net
# points per matched pair are 0.4-0.7 on each edge, in the direction of the cycle.
CYCLE = {"ability": [1.5, -3.5, -3.0], "author_difficulty": [2.0, -1.0, 4.0], "author_teaching": [0.0, 5.0, 3.5]}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cycle_planted_in_latent_strengths_is_found_through_the_whole_pipeline(seed):
    """Two rounds: two matches per pair, so no per-match interval could ever clear ½; the
    test over the 20 environments behind each side of a match does."""
    run = simulate_tournament(players=3, envs_per_author=10, rounds=2, seeds=4, seed=seed, transcripts=False,
                              **CYCLE)
    t = analyze(run.tables, bootstrap=1000, seed=seed, permutations=20).json["transitivity"]
    assert (t["triads"], t["cycles"], t["significant_cycles"], t["significance"]) == (1, 1, 1, "environments")
    assert t["cycle_list"] == [{"models": ["m00", "m01", "m02"], "significant": True}]


@pytest.mark.parametrize("seed", [0, 1])
def test_transitive_latent_strengths_at_a_realistic_size_give_no_significant_cycle(seed):
    run = simulate_tournament(players=8, envs_per_author=10, rounds=2, seeds=4, seed=seed, transcripts=False,
                              ability=list(np.linspace(-2, 2, 8)))
    t = analyze(run.tables, bootstrap=1000, seed=seed, permutations=20).json["transitivity"]
    assert t["triads"] == 56 and t["significant_cycles"] == 0 and t["significance"] == "environments"


def test_edges_are_judged_by_the_share_of_draws_each_model_wins():
    s = np.array([[0, 2, 0], [0, 0, 2], [2, 0, 0]], float)  # a raw cycle, two matches per pair
    draws = np.repeat(s[None], 1000, axis=0)
    assert transitivity(s, ["a", "b", "c"], draws=draws)["significant_cycles"] == 1
    # Bonferroni over 3 pairs: an edge may fail in at most 0.05/6 of the draws (8 of 1,000)
    draws[:8, 0, 1], draws[:8, 1, 0] = 0, 2
    assert transitivity(s, ["a", "b", "c"], draws=draws)["significant_cycles"] == 1
    draws[8, 0, 1], draws[8, 1, 0] = 1, 1  # a tie in one more draw: a does not beat b there
    assert transitivity(s, ["a", "b", "c"], draws=draws)["significant_cycles"] == 0
    # without draws: Wilson intervals over two matches per pair cannot clear ½
    assert transitivity(s, ["a", "b", "c"])["significant_cycles"] == 0


def test_a_perfect_cycle_rates_everyone_alike_and_scale_reports_no_correlation_without_warning():
    import warnings

    run = simulate_tournament(players=3, envs_per_author=10, rounds=2, seeds=4, seed=0, transcripts=False, **CYCLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        j = analyze(run.tables, bootstrap=100, seed=0, permutations=20).json
    assert len({round(r["rating"], 6) for r in j["ratings"]["duel"]}) == 1  # 2:0 on every edge of the cycle
    assert j["scale"]["duel"]["spearman"] is None and len(j["scale"]["duel"]["points"]) == 3
