"""The viewer's environments table: rates equal but for rounding sort as equal, by env id."""

from __future__ import annotations

from envduels.view._format import sort_rows


def test_lifts_equal_but_for_their_last_bit_sort_by_env_id_in_either_order():
    a = 7 / 10 - 4 / 10  # a lift of 0.3 over 10 pairs: 0.29999999999999993
    b = 3 / 10 - 0 / 10  # and another: 0.3
    assert a != b
    rows = [{"env_id": "e2", "lift": a}, {"env_id": "e1", "lift": b}, {"env_id": "e3", "lift": 0.5},
            {"env_id": "e0", "lift": None}]
    assert [x["env_id"] for x in sort_rows(rows, "lift", False)] == ["e1", "e2", "e3", "e0"]
    assert [x["env_id"] for x in sort_rows(rows, "lift", True)] == ["e3", "e2", "e1", "e0"]
    # swapping which environment got which rounding changes nothing
    swapped = [{"env_id": "e2", "lift": b}, {"env_id": "e1", "lift": a}] + rows[2:]
    assert [x["env_id"] for x in sort_rows(swapped, "lift", False)] == ["e1", "e2", "e3", "e0"]


def test_counts_and_names_sort_as_they_are():
    rows = [{"env_id": "b", "episodes": 4}, {"env_id": "a", "episodes": 4}, {"env_id": "c", "episodes": 1}]
    assert [x["env_id"] for x in sort_rows(rows, "episodes", False)] == ["c", "a", "b"]
