"""Self-distillation rows: an environment's first turn as the prompt, its hint as the privileged
context.

TRL's self-distillation trainers (`trl.experimental.sdft`, `trl.experimental.sdpo`, TRL 1.16) read
a dataset column `privileged_context`: the same model, shown the prompt together with that
context, is the teacher of its unhinted self. An author's hint is such a context, and the duel
measured what it is worth (the hint lift). `envduels export --format jsonl|hf` writes one row per
(environment, seed) with `prompt` (`solver_prompt`: the duel's solver system prompt and the
unhinted first user turn, as a conversation, so that the trainer applies the chat template) and
`privileged_context` (the hint).

With `TEACHER_PROMPT_TEMPLATE` as SDFT's `teacher_prompt_template`, the teacher's user turn is
exactly the duel's hinted first turn (`Hint: ...`, a blank line, then the unhinted turn), so the
teacher is the hinted solver the duel measured. TRL's default template
(`"{prompt}\\n\\n{privileged_context}"`) puts the bare hint after the turn instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from envduels._text import valid_text
from envduels.duel.protocol import HINT_LABEL, SYSTEM_PROMPT, first_turn

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.sandbox import EnvFault, SandboxLimits

TEACHER_PROMPT_TEMPLATE = HINT_LABEL + "{privileged_context}\n\n{prompt}"
"""SDFT's `teacher_prompt_template` that makes the teacher's user turn the duel's hinted first
turn: `TEACHER_PROMPT_TEMPLATE.format(prompt=first_turn(obs, hint=None), privileged_context=h)`
equals `first_turn(obs, hint=h)`."""


def solver_prompt(observation: str) -> list[dict[str, str]]:
    """The conversation a duel's solver starts from on `observation` (a reset's first
    observation), unhinted: the solver system prompt and the first user turn."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": first_turn(observation, hint=None)}]


async def first_observations(pairs: Sequence[tuple[EnvSpec, int]], limits: SandboxLimits, *,
                             unsafe_no_sandbox: bool = False, concurrency: int = 8
                             ) -> dict[tuple[str, int], str | EnvFault]:
    """The observation each (environment, seed) of `pairs` resets to, each in a fresh sandboxed
    instance with `limits` (as a duel opens it), or the `EnvFault` it raised: keyed by
    (environment id, seed). At most `concurrency` instances are alive at once.

    Raises `SandboxStartError` when a sandbox cannot start (the host's trouble, not the
    environment's) and `SandboxUnavailable` without bubblewrap.
    """
    from envduels.sandbox import EnvFault, SandboxPool, SandboxStartError, sandbox_pool

    gate = asyncio.Semaphore(concurrency)

    async def reset(pool: SandboxPool, spec: EnvSpec, seed: int) -> str | EnvFault:
        async with gate:
            try:
                env = await pool.open(spec.source, class_name=spec.class_name,
                                      max_turns=spec.max_turns)
            except SandboxStartError:   # the host's, not the environment's
                raise
            except EnvFault as fault:
                return fault
            try:
                observation, _info = await env.reset(seed)
            except SandboxStartError:
                raise
            except EnvFault as fault:
                return fault
            finally:
                with contextlib.suppress(Exception):
                    await env.close()
            # valid text at this boundary: a lone surrogate cannot be written as UTF-8
            return valid_text(observation)

    async with sandbox_pool(limits, unsafe_no_sandbox=unsafe_no_sandbox, warm=0,
                            max_warm=concurrency) as pool:
        got = await asyncio.gather(*(reset(pool, spec, seed) for spec, seed in pairs))
    return {(spec.id, seed): result for (spec, seed), result in zip(pairs, got, strict=True)}
