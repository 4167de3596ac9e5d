"""The hinted rescue policy on scripted groups: exact decisions, exact counters."""

from __future__ import annotations

import pytest

from envduels.rl import HintedRescue, RescueCounters

NIM = ("nim", 7)
GUESS = ("number_guess", 3)


def test_an_all_zero_group_is_re_rolled_once_with_hint_1():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 0, 0, 0]) == 1
    assert rescue.decide(NIM, [0, 1, 0, 0]) is None
    (record,) = rescue.closed
    assert record.levels == (0, 1)
    assert record.kept_rewards == (0.0, 1.0, 0.0, 0.0)


def test_a_mixed_group_is_kept_without_a_re_roll():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 1, 0, 0]) is None
    assert rescue.closed[0].levels == (0,)


def test_an_all_success_group_is_kept_and_counted_constant():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [1, 1]) is None
    c = rescue.end_step(1)
    assert (c.hinted_group_fraction, c.constant_group_fraction) == (0.0, 1.0)


def test_a_re_rolled_group_still_all_zero_is_kept_and_counted_exhausted():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 0, 0, 0]) == 1
    assert rescue.decide(NIM, [0, 0, 0, 0]) is None   # never hint_2 by default
    c = rescue.end_step(1)
    assert c.groups == 1
    assert c.exhausted_group_fraction == 1.0
    assert c.constant_group_fraction == 1.0
    assert c.rescued_group_fraction == 0.0
    assert c.hinted_rollouts == 4


def test_hint_2_is_never_used_by_default_even_when_the_environment_has_one():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) == 1
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) is None


def test_graded_escalation_re_rolls_with_hint_2_after_a_failed_hint_1_roll():
    rescue = HintedRescue(escalate=True)
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) == 1
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) == 2
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) is None   # then kept: no third re-roll
    assert rescue.closed[0].levels == (0, 1, 2)
    assert rescue.end_step(1).hinted_rollouts == 4


def test_graded_escalation_stops_at_hint_1_when_it_rescues_or_there_is_no_hint_2():
    rescue = HintedRescue(escalate=True)
    assert rescue.decide(NIM, [0, 0], hint_levels=(1, 2)) == 1
    assert rescue.decide(NIM, [1, 0], hint_levels=(1, 2)) is None
    assert rescue.decide(GUESS, [0, 0], hint_levels=(1,)) == 1
    assert rescue.decide(GUESS, [0, 0], hint_levels=(1,)) is None
    assert [r.levels for r in rescue.closed] == [(0, 1), (0, 1)]


def test_an_environment_without_a_hint_keeps_its_all_zero_group_unhinted():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 0], hint_levels=()) is None
    c = rescue.end_step(1)
    assert (c.hinted_group_fraction, c.exhausted_group_fraction, c.constant_group_fraction) == (0.0, 0.0, 1.0)


def test_the_step_counters_of_four_scripted_groups_are_exact():
    rescue = HintedRescue()
    # group A: mixed cold -> kept;  B: all-zero -> rescued, trainable;  C: all-zero -> hinted
    # all-success (rescued, constant);  D: all-zero -> still all-zero (exhausted)
    assert rescue.decide(("a", 1), [1, 0, 0, 0]) is None
    assert rescue.decide(("b", 1), [0, 0, 0, 0]) == 1
    assert rescue.decide(("c", 1), [0, 0, 0, 0]) == 1
    assert rescue.decide(("d", 1), [0, 0, 0, 0]) == 1
    assert rescue.decide(("b", 1), [1, 1, 0, 0]) is None
    assert rescue.decide(("c", 1), [1, 1, 1, 1]) is None
    assert rescue.decide(("d", 1), [0, 0, 0, 0]) is None
    assert rescue.end_step(3) == RescueCounters(
        step=3, groups=4, no_hint_rollouts=16, hinted_rollouts=12,
        no_hint_success_fraction=1 / 16,
        hinted_group_fraction=3 / 4,
        rescued_group_fraction=2 / 4,
        rescued_trainable_group_fraction=1 / 4,
        constant_group_fraction=2 / 4,
        exhausted_group_fraction=1 / 4,
    )


def test_end_step_starts_afresh_and_an_empty_step_has_no_fractions():
    rescue = HintedRescue()
    rescue.decide(NIM, [1, 0])
    assert rescue.end_step(1).groups == 1
    c = rescue.end_step(2)
    assert (c.groups, c.no_hint_success_fraction, c.hinted_group_fraction) == (0, None, None)


def test_a_group_waiting_for_its_re_roll_stays_open_into_the_next_step():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [0, 0]) == 1
    assert rescue.end_step(1).groups == 0
    assert rescue.decide(NIM, [1, 0]) is None
    assert rescue.end_step(2).hinted_group_fraction == 1.0


def test_the_same_environment_and_seed_twice_in_a_step_are_two_groups():
    rescue = HintedRescue()
    assert rescue.decide(NIM, [1, 0]) is None
    assert rescue.decide(NIM, [0, 0]) == 1
    assert rescue.decide(NIM, [0, 0]) is None
    assert [r.levels for r in rescue.closed] == [(0,), (0, 1)]


def test_a_group_without_rollouts_is_a_bug_not_a_decision():
    with pytest.raises(ValueError, match="no rollouts"):
        HintedRescue().decide(NIM, [])
