"""One episode, SPEC §4, in the real sandbox with a scripted solver."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from duel_script import CRASHY_SOURCE, LOCK_SOURCE, lock_code

from envduels.engine.solving import FORMAT_ERROR, SYSTEM_PROMPT, EpisodeTask, play_episode
from envduels.envs import EnvSpec
from envduels.players import ContextOverflow, ProviderError
from envduels.sandbox import EnvPool


@dataclass(frozen=True)
class Reply:
    text: str
    input_tokens: int = 1
    output_tokens: int = 1


class Solver:
    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []
        self.call_ids: list[str] = []

    async def chat(self, messages, *, call_id, role, max_tokens=None):
        assert role == "solver"
        self.seen.append([dict(m) for m in messages])
        self.call_ids.append(call_id)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return Reply(reply)


@pytest.fixture
async def pool():
    async with EnvPool(warm=1) as p:
        yield p


def _task(source: str, *, hinted: bool, max_turns: int = 3) -> EpisodeTask:
    return EpisodeTask(key="k", env=EnvSpec("e", source, author="a", domain="logic", hints={"hint": "SECRET HINT"}), solver="s", seed=5,
                       trial=0, hinted=hinted, max_turns=max_turns)


async def _play(pool, task, solver):
    return await play_episode(task, solver, lambda: pool.open(task.env.source, max_turns=20))


async def test_format_error_costs_the_turn_and_the_solver_is_told(pool):
    code = f"\\boxed{{{lock_code(5)}}}"
    solver = Solver("thinking...", f"ok {code}")
    result = await _play(pool, _task(LOCK_SOURCE, hinted=False), solver)
    assert (result.outcome, result.turns) == ("success", 2)
    second = solver.seen[1]
    assert second[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert second[-1] == {"role": "user", "content": FORMAT_ERROR}
    assert solver.call_ids == ["ep:k:turn:1", "ep:k:turn:2"]
    assert [e["action"] for e in result.transcript if e["role"] == "env"] == [code]


async def test_hint_only_in_the_hinted_condition(pool):
    hinted, plain = Solver("\\boxed{open}"), Solver("\\boxed{open}")
    await _play(pool, _task(LOCK_SOURCE, hinted=True), hinted)
    await _play(pool, _task(LOCK_SOURCE, hinted=False), plain)
    assert hinted.seen[0][1]["content"].startswith("Hint: SECRET HINT\n\nObservation: LOCK:")
    assert plain.seen[0][1]["content"].startswith("Observation: LOCK:")
    assert "SECRET HINT" not in str(plain.seen)


async def test_turn_cap_is_a_failure_and_later_turns_carry_the_observation(pool):
    solver = Solver(*["\\boxed{shut}"] * 3)
    result = await _play(pool, _task(LOCK_SOURCE, hinted=False, max_turns=3), solver)
    assert (result.outcome, result.reason, result.turns) == ("failure", "turn cap 3 reached", 3)
    assert solver.seen[1][-1]["content"].startswith("Observation: Wrong word, the lock stays shut.")


async def test_environment_crash_is_incomplete_and_zero_reward_end_is_failure(pool):
    crashed = await _play(pool, _task(CRASHY_SOURCE, hinted=False), Solver("\\boxed{crash}"))
    assert crashed.outcome == "incomplete" and "environment fault" in crashed.reason
    lost = await _play(pool, _task(CRASHY_SOURCE, hinted=False), Solver("\\boxed{nope}"))
    assert (lost.outcome, lost.reason) == ("failure", "terminated with reward 0")


async def test_context_overflow_is_failure_and_provider_error_is_error(pool):
    overflow = await _play(pool, _task(LOCK_SOURCE, hinted=False), Solver(ContextOverflow("full")))
    assert (overflow.outcome, overflow.turns) == ("failure", 0)
    error = await _play(pool, _task(LOCK_SOURCE, hinted=False), Solver(ProviderError("500s")))
    assert error.outcome == "error"


async def test_environment_that_fails_to_load_is_incomplete(pool):
    result = await _play(pool, _task("class Broken(:\n", hinted=False), Solver())
    assert result.outcome == "incomplete" and result.turns == 0


async def test_a_lone_surrogate_in_the_solver_reply_is_the_solver_s_failure(pool):
    # before: the worker died decoding the action, and the episode was 'incomplete' (the author's)
    solver = Solver("\\boxed{shut\ud800}", "\\boxed{op\udcffen}")
    result = await _play(pool, _task(LOCK_SOURCE, hinted=False, max_turns=2), solver)
    assert (result.outcome, result.reason, result.turns) == ("failure", "turn cap 2 reached", 2)
    assert [e["action"] for e in result.transcript if e["role"] == "env"] == [
        "\\boxed{shut\ufffd}", "\\boxed{op\ufffden}"]
