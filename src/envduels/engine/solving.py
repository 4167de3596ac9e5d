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

Last resort: an unexpected exception while talking to the environment (a value the parent could
not take) is `incomplete`; one while asking the solver is `error`, except a `UserError` (a
rejected key, an unknown model, a bad request before any answer), which stops the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from envduels._text import valid_text
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
    from envduels.sandbox import StepResult


def _exc(err: BaseException) -> str:
    """One line naming an unexpected exception, cut to a readable length."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 200 else text[:199] + "…"


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
    async def close(self, *, wait: bool = True) -> None: ...


Event = Callable[[Entry], None]


async def play_episode(task: EpisodeTask, solver: SolverLike,
                       open_env: Callable[[], Awaitable[EnvLike]], *,
                       on_event: Event | None = None) -> EpisodeResult:
    """Play `task` with `solver` in an environment instance from `open_env()` (awaitable).

    Never raises for environment or provider trouble: that is the outcome. `on_event` sees every
    transcript entry as it is appended (the `play` command prints them).
    """
    from envduels.errors import UserError
    from envduels.players import ContentRefused, ContextOverflow, ProviderError
    from envduels.sandbox import EnvFault, SandboxStartError

    episode = Episode(task.max_turns, hint=task.env.hint if task.hinted else None,
                      on_event=on_event)

    def done(outcome: Outcome, reason: str) -> EpisodeResult:
        episode.end(outcome, reason)
        return result_of(episode)

    env = None
    try:
        try:
            env = await open_env()
            observation, _info = await env.reset(task.seed)
        except SandboxStartError as fault:
            return done(Outcome.ERROR, f"sandbox error: {fault.reason}")
        except EnvFault as fault:
            return done(Outcome.INCOMPLETE, f"environment failed to start: {fault.reason}")
        except Exception as err:  # last resort: a value the parent could not take
            return done(Outcome.INCOMPLETE, f"environment failed to start: {_exc(err)}")
        episode.start(observation)
        while not episode.done:
            try:
                reply = await solver.chat(episode.messages(),
                                          call_id=f"ep:{task.key}:turn:{episode.turn + 1}",
                                          role="solver")
            except ContextOverflow as err:
                return done(Outcome.FAILURE, f"context overflow: {err}")
            except ContentRefused as err:   # the environment's text: its author's fault
                return done(Outcome.INCOMPLETE, f"content refused: {err}")
            except ProviderError as err:
                return done(Outcome.ERROR, f"provider error: {err}")
            except UserError:
                raise   # a rejected key, unknown model, bad parameters: the run stops at once
            except Exception as err:  # last resort: the host's side failed, retried on resume
                return done(Outcome.ERROR, f"solver call failed: {_exc(err)}")
            # valid text at this boundary: the action is what the environment gets (and what
            # the sandbox sends), the reply what the store keeps
            action = episode.act(valid_text(reply.text), input_tokens=reply.input_tokens,
                                 output_tokens=reply.output_tokens)
            if action is None:
                continue
            try:
                result = await env.step(action)
            except SandboxStartError as fault:   # the host lost the sandbox (a cluster node)
                episode.step_failed(fault.reason)
                return done(Outcome.ERROR, f"sandbox error: {fault.reason}")
            except EnvFault as fault:
                episode.step_failed(fault.reason)
                return done(Outcome.INCOMPLETE, f"environment fault: {fault.reason}")
            except Exception as err:  # last resort: a value or frame the parent could not take
                episode.step_failed(_exc(err))
                return done(Outcome.INCOMPLETE, f"environment fault: {_exc(err)}")
            episode.observe(result.observation, result.reward, result.terminated,
                            result.truncated)
        return result_of(episode)
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                # killed now, collected in the background: the episode's slot is free at once
                await env.close(wait=False)
