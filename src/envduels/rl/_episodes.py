"""Multi-turn episodes for training: a batch played in lockstep, token by token, in the sandbox.

`play_episodes` is the one episode loop of `envduels.rl` (training and the transfer loop's
evaluation both call it). Each episode is an `envduels.duel.protocol.Episode`, the one
implementation of the duel's rules (SPEC §4) the engine, the Gym adapter and the server drive
too: the system prompt, the first turn (with `Hint: ...` first in a hinted episode), the last
balanced `\\boxed{}` of a reply as the action, the format-error turn, the turn cap and success.
So a rollout's transcript is the engine's for the same environment, seed, condition and replies
(tests/serve/test_one_protocol.py).

Tokens, not text, travel between turns: the policy's own sampled tokens are kept as they were
generated (re-tokenising a decoded reply can differ, and the loss must see what was sampled),
and every turn the environment adds is marked 0 in `Rollout.mask`, so a trainer that takes the
mask trains only on the model's tokens. The hint is in the prompt, which no trainer puts in the
loss.

A batch advances in lockstep, so it waits every turn for its slowest environment: one that
answers just under the sandbox's step deadline every turn would stretch the whole batch to
`max_turns x step deadline`. Every episode therefore has a wall budget, `episode_wall_s`
(the argument of `play_episodes`, default `EPISODE_WALL_S`): the time since the batch began,
less the time the policy spent generating (the trainer's own compute, which a slower model or
machine must not turn into cut episodes). An environment call still running when it is spent
is cancelled (the sandbox kills its worker), and every episode not yet over ends `incomplete`
with `budget_reason(episode_wall_s)`: the batch spends at most `episode_wall_s` on its
environments.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from envduels._text import valid_text
from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import SYSTEM_PROMPT, Entry, Episode, turn_cap
from envduels.rl._rescue import HINT_1, HINT_2, NO_HINT

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.sandbox import EnvInstance, RemoteEnvInstance, SandboxPool, StepResult

T = TypeVar("T")

EPISODE_WALL_S = 120.0
"""The default per-episode wall budget of `play_episodes` (seconds of environment time: see the
module docstring). A well-behaved environment needs milliseconds a call; this leaves room for
sandbox starts on a loaded machine and still bounds a batch that one slow environment holds."""


def budget_reason(episode_wall_s: float) -> str:
    """The reason of an episode ended by the wall budget: the harness's limit, said as such."""
    return (f"harness limit: the per-episode wall budget (episode_wall_s={episode_wall_s:g} s "
            "of environment time) ran out")


class _OutOfBudget(Exception):
    """The batch's wall budget ran out while (or before) an environment call ran."""


class _Clock:
    """A batch's environment time against its budget: wall time since the batch began, less
    the time spent generating (`generated`)."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s

    def generated(self, seconds: float) -> None:
        self.deadline += seconds

    def spent(self) -> bool:
        return time.monotonic() >= self.deadline

    async def within(self, call: Awaitable[T]) -> T:
        """`call`'s result, or `_OutOfBudget` once the budget is spent (the call cancelled)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            if asyncio.iscoroutine(call):
                call.close()   # never started
            raise _OutOfBudget
        try:
            async with asyncio.timeout(left) as scope:
                return await call
        except TimeoutError:
            if scope.expired():
                raise _OutOfBudget from None
            raise


class TokenPolicy(Protocol):
    """What the episode loop needs of a model: a chat template and batched sampling."""

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The tokens of `messages` rendered by the chat template, ending with the opening of
        the assistant's turn."""

    def turn_ids(self, messages: list[dict[str, str]], reply_ids: list[int]) -> list[int]:
        """The tokens that follow the assistant's sampled `reply_ids` when the next user turn,
        `messages[-1]`, is added (closing the assistant's turn where the reply did not, the
        user turn, the opening of the next assistant turn). `messages[:-1]` ends with the
        assistant reply."""

    def generate(self, contexts: list[list[int]]) -> list[list[int]]:
        """One sampled reply per context (token ids, the end-of-turn token included when it
        was sampled)."""

    def decode(self, ids: list[int]) -> str:
        """The text of reply tokens, without special tokens."""


def hint_levels(spec: EnvSpec) -> tuple[int, ...]:
    """The hint levels `spec` offers: 1 when it has a hint (or `hint_1`), 2 with a `hint_2`."""
    if not spec.hint:
        return ()
    return (HINT_1, HINT_2) if spec.hints.get("hint_2") else (HINT_1,)


def hint_text(spec: EnvSpec, level: int) -> str | None:
    """The hint shown at `level` (0: none; 1: the hint or `hint_1`; 2: `hint_2`)."""
    if level == NO_HINT:
        return None
    if level == HINT_1:
        return spec.hint or None
    if level == HINT_2:
        return spec.hints.get("hint_2") or None
    raise ValueError(f"hint level must be 0, 1 or 2, got {level}")


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to play: environment, seed, hint level."""

    spec: EnvSpec
    seed: int
    hint_level: int = NO_HINT


@dataclass
class Rollout:
    """One played episode, as a trainer takes it.

    `prompt_ids` render the system prompt and first user turn (the hint inside it when hinted);
    `completion_ids` everything after: the model's replies and the environment's turns;
    `mask[i]` is 1 where `completion_ids[i]` was sampled by the model, 0 where the environment
    wrote it. `episode` is the duel's record of it (`transcript`, `messages`, `outcome`,
    `reason`, `turns` read it). `reward` is 1.0 for a success (a step terminated with
    reward > 0), else 0.0. `outcome` is success, failure or incomplete (the environment
    faulted: its reward is 0).
    """

    request: EpisodeRequest
    prompt_ids: list[int]
    episode: Episode
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        """How the episode ended (`failure` while it runs: no reward yet)."""
        return self.episode.outcome or Outcome.FAILURE

    @property
    def reason(self) -> str:
        return self.episode.reason

    @property
    def turns(self) -> int:
        """The replies the model gave."""
        return self.episode.turn

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat as the model saw it (at the turn cap the last user turn is recorded, as
        the engine records it, but never tokenised: no reply follows it)."""
        return self.episode.messages()

    @property
    def transcript(self) -> list[Entry]:
        """The episode's transcript, entry for entry the engine's."""
        return self.episode.transcript

    @property
    def reward(self) -> float:
        return 1.0 if self.outcome is Outcome.SUCCESS else 0.0


async def play_episodes(requests: Sequence[EpisodeRequest], policy: TokenPolicy, pool: SandboxPool, *,
                        max_turns: int | None = None,
                        episode_wall_s: float = EPISODE_WALL_S) -> list[Rollout]:
    """Play every request, all in lockstep (one batched `generate` per turn over the episodes
    still running), each in its own sandboxed instance from `pool`; returns one `Rollout` per
    request, in order. The turn cap is `turn_cap(spec.max_turns, max_turns)`.

    Never raises for the environment's trouble: an `EnvFault` ends that episode as
    `incomplete` with reward 0, and so does the wall budget: once the batch has spent
    `episode_wall_s` seconds on its environments (the model's generation not counted), every
    episode still running ends `incomplete` with `budget_reason(episode_wall_s)`, so the call
    returns within that budget plus its generation time. A sandbox that cannot start
    (`SandboxStartError`) raises: the host is broken and no reward would be honest.
    """
    from envduels.sandbox import EnvFault, SandboxStartError

    if not episode_wall_s > 0:
        raise ValueError(f"episode_wall_s must be above 0 seconds, got {episode_wall_s!r}")
    clock = _Clock(episode_wall_s)
    out_of_budget = budget_reason(episode_wall_s)
    envs: list[EnvInstance | RemoteEnvInstance | None] = [None] * len(requests)
    rollouts: list[Rollout] = []
    running: list[int] = []
    try:
        opened = await asyncio.gather(
            *(clock.within(_open(pool, r)) for r in requests), return_exceptions=True)
        for i, (req, got) in enumerate(zip(requests, opened, strict=True)):
            if isinstance(got, SandboxStartError):
                raise got
            episode = Episode(turn_cap(req.spec.max_turns, max_turns),
                              hint=hint_text(req.spec, req.hint_level))
            if isinstance(got, BaseException):
                if isinstance(got, _OutOfBudget):
                    episode.end(Outcome.INCOMPLETE, out_of_budget)
                elif isinstance(got, EnvFault):
                    episode.end(Outcome.INCOMPLETE, f"environment failed to start: {got.reason}")
                else:
                    raise got
                system = [{"role": "system", "content": SYSTEM_PROMPT}]
                rollouts.append(Rollout(req, policy.prompt_ids(system), episode))
                continue
            envs[i], observation = got
            episode.start(observation)
            rollouts.append(Rollout(req, policy.prompt_ids(episode.messages()), episode))
            running.append(i)
        while running:
            contexts = [rollouts[i].prompt_ids + rollouts[i].completion_ids for i in running]
            began = time.monotonic()
            replies = await asyncio.to_thread(policy.generate, contexts)
            clock.generated(time.monotonic() - began)
            steps = await asyncio.gather(
                *(_turn(rollouts[i], _opened(envs[i]), reply, policy, clock, out_of_budget)
                  for i, reply in zip(running, replies, strict=True)))
            running = [i for i, still in zip(running, steps, strict=True) if still]
    finally:
        for env in envs:
            if env is not None:
                with contextlib.suppress(Exception):
                    await env.close()
    return rollouts


def _opened(env: EnvInstance | RemoteEnvInstance | None) -> EnvInstance | RemoteEnvInstance:
    if env is None:   # only episodes whose reset succeeded are running
        raise AssertionError("a running episode has no environment instance")
    return env


async def _open(pool: SandboxPool, req: EpisodeRequest
                ) -> tuple[EnvInstance | RemoteEnvInstance, str]:
    env = await pool.open(req.spec.source, class_name=req.spec.class_name,
                          max_turns=req.spec.max_turns)
    try:
        observation, _info = await env.reset(req.seed)
    except BaseException:
        with contextlib.suppress(Exception):
            await env.close()
        raise
    return env, observation


async def _turn(ro: Rollout, env: EnvInstance | RemoteEnvInstance, reply_ids: list[int], policy: TokenPolicy,
                clock: _Clock, out_of_budget: str) -> bool:
    """Play one sampled reply as its episode's turn; True while the episode goes on."""
    from envduels.sandbox import EnvFault, SandboxStartError

    ro.completion_ids += reply_ids
    ro.mask += [1] * len(reply_ids)
    episode = ro.episode
    # valid text at this boundary, as in the engine: the action is what the sandbox sends
    action = episode.act(valid_text(policy.decode(reply_ids)))
    if action is not None:
        try:
            result: StepResult = await clock.within(env.step(action))
        except SandboxStartError:   # the host's: no reward would be honest
            raise
        except EnvFault as fault:
            episode.step_failed(fault.reason)
            episode.end(Outcome.INCOMPLETE, f"environment fault: {fault.reason}")
            return False
        except _OutOfBudget:
            episode.step_failed(out_of_budget)
            episode.end(Outcome.INCOMPLETE, out_of_budget)
            return False
        episode.observe(result.observation, result.reward, result.terminated, result.truncated)
    elif not episode.done and clock.spent():
        # a format error costs no environment time, but the batch's budget is spent
        episode.end(Outcome.INCOMPLETE, out_of_budget)
        return False
    if episode.done:
        return False
    added = policy.turn_ids(episode.messages(), reply_ids)
    ro.completion_ids += added
    ro.mask += [0] * len(added)
    return True
