"""A model as a solver on a set of environments: the reference solver evaluation, no hint.

Plays one episode per (environment, benchmark seed) through the same episode loop as training
(`play_episodes`: the duel's prompt, `\\boxed{}` parsing, format-error turn and turn cap), in
the sandbox, greedy by default so that a checkpoint's score is reproducible.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envduels.duel.outcomes import Outcome
from envduels.rl._episodes import (
    EPISODE_WALL_S,
    EpisodeRequest,
    Rollout,
    TokenPolicy,
    play_episodes,
)
from envduels.rl._rescue import NO_HINT

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.sandbox import SandboxLimits


@dataclass(frozen=True)
class Evaluation:
    """Outcomes of an evaluation: `success_rate` over the `episodes` that did not fault
    (an `incomplete` episode is the environment's fault and, as in the duel, not the solver's);
    None when every episode faulted."""

    episodes: int
    successes: int
    incomplete: int

    @property
    def success_rate(self) -> float | None:
        played = self.episodes - self.incomplete
        return self.successes / played if played else None

    @classmethod
    def of(cls, rollouts: Sequence[Rollout]) -> Evaluation:
        return cls(len(rollouts), sum(r.outcome is Outcome.SUCCESS for r in rollouts),
                   sum(r.outcome is Outcome.INCOMPLETE for r in rollouts))


def evaluate(specs: Sequence[EnvSpec], policy: TokenPolicy, *, max_turns: int | None = None,
             limits: SandboxLimits | None = None, batch: int = 16,
             unsafe_no_sandbox: bool = False, episode_wall_s: float = EPISODE_WALL_S
             ) -> Evaluation:
    """Play every benchmark seed of every environment in `specs` once without the hint with
    `policy` (a `TokenPolicy`, e.g. `HFPolicy(model, tokenizer, temperature=0)`), `batch`
    episodes at a time, each batch with the wall budget `episode_wall_s` (`play_episodes`)."""
    from envduels.sandbox import SandboxLimits, sandbox_pool

    requests = [EpisodeRequest(spec, int(seed), NO_HINT) for spec in specs
                for seed in spec.benchmark_seeds]
    lim = limits if limits is not None else SandboxLimits()

    async def play(chunk: list[EpisodeRequest]) -> list[Rollout]:
        async with sandbox_pool(lim, unsafe_no_sandbox=unsafe_no_sandbox, warm=0,
                                max_warm=len(chunk)) as pool:
            pool.expect(len(chunk))
            return await play_episodes(chunk, policy, pool, max_turns=max_turns,
                                       episode_wall_s=episode_wall_s)

    rollouts: list[Rollout] = []
    for start in range(0, len(requests), batch):
        rollouts += asyncio.run(play(requests[start:start + batch]))
    return Evaluation.of(rollouts)
