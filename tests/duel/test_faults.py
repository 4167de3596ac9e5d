"""What a fault means for an episode is decided in `duel.faults` alone (issue 31): each family of
failure and phase gives one outcome and one reason, the ones the drivers record."""

from __future__ import annotations

import asyncio

import pytest

from envduels.duel.faults import (
    OutOfTime,
    Phase,
    ending,
    fail,
    not_played,
    one_line,
    session_ended,
)
from envduels.duel.outcomes import Flag, Outcome
from envduels.duel.protocol import Episode
from envduels.errors import UserError
from envduels.players import BadRequest, ContentRefused, ContextOverflow, ProviderError
from envduels.sandbox import EnvFault, SandboxStartError, SandboxUnavailable


@pytest.mark.parametrize(("err", "phase", "outcome", "reason"), [
    (SandboxStartError("fork failed (EAGAIN)"), Phase.START, Outcome.ERROR,
     "sandbox error: fork failed (EAGAIN)"),
    (SandboxStartError("node lost"), Phase.STEP, Outcome.ERROR, "sandbox error: node lost"),
    (EnvFault("reset raised ValueError: x"), Phase.START, Outcome.INCOMPLETE,
     "environment failed to start: reset raised ValueError: x"),
    (EnvFault("step timed out after 5 s"), Phase.STEP, Outcome.INCOMPLETE,
     "environment fault: step timed out after 5 s"),
    (ValueError("frame   too\nlarge"), Phase.STEP, Outcome.INCOMPLETE,
     "environment fault: ValueError: frame too large"),
    (ValueError("bad"), Phase.START, Outcome.INCOMPLETE,
     "environment failed to start: ValueError: bad"),
    (ContextOverflow("p: the conversation does not fit"), Phase.SOLVER, Outcome.FAILURE,
     "context overflow: p: the conversation does not fit"),
    (ContentRefused("p: the provider refused", 400), Phase.SOLVER, Outcome.INCOMPLETE,
     "content refused: p: the provider refused"),
    (ProviderError("p: 500 after 3 retries"), Phase.SOLVER, Outcome.ERROR,
     "provider error: p: 500 after 3 retries"),
    (RuntimeError("socket closed"), Phase.SOLVER, Outcome.ERROR,
     "solver call failed: RuntimeError: socket closed"),
    (KeyError("k"), Phase.HARNESS, Outcome.ERROR, "harness error: KeyError: 'k'"),
    (OutOfTime.of(3.0), Phase.STEP, Outcome.INCOMPLETE,
     "harness limit: the per-episode wall budget (episode_wall_s=3 s of environment time) ran out"),
    (EnvFault("step raised"), Phase.REPLAY, Outcome.INCOMPLETE,
     "the replay faulted at turn 2 where the play did not (step raised)"),
    (TypeError("t"), Phase.REPLAY, Outcome.INCOMPLETE, "the replay failed: TypeError: t"),
    (SandboxStartError("gone"), Phase.REPLAY, Outcome.ERROR, "sandbox error: gone"),
])
def test_each_failure_has_one_outcome_and_reason(err, phase, outcome, reason):
    assert ending(err, phase, turn=2) == (outcome, reason)


@pytest.mark.parametrize("err", [UserError("bad key"), BadRequest("p: bad request", 400),
                                 SandboxUnavailable(), KeyboardInterrupt(),
                                 asyncio.CancelledError()])
@pytest.mark.parametrize("phase", list(Phase))
def test_what_no_episode_decides_is_raised_again(err, phase):
    with pytest.raises(type(err)):
        ending(err, phase)


def test_a_failed_step_is_logged_with_its_fault_before_the_episode_ends():
    episode = Episode(3)
    episode.start("obs")
    action = episode.act("\\boxed{go}")
    assert fail(episode, EnvFault("step raised ZeroDivisionError"), Phase.STEP) == (
        "step raised ZeroDivisionError")
    assert episode.transcript[-2:] == [
        {"role": "env", "action": action, "fault": "step raised ZeroDivisionError"},
        {"role": "outcome", "content": "incomplete: environment fault: step raised "
                                       "ZeroDivisionError", "outcome": Outcome.INCOMPLETE}]
    solver = Episode(3)
    solver.start("obs")
    fail(solver, ProviderError("down"), Phase.SOLVER)
    assert [e["role"] for e in solver.transcript] == ["system", "user", "outcome"]
    assert (solver.outcome, solver.reason) == (Outcome.ERROR, "provider error: down")


def test_the_author_s_faults_and_a_reaped_session_end_as_the_vocabulary_says():
    assert not_played(Flag.NONDETERMINISTIC) == (
        Outcome.INCOMPLETE, "replay audit: the environment is nondeterministic; not played")
    assert not_played(Flag.HINT_IS_KEY) == (
        Outcome.INCOMPLETE, "degenerate-policy battery: hint_is_key: not played")
    assert session_ended("it was idle") == (Outcome.FAILURE, "session ended: it was idle")


def test_one_line_flattens_whitespace_and_cuts_with_an_ellipsis():
    assert one_line("a\n\tb   c", 10) == "a b c"
    assert one_line("x" * 12, 10) == "x" * 9 + "…"
    assert len(one_line("y" * 500, 200)) == 200
