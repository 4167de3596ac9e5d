"""Validation's answer check: is the oracle's winning answer the same on every seed?

The rule and what "the answer" is live in `duel.answers` (SPEC §13): the decisive, final action
of a win, compared as `answer_key` writes it. Here validation asks it of the oracle: the final
actions of its winning plays on the benchmark seeds (already played by the oracle check) and,
while every one agrees, of oracle plays on further seeds drawn from the validation's salt
(so an author cannot know them), up to `ANSWER_SEEDS` in all. One answer on all of them is
`fixed_answer`, the author's fault: a hint can hand such an answer over, so its lift shows no
teaching. An environment whose answers differ stops at the first seed that differs: about one
oracle episode more for a two-answer maze, none for most.

What it records (`AnswerFindings`, kept in the battery's findings) is the oracle's answer on
each benchmark seed, as `answer_digest`, for the analysis of play
(`duel.answers.fixed_in_play`), and how many seeds it compared.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from envduels.duel.answers import ANSWER_SEEDS, answer_digest, answer_key

OracleFinal = Callable[[int], Awaitable[str]]
"""Plays the oracle on a seed in a fresh instance until it wins; returns its final action (it
raises, as validation's checks do, when the oracle does not win)."""


def drawn_seeds(salt: str, taken: list[int], n: int) -> list[int]:
    """`n` seeds for the answer check beyond `taken` (the benchmark seeds), non-negative 63-bit
    ints from an RNG seeded by `salt` (a run's fingerprint and secret, or `validate`'s fresh
    one, with the source's hash): the same salt gives the same seeds, and nobody who does not
    hold it can compute them."""
    rng = random.Random(f"envduels-answer-seeds/v1|{salt}")
    out: list[int] = []
    while len(out) < n:
        seed = rng.getrandbits(63)
        if seed not in taken and seed not in out:
            out.append(seed)
    return out


@dataclass
class AnswerFindings:
    """The oracle's final answers: on how many seeds they were compared (`seeds`), the answer on
    each benchmark seed (`by_seed`: seed -> `answer_digest`), and whether one answer held on
    `ANSWER_SEEDS` seeds (`fixed`, with its `detail`)."""

    seeds: int = 0
    by_seed: dict[int, str] = field(default_factory=dict)
    fixed: bool = False
    detail: str = ""


async def check_answers(oracle_final: OracleFinal, finals: dict[int, str], salt: str, *,
                        draw: bool = True) -> AnswerFindings:
    """Compare the oracle's final actions `finals` (benchmark seed -> action) and, when they
    all agree and `draw`, the final actions of `oracle_final` on drawn seeds until one differs
    or `ANSWER_SEEDS` seeds agree. `draw=False` (an environment that ignores its seed: every
    seed is the same instance, so its answer agrees by construction) only records `finals`."""
    by_seed = {seed: answer_key(action) for seed, action in finals.items()}
    answers = set(by_seed.values())
    seeds = len(by_seed)
    if draw and len(answers) == 1 and seeds < ANSWER_SEEDS:
        for seed in drawn_seeds(salt, list(finals), ANSWER_SEEDS - seeds):
            answers.add(answer_key(await oracle_final(seed)))
            seeds += 1
            if len(answers) > 1:
                break
    found = AnswerFindings(seeds, {seed: answer_digest(k) for seed, k in by_seed.items()})
    if draw and len(answers) == 1 and seeds >= ANSWER_SEEDS:
        found.fixed = True
        found.detail = (f"the oracle's winning answer is the same on all {seeds} seeds it played "
                        f"({len(finals)} benchmark seeds and {seeds - len(finals)} drawn ones): "
                        "the answer does not depend on the instance, so a hint can simply hand "
                        "it over; make the winning action change with the seed")
    return found
