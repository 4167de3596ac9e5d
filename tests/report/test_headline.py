"""The headline sentences at the top of the report."""

from __future__ import annotations

from envduels.report.html import headline

from .reports import complete


def summary(**over):
    base = {
        "run": {"episodes": 10, "matched_pairs": 4, "cost_usd": None, "bootstrap": 100},
        "environments": [{"valid": True, "author": "a"}, {"valid": False, "author": "b"}],
        "ratings": {"duel": [], "author": [], "solver": []},
        "solvers": [], "authors": [],
        "divergence": {"best_solver": None, "best_author": None, "best_solver_is_best_author": None,
                       "spearman": None, "ci_low": None, "ci_high": None, "models": 0},
        "transitivity": {"triads": 0, "cycles": 0, "significant_cycles": 0},
    }
    return complete(base | over)


def test_headline_gives_the_divergence_with_its_interval_and_says_when_it_cannot_decide():
    j = summary(divergence={"best_solver": "gpt", "best_author": "claude", "best_solver_is_best_author": False,
                            "spearman": -0.25, "ci_low": -0.6, "ci_high": 0.2, "models": 5})
    line = [s for s in headline(j) if s.startswith("Authoring vs solving")][0]
    assert line == ("Authoring vs solving: Spearman ρ = -0.25 between author and solver ratings over 5 models "
                    "(95% interval -0.60 to 0.20); the interval includes 0, so this run cannot say whether good "
                    "solvers are good authors.")


def test_headline_for_a_solver_only_evaluation_names_the_best_solver():
    rows = [{"model": "small", "rating": 1100.0, "rank": 1, "ci_low": 1050.0, "ci_high": 1150.0},
            {"model": "tiny", "rating": 900.0, "rank": 2, "ci_low": 850.0, "ci_high": 950.0}]
    lines = headline(summary(ratings={"duel": [], "author": [], "solver": rows}))
    assert "Best solver by rating: small (1100, 95% interval 1050 to 1150); clear first: certainly ahead of every " \
           "other solver." in lines
    assert lines[-1] == "2 environments (1 valid), 10 episodes, 4 matched pairs."


def test_headline_says_why_there_is_no_interval_when_nothing_could_be_resampled():
    rows = [{"model": "a", "rating": 1100.0, "rank": None, "ci_low": None, "ci_high": None, "points": 2, "games": 2},
            {"model": "b", "rating": 900.0, "rank": None, "ci_low": None, "ci_high": None, "points": 0, "games": 2}]
    lines = headline(summary(ratings={"duel": rows, "author": [], "solver": []}))
    assert "Best duellist by rating: a (1100), but how sure that is is unknown: no interval could be computed for " \
           "this run. Matches won (a tie counts ½): a 2 of 2, b 0 of 2." in lines


def test_headline_names_no_leader_when_the_top_ratings_are_level():
    level = [{"model": "cool", "rating": 1000.0, "rank": 1, "points": 1, "games": 2},
             {"model": "warm", "rating": 1000.0, "rank": 1, "points": 1, "games": 2}]
    lines = headline(summary(ratings={"duel": level, "author": [], "solver": level}))
    assert "Solvers are level: cool and warm share the same solver rating (1000); nothing in this run tells them " \
           "apart." in lines
    assert "Duellists are level: cool and warm share the same duel rating (1000); nothing in this run tells them " \
           "apart." in lines
