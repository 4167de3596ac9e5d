"""SPEC §5 metrics on hand-built tables, against values worked out by hand (see tables.hand_run)."""

from __future__ import annotations

import pytest

from envduels.analysis import (
    author_metrics,
    design_scores,
    environment_flags,
    learnability,
    matched_pairs,
    mcnemar_exact,
    solver_metrics,
)

from .tables import env, hand_run, pair, tables


def by_model(rows):
    return {r["model"]: r for r in rows}


def test_matched_pairs_drop_self_play_incomplete_and_error():
    p = matched_pairs(hand_run().episodes)
    assert len(p) == 8
    assert not p["self_play"].any()
    assert set(zip(p["env_id"], p["solver"], p["seed"], strict=True)) == {
        ("eA1", "B", 0), ("eA1", "B", 1), ("eA1", "C", 0), ("eA2", "B", 0), ("eA2", "C", 0),
        ("eB1", "A", 0), ("eB1", "A", 1), ("eB1", "C", 0)}


def test_solver_metrics_equal_hand_computed_values():
    s = by_model(solver_metrics(hand_run()))
    b, c, a = s["B"], s["C"], s["A"]
    assert b["hint_gain"] == pytest.approx(0.0)
    assert b["hint_rescue"] == 1.0 and b["hint_harm"] == 0.5
    assert b["without_hint_accuracy"] == pytest.approx(2 / 3) and b["with_hint_accuracy"] == pytest.approx(2 / 3)
    # eA1 (logic) 0.5, eA2 (math) 1.0 -> mean of domain means
    assert b["canonical_autonomous_solve"] == pytest.approx(0.75)
    assert b["mcnemar_p"] == 1.0
    assert c["hint_gain"] == pytest.approx(1 / 3)
    assert c["hint_rescue"] == 0.5 and c["hint_harm"] == 0.0
    # logic: eA1 0 and eB1 1 -> 0.5; math: eA2 0 -> overall 0.25 (a plain mean over envs would be 1/3)
    assert c["canonical_autonomous_solve"] == pytest.approx(0.25)
    assert (c["episodes"], c["incomplete"], c["errors"]) == (10, 1, 1)
    assert a["hint_gain"] == 1.0 and a["hint_rescue"] == 1.0
    assert a["hint_harm"] is None  # A never solved without the hint: no data, not 0
    assert a["mcnemar_p"] == pytest.approx(0.5)
    assert a["self_play_episodes"] == 2 and a["episodes"] == 4


def test_author_metrics_equal_hand_computed_values():
    au = by_model(author_metrics(hand_run()))
    a, b, c = au["A"], au["B"], au["C"]
    assert (a["environments"], a["valid_environments"], a["invalid_environments"], a["author_faults"]) == (2, 2, 0, 1)
    # eA1 lift (1 + 0 + 0)/3 in logic, eA2 (-1 + 1)/2 = 0 in math
    assert a["hint_authoring"] == pytest.approx(1 / 6)
    # eA1: seed 0 rates B=0, C=0 -> D=0; seed 1 has one panel solver -> no D. eA2: seed 0 B=1, C=0 -> D=1
    assert a["design_score"] == pytest.approx(0.5)
    assert b["hint_authoring"] == pytest.approx(2 / 3) and b["design_score"] == pytest.approx(1.0)
    assert (c["environments"], c["valid_environments"], c["invalid_environments"]) == (1, 0, 1)
    assert c["hint_authoring"] is None and c["design_score"] is None


def test_design_score_normalises_by_floor_n_squared_over_four():
    t = tables(["A", "B", "C", "D"], [env("e", "A")], [
        pair("e", "A", "B", 0, 0, 0, trial=0), pair("e", "A", "B", 0, 0, 0, trial=1),
        pair("e", "A", "C", 0, 1, 1, trial=0), pair("e", "A", "C", 0, 0, 1, trial=1),
        pair("e", "A", "D", 0, 1, 1, trial=0), pair("e", "A", "D", 0, 1, 1, trial=1)])
    # rates 0, 0.5, 1: (0.5 + 1 + 0.5) / floor(9/4) = 1.0
    assert design_scores(matched_pairs(t.episodes)).loc["e", "design"] == pytest.approx(1.0)


def test_mcnemar_exact_is_the_two_sided_binomial_test():
    assert mcnemar_exact(0, 0) is None
    assert mcnemar_exact(5, 0) == pytest.approx(2 * 0.5**5)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 2**10)


def test_flags_gated_leak_and_unsolved_use_the_panel_only():
    t = tables(["A", "B", "C"], [
        env("gated", "A", hint="Press red first"), env("unsolved", "A"), env("selfwin", "B"), env("fine", "C")], [
        pair("gated", "A", "B", 0, 0, 1, win_action=" press RED "), pair("gated", "A", "C", 0, 0, 1),
        pair("unsolved", "A", "B", 0, 0, 0), pair("unsolved", "A", "C", 0, 0, 0),
        pair("selfwin", "B", "B", 0, 1, 1), pair("selfwin", "B", "A", 0, 0, 0),
        pair("fine", "C", "A", 0, 1, 1, win_action="ab"), pair("fine", "C", "B", 0, 0, 1)])
    flags = environment_flags(t)
    assert flags["gated"] == ["hint_gated", "hint_leak"]
    assert flags["unsolved"] == ["unsolved_with_hint"]
    assert flags["selfwin"] == ["unsolved_with_hint"]  # the author's own win does not count
    assert flags["fine"] == []  # "ab" is shorter than 3 characters: never a leak


def test_learnability_is_p_times_one_minus_p_of_the_no_hint_rate():
    t = tables(["A", "B"], [env("e", "A")], [
        pair("e", "A", "B", 0, 1, 1), pair("e", "A", "B", 1, 0, 1), pair("e", "A", "B", 2, 0, 0), pair("e", "A", "B", 3, 1, 0)])
    row = learnability(matched_pairs(t.episodes)).iloc[0]
    assert (row["p"], row["learnability"]) == (0.5, 0.25)


def test_a_missing_domain_is_balanced_as_its_own_domain():
    import pandas as pd

    from envduels.analysis import domain_balanced

    v = pd.Series([1.0, 0.0, 0.0, float("nan")])
    d = pd.Series(["logic", None, None, "math"])
    assert domain_balanced(v, d) == pytest.approx(0.5)
    assert domain_balanced(pd.Series([float("nan")]), pd.Series(["x"])) is None


def test_common_panel_solve_compares_solvers_only_on_shared_environments():
    from envduels.analysis import common_panel_solve

    t = tables(["A", "B", "C", "D"], [env("e1", "A"), env("e2", "A"), env("e3", "D")], [
        pair("e1", "A", "B", 0, 1, 1), pair("e1", "A", "C", 0, 0, 1),
        pair("e2", "A", "B", 0, 1, 1), pair("e2", "A", "C", 0, 1, 1),
        pair("e3", "D", "C", 0, 1, 1)])
    out = common_panel_solve(t)
    # B and C share e1 (1 vs 0) and e2 (1 vs 1): B +0.5 over C; e3 is C's alone
    assert out == {"B": 0.5, "C": -0.5}
