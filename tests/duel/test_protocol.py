"""The episode protocol on its own (pure: no sandbox): the state machine every player drives."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import envduels.duel.protocol as protocol
from envduels.duel.protocol import FORMAT_ERROR, SYSTEM_PROMPT, Episode, EpisodeOver


def test_a_format_error_spends_the_turn_and_the_cap_ends_the_episode():
    seen = []
    ep = Episode(2, on_event=seen.append)
    assert ep.start("grid") == "Observation: grid\n\nRespond with exactly one action for this turn inside \\boxed{}."
    assert ep.act("no box") is None and (ep.turn, ep.done) == (1, False)
    assert ep.transcript[-1] == {"role": "user", "content": FORMAT_ERROR, "format_error": True}
    assert ep.act("still none") is None
    assert (ep.done, ep.outcome, ep.reason) == (True, "failure", "turn cap 2 reached")
    assert seen == ep.transcript and seen[0] == {"role": "system", "content": SYSTEM_PROMPT}
    with pytest.raises(EpisodeOver):
        ep.act("\\boxed{late}")


def test_success_is_termination_with_positive_reward_and_intermediate_rewards_do_not_win():
    ep = Episode(5, hint="go left")
    assert ep.start("maze").startswith("Hint: go left\n\nObservation: maze")
    assert ep.act("a \\boxed{x} then \\boxed{left}", input_tokens=3) == "\\boxed{left}"
    assert ep.transcript[2] == {"role": "assistant", "content": "a \\boxed{x} then \\boxed{left}",
                                "turn": 1, "input_tokens": 3}
    assert ep.observe("closer", 0.5, False, False).startswith("Observation: closer")
    assert not ep.done
    ep.act("\\boxed{left}")
    assert ep.observe("out", 0.0, True, False) is None
    assert (ep.outcome, ep.reason) == ("failure", "terminated with reward 0")
    won = Episode(5)
    won.start("maze")
    won.act("\\boxed{left}")
    won.observe("out", 1.0, True, True)
    assert (won.success, won.reason) == (True, "terminated with reward 1")


def test_truncation_ends_as_failure_and_a_fault_is_logged_before_the_outcome():
    ep = Episode(5)
    ep.start("s")
    ep.act("\\boxed{a}")
    ep.observe("t", 0.0, False, True)
    assert (ep.outcome, ep.reason) == ("failure", "truncated by the environment")
    faulty = Episode(5)
    faulty.start("s")
    faulty.act("\\boxed{a}")
    faulty.step_failed("boom")
    faulty.end("incomplete", "environment fault: boom")
    faulty.end("failure", "ignored: it already ended")
    assert faulty.transcript[-2:] == [
        {"role": "env", "action": "\\boxed{a}", "fault": "boom"},
        {"role": "outcome", "content": "incomplete: environment fault: boom", "outcome": "incomplete"}]
    with pytest.raises(EpisodeOver):
        Episode(3).observe("no action taken", 0.0, False, False)


def test_the_protocol_imports_nothing_but_the_standard_library_and_the_duel_layer():
    tree = ast.parse(Path(protocol.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    own = {name for name in names if name.startswith("envduels.")}
    assert own <= {"envduels.duel.outcomes"}, own   # the names outcomes are spelled in
    assert {name.split(".")[0] for name in names - own} <= {"__future__", "re", "collections",
                                                            "typing"}, names
