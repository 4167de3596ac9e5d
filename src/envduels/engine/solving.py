"""Solving, exactly as SPEC §4: one episode of one solver on one environment, seed and condition.

The solver sees the EnvDuels system prompt, a first turn with the observation (and, in the
hinted condition only, the hint), and one further turn per step. The action passed to the
environment is the last balanced `\\boxed{...}` of the reply, wrapper included. Outcomes:

- `success`: a step returned `terminated=True` with `reward > 0`;
- `failure`: terminated without reward, truncated, the turn cap, or the context overflowed;
- `incomplete`: the environment raised, timed out or broke a limit (`EnvFault`): the author's fault;
- `error`: the provider still failed after retries, or the sandbox could not start before any
  environment code ran (`SandboxStartError`: the host's fault); replayed on resume, never a
  failure and never blamed on the author.

What each failure means is `duel.faults`' to decide (`faults.fail`): an unexpected exception
while talking to the environment (a value the parent could not take) is `incomplete`; one while
asking the solver is `error`, except a `UserError` (a rejected key, an unknown model, a bad
request before any answer), which stops the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from envduels._text import valid_text
from envduels.duel.faults import Phase, fail
from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import (  # noqa: F401 (re-exported: the rules are the protocol's)
    ACTION_SEARCH_MAX_CHARS,
    FORMAT_ERROR,
    SYSTEM_PROMPT,
    Entry,
    Episode,
    first_turn,
    last_boxed,
    next_turn,
    turn_cap,
)

if TYPE_CHECKING:
    from envduels.config import PlayerConfig
    from envduels.envs import EnvSpec
    from envduels.players import ChatResult
    from envduels.sandbox import Played, StepResult


@dataclass(frozen=True)
class EpisodeTask:
    """One episode: a frozen, picklable unit of work with a deterministic `key`.

    `env` is an `envs.EnvSpec`; `max_turns` is already the turn cap. `round` and `self_play` are
    bookkeeping the store records beside the outcome.
    """

    key: str
    env: EnvSpec
    solver: str
    seed: int
    trial: int
    hinted: bool
    max_turns: int
    round: int = 1
    self_play: bool = False


@dataclass
class EpisodeResult:
    outcome: Outcome
    reason: str
    turns: int
    transcript: list[Entry] = field(default_factory=list)


def result_of(episode: Episode) -> EpisodeResult:
    """The result of an ended `Episode`: its outcome, reason, turns taken and transcript."""
    assert episode.outcome is not None, "the episode has not ended"
    return EpisodeResult(episode.outcome, episode.reason, episode.turn, episode.transcript)


class SolverLike(Protocol):
    """What an episode needs of its solver: `players.Player`, or a person (`play --human`)."""

    async def chat(self, messages: list[dict[str, str]], *, call_id: str, role: str,
                   max_tokens: int | None = None) -> ChatResult: ...


class PlayerLike(SolverLike, Protocol):
    """A player as the engine uses it in both roles: a `players.Player`, or one wrapped
    (`_bad_requests.AnsweredGuard`, the scheduler's progress counting)."""

    name: str
    config: PlayerConfig


class EnvLike(Protocol):
    """What an episode needs of an environment instance: `sandbox.EnvInstance`, or its Ray
    counterpart `sandbox.ray_pool.RemoteEnvInstance`."""

    async def reset(self, seed: int | None) -> tuple[str, dict]: ...
    async def step(self, action: str) -> StepResult: ...
    async def run(self, seed: int | None, actions: list[str]) -> Played: ...
    async def close(self, *, wait: bool = True) -> None: ...


Event = Callable[[Entry], None]


async def play_episode(task: EpisodeTask, solver: SolverLike,
                       open_env: Callable[[], Awaitable[EnvLike]], *,
                       on_event: Event | None = None) -> EpisodeResult:
    """Play `task` with `solver` in an environment instance from `open_env()` (awaitable).

    Never raises for environment or provider trouble: that is the outcome (`duel.faults.fail`).
    `on_event` sees every transcript entry as it is appended (the `play` command prints them).
    """
    episode = Episode(task.max_turns, hint=task.env.hint if task.hinted else None,
                      on_event=on_event)
    env = None
    phase = Phase.START
    try:
        env = await open_env()
        observation, _info = await env.reset(task.seed)
        episode.start(observation)
        while not episode.done:
            phase = Phase.SOLVER
            reply = await solver.chat(episode.messages(),
                                      call_id=f"ep:{task.key}:turn:{episode.turn + 1}",
                                      role="solver")
            # valid text at this boundary: the action is what the environment gets (and what
            # the sandbox sends), the reply what the run database keeps
            action = episode.act(valid_text(reply.text), input_tokens=reply.input_tokens,
                                 output_tokens=reply.output_tokens)
            if action is None:
                continue
            phase = Phase.STEP
            result = await env.step(action)
            episode.observe(result.observation, result.reward, result.terminated,
                            result.truncated)
    except Exception as err:   # what it means is the vocabulary's (a UserError stops the run)
        fail(episode, err, phase)
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                # killed now, collected in the background: the episode's slot is free at once
                await env.close(wait=False)
    return result_of(episode)
