"""The replay audit: does a fresh instance, given a played episode's seed and actions back to
back, give exactly the observations, rewards and flags the transcript recorded?

The contract (SPEC §2) says it must. An environment that behaves differently when answered
slowly, for actions its validation never tried, or from state kept across episodes shows it
here, since the replay differs from the play in exactly those respects: it is fast, it uses the
model's actions, and it is another episode. It is also not next to its play: the scheduler runs
a round's replays after all its plays, in a shuffled batch, so no state left in the host by the
play can count on being read by its own replay. The audit makes no model call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from envduels._text import one_line, valid_text
from envduels.duel.faults import EnvironmentFault, Phase, ending
from envduels.duel.outcomes import Outcome
from envduels.engine.solving import Entry, EnvLike, first_turn


class ReplayHostError(Exception):
    """The replay could not run for a reason that is the host's (no sandbox could start, or the
    stored transcript is unreadable): the episode stays unaudited and is audited again on
    resume."""


@dataclass(frozen=True)
class AuditResult:
    """`passed`, or the first difference in one line: turn, field, played vs replayed.
    `faulted`: the difference is that the environment faulted in the replay where the play had
    no fault (which the host may cause, a deadline missed under load: the scheduler replays
    once more before it condemns the environment)."""

    passed: bool
    detail: str
    faulted: bool = False


def _short(value: object, limit: int = 50) -> str:
    return repr(one_line(value, limit))


def _same_reward(played: object, replayed: float) -> bool:
    if not isinstance(played, int | float | str):   # what the log holds: JSON
        return False
    try:
        return float(played) == float(replayed)
    except (TypeError, ValueError, OverflowError):
        return False


async def replay_episode(transcript: list[Entry], *, seed: int, hint: str | None,
                         open_env: Callable[[], Awaitable[EnvLike]]) -> AuditResult:
    """Replay a transcript's actions in the instance from `open_env()` and compare every step.

    `hint` is the hint the episode's first turn showed (None when unhinted): the first turn is
    compared as rendered. Text is compared as stored (lone surrogates as U+FFFD). A failure
    during the replay is a difference (the play had none at that point) unless `duel.faults`
    says it is the host's: then `ReplayHostError` (the sandbox could not start, or was lost).
    """
    if not isinstance(transcript, list) or not all(isinstance(e, dict) for e in transcript):
        # the run database's own record, damaged or edited: no verdict on the environment
        raise ReplayHostError("its stored transcript is not a list of turns (the run database "
                              "may be damaged; `envduels status` counts the pending audits)")
    first_user = next((e for e in transcript if e.get("role") == "user"), None)
    steps = [e for e in transcript if e.get("role") == "env"]
    if first_user is None or any("fault" in e for e in steps):
        return AuditResult(True, "nothing to replay")
    env = None
    turn = 0
    try:
        env = await open_env()
        # the whole episode in one call (one round trip to a harness worker), then compared
        played = await env.run(seed, [str(e["action"]) for e in steps])
        if played.start is None:
            raise played.fault or AssertionError("a run without a start has a fault")
        observation, _info = played.start
        if valid_text(first_turn(observation, hint=hint)) != valid_text(str(first_user["content"])):
            return AuditResult(False, "turn 0: the initial observation differs from the one played")
        for turn, played_step in enumerate(steps, start=1):
            if turn > len(played.steps):   # the replay faulted at this turn; the play did not
                raise played.fault or AssertionError("a short run has a fault")
            result = played.steps[turn - 1]
            if valid_text(result.observation) != valid_text(str(played_step.get("content", ""))):
                return AuditResult(False, f"turn {turn}: the observation differs (played "
                                          f"{_short(played_step.get('content', ''))}, replayed "
                                          f"{_short(result.observation)})")
            if not _same_reward(played_step.get("reward"), result.reward):
                return AuditResult(False, f"turn {turn}: the reward differs (played "
                                          f"{played_step.get('reward')!r}, replayed "
                                          f"{result.reward!r})")
            for flag in ("terminated", "truncated"):
                if bool(played_step.get(flag)) != bool(getattr(result, flag)):
                    return AuditResult(False, f"turn {turn}: {flag} differs (played "
                                              f"{bool(played_step.get(flag))}, replayed "
                                              f"{bool(getattr(result, flag))})")
        return AuditResult(True, f"{len(steps)} step(s) reproduced")
    except Exception as err:   # what it means is the vocabulary's (a UserError stops the run)
        outcome, reason = ending(err, Phase.REPLAY, turn=turn)
        if outcome is Outcome.ERROR:   # the host's: no verdict
            raise ReplayHostError(reason) from None
        return AuditResult(False, reason, faulted=isinstance(err, EnvironmentFault))
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                await env.close(wait=False)
