"""The headline sentences at the top of the report."""

from __future__ import annotations

from envduels.report.html import headline


def summary(**over):
    base = {
        "run": {"episodes": 10, "matched_pairs": 4, "cost_usd": None},
        "environments": [{"valid": True}, {"valid": False}],
        "ratings": {"duel": [], "author": [], "solver": []},
        "divergence": {"best_solver": None, "best_author": None, "best_solver_is_best_author": None,
                       "spearman": None, "ci_low": None, "ci_high": None},
        "transitivity": {"triads": 0, "cycles": 0, "significant_cycles": 0},
    }
    return base | over


def test_headline_says_when_the_best_solver_is_not_the_best_author():
    j = summary(divergence={"best_solver": "gpt", "best_author": "claude", "best_solver_is_best_author": False,
                            "spearman": -0.25, "ci_low": -0.6, "ci_high": 0.2})
    first = headline(j)[0]
    assert first.startswith("The best solver, gpt, is not the best author (that is claude).")
    assert "-0.25" in first and "-0.60 to 0.20" in first


def test_headline_for_a_solver_only_evaluation_names_the_best_solver():
    j = summary(ratings={"duel": [], "author": [], "solver": [{"model": "small", "rating": 1100.0, "rank": 1}]})
    lines = headline(j)
    assert lines[0].startswith("Best solver: small (solver rating 1100)")
    assert lines[1] == "2 environments (1 valid), 10 episodes, 4 matched pairs."


def test_headline_claims_no_rank_when_there_was_nothing_to_resample():
    rows = [{"model": "a", "rating": 1100.0, "rank": None, "ci_low": None, "ci_high": None},
            {"model": "b", "rating": 900.0, "rank": None, "ci_low": None, "ci_high": None}]
    lines = headline(summary(ratings={"duel": rows, "author": [], "solver": []}))
    assert "Top of the duel table: a (1100): fewer than two environments, so no interval and no rank." in lines


def test_headline_names_no_leader_when_the_top_ratings_are_level():
    level = [{"model": "cool", "rating": 1000.0, "rank": 1}, {"model": "warm", "rating": 1000.0, "rank": 1}]
    lines = headline(summary(ratings={"duel": level, "author": [], "solver": level}))
    assert lines[0].startswith("No solver stood out: cool, warm share the top solver rating (1000);")
    assert lines[1] == "No model leads the duel table: cool, warm are level (1000)."
