"""The report's story on constructed runs with a known truth (tests/report/runs.py), read back
from a real run database: ties said as ties in one order, a lead that rests on a leaking hint
called out, a quickstart where no authored environment was valid, a single-solver run."""

from __future__ import annotations

import json
import re

import pytest

from envduels.analysis import analyze
from envduels.report.commands import leaderboard_command, report_command
from envduels.report.html import headline, render_html

from .reports import complete
from .runs import leak_run, quickstart_run, single_solver_run, tables_of, tied_run, write


def _report(tmp_path, build, name, capsys, bootstrap=200):
    run_dir = write(tmp_path / name, build(), name)
    assert report_command([run_dir], json_path=tmp_path / "r.json", html_path=tmp_path / "r.html",
                          bootstrap=bootstrap) == 0
    out = capsys.readouterr().out
    return run_dir, json.loads((tmp_path / "r.json").read_text()), (tmp_path / "r.html").read_text(), out


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", html)


def test_a_three_way_tie_is_said_as_level_in_every_rating_and_listed_by_name(tmp_path, capsys):
    run_dir, j, html, out = _report(tmp_path, tied_run, "tie", capsys)
    for kind in ("duel", "author", "solver"):
        assert [r["model"] for r in j["ratings"][kind]] == ["alpha", "beta", "gamma"]
        assert {round(r["rating"]) for r in j["ratings"][kind]} == {1000}
    assert "Authors are level: alpha, beta and gamma share the same author rating (1000); nothing in this run " \
           "tells them apart." in out
    assert "Solvers are level: alpha, beta and gamma share the same solver rating (1000)" in out
    assert "Duellists are level: alpha, beta and gamma" in out
    assert "Best author" not in out and "Best solver" not in out and "best solver" not in out
    # the metric tables follow the same order
    authors = html[html.index("<h3>Authors</h3>"):]
    assert authors.index("<td>alpha</td>") < authors.index("<td>beta</td>") < authors.index("<td>gamma</td>")
    leaderboard_command(run_dir, bootstrap=50)
    board = capsys.readouterr().out
    for table in board.split("rating (")[1:]:
        assert table.index("alpha") < table.index("beta") < table.index("gamma")


def test_a_duel_lead_that_comes_from_a_leaking_hint_is_called_out(tmp_path, capsys):
    _run_dir, j, html, out = _report(tmp_path, leak_run, "leak", capsys)
    envs = {e["id"]: e for e in j["environments"]}
    assert envs["r1-leaky-0"]["flags"] == ["hint_gated", "hint_leak"]
    assert j["ratings"]["duel"][0]["model"] == "leaky"
    lead = j["duel_flagged_lead"]
    assert lead["model"] == "leaky" and lead["environments"] == [{"id": "r1-leaky-0", "flags": ["hint_gated", "hint_leak"]}]
    assert lead["position_without"] > 1 and lead["models_without"] == 4
    said = (f"Caution: leaky's duel lead comes partly from an environment where the hint gives the answer away or "
            f"the puzzle cannot be solved without it: r1-leaky-0 (hint_gated, hint_leak); without them it would "
            f"place #{lead['position_without']} of 4.")
    assert said in out and said.replace("'", "&#39;") in _text(html)


def test_a_quickstart_whose_authored_environments_are_all_invalid_says_so_plainly(tmp_path, capsys):
    _run_dir, j, html, out = _report(tmp_path, quickstart_run, "quickstart", capsys)
    first = out.splitlines()[0]
    assert first.startswith("• No authored environment was valid: all 2 failed validation (reset() raised "
                            "NameError: name 'rng' is not defined), so nothing here measures authoring; the "
                            "solvers played only the 2 library environments of the fixed pool")
    assert "author rating" not in out.lower()
    assert "4 environments (2 valid), 32 episodes, 16 matched pairs, $0.75." in out
    text = _text(html)
    # empty plots are left out, each with one sentence saying why
    assert "Left out: this run has one round of valid authored environments" in text
    assert "Left out: it needs two or more models rated both as author and as solver; this run has 0." in text
    assert "No author rating: no authored environment was valid." in text
    # an invalid environment's drill-down never shows an empty hint
    assert "<strong>Hint:</strong> </p>" not in html and "<strong>Hint:</strong> <" not in html
    assert "No hint: the environment failed validation before one was recorded." in text


def test_a_single_solver_run_explains_why_there_is_no_solver_rating(tmp_path, capsys):
    run_dir, j, html, out = _report(tmp_path, single_solver_run, "solo", capsys)
    reason = ("this run has 1 solver (solo); a solver rating compares two or more solvers on common "
              "environments")
    assert f"No solver rating: {reason}." in out
    assert f"No solver rating: {reason}." in _text(html)
    assert j["ratings"]["author"][0]["model"] == "writer-a"
    leaderboard_command(run_dir, bootstrap=50)
    board = capsys.readouterr().out
    assert "not enough comparisons" not in board and "this run has 1 solver (solo)" in _text(board)


def test_bootstrap_zero_says_intervals_were_not_computed_because_of_it(tmp_path, capsys):
    run_dir, j, html, out = _report(tmp_path, leak_run, "b0", capsys, bootstrap=0)
    assert j["run"]["bootstrap"] == 0
    assert "Best author by rating: leaky (1415), but how sure that is is unknown: intervals were not computed " \
           "because --bootstrap is 0." in _text(out)
    assert "fewer than two environments" not in out and "fewer than two environments" not in html
    assert "intervals from resampling environments. No intervals: --bootstrap is 0." in _text(html)
    leaderboard_command(run_dir, bootstrap=0)
    board = _text(capsys.readouterr().out)
    assert "Author and solver intervals and ranks were not computed because --bootstrap is 0." in board


def test_several_runs_print_one_block_per_run_labelled_with_its_name(tmp_path, capsys):
    a = write(tmp_path / "a", tied_run(), "first-run")
    b = write(tmp_path / "b", leak_run(), "second-run")
    report_command([a, b], json_path=tmp_path / "r.json", html_path=None, bootstrap=20)
    out = capsys.readouterr().out
    assert out.index("first-run (") < out.index("Authors are level") < out.index("second-run (") < out.index("leaky")


def test_indistinguishable_authors_are_said_to_need_more_environments():
    rows = [{"model": m, "rating": r, "rank": 1, "ci_low": r - 300, "ci_high": r + 300, "points": 1.0, "games": 2.0}
            for m, r in (("b", 1100.0), ("a", 1000.0), ("c", 900.0))]
    j = _json(ratings={"author": rows, "solver": [], "duel": []})
    s = [x for x in headline(j) if x.startswith("Best author")][0]
    assert s.startswith("Best author by rating: b (1100, 95% interval 800 to 1400). Authors are indistinguishable: "
                        "no author is certainly ahead of any other at 95% confidence; you need more environments to "
                        "tell them apart (`envduels plan CONFIG --envs-per-author N` simulates how many).")


def test_a_statistical_tie_for_first_names_who_is_tied_and_who_is_behind():
    rows = [{"model": "b", "rating": 1200.0, "rank": 1, "ci_low": 1100.0, "ci_high": 1300.0, "points": 3.0, "games": 4.0},
            {"model": "a", "rating": 1150.0, "rank": 1, "ci_low": 1000.0, "ci_high": 1250.0, "points": 2.0, "games": 4.0},
            {"model": "c", "rating": 700.0, "rank": 3, "ci_low": 600.0, "ci_high": 800.0, "points": 1.0, "games": 4.0}]
    s = [x for x in headline(_json(ratings={"duel": rows, "author": [], "solver": []})) if "duellist" in x][0]
    assert s == ("Best duellist by rating: b (1200, 95% interval 1100 to 1300), statistically tied with a; "
                 "certainly behind: c. Matches won (a tie counts ½): b 3 of 4, a 2 of 4.")


def test_the_rank_rules_tied_and_above_lists_decide_who_is_tied_with_the_leader():
    # family-wise lists: b is certainly above c only; a is tied with b though a is certainly above c too
    rows = [{"model": "b", "rating": 1200.0, "rank": 1, "ci_low": 1000.0, "ci_high": None, "ci_note": "won every match: "
             "no finite upper bound", "above": ["c"], "below": [], "tied_with": ["a", "d"], "points": 3.0, "games": 3.0},
            {"model": "a", "rating": 1100.0, "rank": 1, "ci_low": 900.0, "ci_high": 1300.0, "above": ["c"], "below": [],
             "tied_with": ["b", "d"], "points": 2.0, "games": 3.0},
            {"model": "d", "rating": 1000.0, "rank": 1, "ci_low": 800.0, "ci_high": 1200.0, "above": [], "below": [],
             "tied_with": ["a", "b", "c"], "points": 1.0, "games": 3.0},
            {"model": "c", "rating": 700.0, "rank": 3, "ci_low": 600.0, "ci_high": 800.0, "above": [], "below": ["a", "b"],
             "tied_with": ["d"], "points": 0.0, "games": 3.0}]
    s = [x for x in headline(_json(ratings={"duel": rows, "author": [], "solver": []})) if "duellist" in x][0]
    assert s.startswith("Best duellist by rating: b (1200, 95% interval 1000 to ∞; won every match: no finite upper "
                        "bound), statistically tied with a and d; certainly behind: c.")


def test_a_clear_leader_is_said_with_its_interval_and_what_drives_it():
    rows = [{"model": "b", "rating": 1300.0, "rank": 1, "ci_low": 1200.0, "ci_high": 1400.0, "points": 3.0, "games": 4.0},
            {"model": "a", "rating": 700.0, "rank": 2, "ci_low": 600.0, "ci_high": 800.0, "points": 1.0, "games": 4.0}]
    j = _json(ratings={"solver": rows, "author": [], "duel": []},
              solvers=[{"model": "a", "without_hint_accuracy": 0.25}, {"model": "b", "without_hint_accuracy": 0.75}])
    s = [x for x in headline(j) if x.startswith("Best solver")][0]
    assert s == ("Best solver by rating: b (1300, 95% interval 1200 to 1400); clear first: certainly ahead of every "
                 "other solver. Solved without the hint: b 75%, a 25%.")


def test_counts_are_worded_in_the_singular_for_one():
    j = _json(run={"episodes": 1, "matched_pairs": 1, "cost_usd": None, "bootstrap": 100},
              environments=[{"valid": True, "author": "x", "fixed_pool": False}])
    assert "1 environment (1 valid), 1 episode, 1 matched pair." in headline(j)


def test_the_html_defines_every_column_where_it_appears_and_in_a_glossary(tmp_path):
    a = analyze(tables_of(write(tmp_path / "t", tied_run(), "t")), bootstrap=20, permutations=20)
    html = render_html([a])
    for column in ("hint gain", "rescue", "harm", "hint authoring", "design score", "teaching"):
        assert re.search(rf'<th title="[^"]+">{column}</th>', html), column
    glossary = html[html.index('id="glossary"'):]
    for term in ("lift", "hint authoring", "design score", "rescue", "harm", "teaching", "hint_leak", "level"):
        assert f"<dt>{term}</dt>" in glossary


def test_a_divergence_without_an_interval_says_why_and_claims_nothing():
    d = {"spearman": 0.66, "ci_low": None, "ci_high": None, "models": 6,
         "ci_note": "no interval: the author rating has none (too few environments per author)"}
    assert ("Authoring vs solving: Spearman ρ = 0.66 between author and solver ratings over 6 models; no interval: "
            "the author rating has none (too few environments per author), so this is a description of this run, "
            "not a finding.") in headline(_json(divergence=d))


def test_the_one_order_is_rank_then_printed_rating_then_name():
    from envduels.analysis.summary import ordered

    rows = [{"model": "z", "rating": 1100.2, "rank": 1}, {"model": "y", "rating": 1200.0, "rank": 2},
            {"model": "a", "rating": 1099.8, "rank": 1}, {"model": "top", "rating": 1300.0, "rank": 1}]
    assert [r["model"] for r in ordered(rows)] == ["top", "a", "z", "y"]  # a and z print as 1100: level


def test_cycles_are_said_beside_what_a_transitive_model_would_give():
    t = {"triads": 20, "cycles": 3, "significant_cycles": 1,
         "expected": {"cycles": {"mean": 0.4, "low": 0.0, "high": 2.0, "p_at_least_observed": 0.01}}}
    assert ("3 of 20 triads of models form a 3-cycle; 1 is significant (each edge backed by the environments behind "
            "it, Bonferroni-corrected); a transitive model replaying the same matches gives 0.4 (95% range 0 to 2).") \
        in headline(_json(transitivity=t))
    one = {"triads": 1, "cycles": 0, "significant_cycles": 0, "expected": None}
    assert "The one triad of models does not form a 3-cycle." in headline(_json(transitivity=one))


def _json(**over):
    base = {
        "run": {"episodes": 10, "matched_pairs": 4, "cost_usd": None, "bootstrap": 100},
        "environments": [{"valid": True, "author": "a", "fixed_pool": False},
                         {"valid": False, "author": "b", "fixed_pool": False}],
        "ratings": {"duel": [], "author": [], "solver": []},
        "solvers": [], "authors": [],
        "divergence": {"spearman": None, "ci_low": None, "ci_high": None, "models": 0},
        "transitivity": {"triads": 0, "cycles": 0, "significant_cycles": 0},
    }
    return complete(base | over)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one sentence per line in captured output
