"""Export selection on hand-built tables: every filter keeps exactly what it says."""

from __future__ import annotations

import pytest
from transfer_tables import env_row, pair_rows, tables

from envduels.errors import UserError
from envduels.export import Filters, records, select


def _run():
    envs = [
        env_row("a1", "alice", round=1, benchmark_seeds=[1, 2]),
        env_row("a2", "alice", round=2, benchmark_seeds=[1, 2]),
        env_row("b1", "bob", round=1, benchmark_seeds=[1, 2]),
        env_row("bad", "bob", round=1, valid=False, invalid_reason="no class"),
    ]
    eps = []
    # a1: carol rescued on seed 1, passes cold on seed 2; bob fails both everywhere
    eps += pair_rows("a1", "alice", "carol", 1, 0, 1) + pair_rows("a1", "alice", "carol", 2, 1, 1)
    eps += pair_rows("a1", "alice", "bob", 1, 0, 0) + pair_rows("a1", "alice", "bob", 2, 0, 0)
    # a2: everyone passes cold (panel rate 1.0)
    eps += pair_rows("a2", "alice", "carol", 1, 1, 1) + pair_rows("a2", "alice", "bob", 1, 1, 1)
    # b1: carol fails even with the hint on both seeds
    eps += pair_rows("b1", "bob", "carol", 1, 0, 0) + pair_rows("b1", "bob", "carol", 2, 0, 0)
    flags = {"a1": [], "a2": [], "b1": ["unsolved_with_hint"]}
    return envs, tables(envs, eps), flags


def _select(filters: Filters) -> list:
    envs, t, flags = _run()
    return select(envs, t, filters, flags=flags)


def _ids(filters: Filters) -> list[str]:
    return [i.env_id for i in _select(filters)]


def test_only_valid_environments_are_exported_in_table_order():
    assert _ids(Filters()) == ["a1", "a2", "b1"]


def test_author_round_and_flag_filters():
    assert _ids(Filters(authors=["alice"])) == ["a1", "a2"]
    assert _ids(Filters(rounds=[2])) == ["a2"]
    assert _ids(Filters(flags=["unsolved_with_hint"])) == ["b1"]


def test_learnable_band_drops_always_solved_and_never_solved():
    # panel no-hint rates: a1 1/4, a2 1, b1 0
    assert _ids(Filters(min_pass=0.05, max_pass=0.95)) == ["a1"]


def test_target_keeps_only_the_seeds_it_fails_cold_and_passes_with_the_hint():
    items = _select(Filters(target="carol"))
    assert [(i.env_id, i.seeds) for i in items] == [("a1", [1])]


def test_per_solver_results_are_carried():
    a1 = _select(Filters())[0]
    carol = next(s for s in a1.solvers if s["solver"] == "carol")
    assert carol == {"solver": "carol", "no_hint_rate": 0.5, "hinted_rate": 1.0,
                     "learnability": 0.25, "pairs": 2}
    assert a1.panel_no_hint_rate == 0.25
    assert a1.learnability == pytest.approx(0.125)


def test_records_are_one_per_environment_and_seed():
    rows = records(_select(Filters(authors=["alice"])))
    assert [(r["id"], r["seed"]) for r in rows] == [("a1", 1), ("a1", 2), ("a2", 1), ("a2", 2)]
    assert rows[0]["hint"] == "hint of a1"
    assert rows[0]["max_turns"] == 10


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (Filters(authors=["zed"]), "--author 'zed' wrote no environment in this run; authors: alice, bob"),
        (Filters(rounds=[7]), "--round 7 is not a round of this run; rounds: 1, 2"),
        (Filters(flags=["shiny"]), "--flag 'shiny' is not a flag"),
        (Filters(min_pass=1.5), "--min-pass 1.5 is outside [0, 1]"),
        (Filters(min_pass=0.9, max_pass=0.1), "--min-pass 0.9 is above --max-pass 0.1"),
        (Filters(target="nobody"), "--target 'nobody' is no player of this run"),
    ],
)
def test_bad_filters_are_one_line_user_errors(filters, message):
    with pytest.raises(UserError) as err:
        _select(filters)
    assert message in err.value.message
    assert "\n" not in err.value.message
