"""Validation's answer check (issue 29, envs/_answer_check.py): the oracle's winning answer on
the benchmark seeds and, while it agrees, on drawn seeds up to ANSWER_SEEDS."""

from __future__ import annotations

import asyncio

from envduels.duel.answers import ANSWER_SEEDS, answer_digest
from envduels.envs import EnvSpec, validate_env
from envduels.envs._answer_check import check_answers, drawn_seeds


def _oracle(answers: dict[int, str] | None = None, default: str = "\\boxed{sesame}"):
    played: list[int] = []

    async def oracle_final(seed: int) -> str:
        played.append(seed)
        return (answers or {}).get(seed, default)

    return oracle_final, played


def test_drawn_seeds_are_fixed_by_the_salt_and_never_a_benchmark_seed():
    first = drawn_seeds("salt-a", [1, 2], 12)
    assert first == drawn_seeds("salt-a", [1, 2], 12) != drawn_seeds("salt-b", [1, 2], 12)
    assert len(set(first)) == 12 and not {1, 2} & set(first)
    assert all(0 <= s < 2**63 for s in first)


def test_one_answer_on_sixteen_seeds_is_fixed_and_differing_answers_stop_at_the_first():
    oracle_final, played = _oracle()
    finals = {1: "\\boxed{Sesame}", 2: "\\boxed{sesame}", 3: "\\boxed{ 'SESAME' }", 4: "sesame"}
    found = asyncio.run(check_answers(oracle_final, finals, "salt"))
    assert (found.fixed, found.seeds, len(played)) == (True, ANSWER_SEEDS, ANSWER_SEEDS - 4)
    assert found.by_seed == {s: answer_digest("sesame") for s in finals}
    assert found.detail.startswith("the oracle's winning answer is the same on all 16 seeds it "
                                   "played (4 benchmark seeds and 12 drawn ones)")
    # a maze's last move: east on every benchmark seed, south on the second drawn one
    second = drawn_seeds("salt", list(finals), 2)[1]
    oracle_final, played = _oracle({second: "\\boxed{south}"}, "\\boxed{east}")
    found = asyncio.run(check_answers(oracle_final, dict.fromkeys(finals, "\\boxed{east}"), "salt"))
    assert (found.fixed, found.seeds, played) == (False, 6, drawn_seeds("salt", list(finals), 2))
    # answers that differ on the benchmark seeds cost no oracle episode more
    oracle_final, played = _oracle()
    found = asyncio.run(check_answers(oracle_final, {1: "\\boxed{4}", 2: "\\boxed{9}"}, "salt"))
    assert (found.fixed, found.seeds, played) == (False, 2, [])


def test_an_environment_that_ignores_its_seed_is_only_recorded():
    oracle_final, played = _oracle()
    found = asyncio.run(check_answers(oracle_final, {1: "\\boxed{open}", 2: "\\boxed{open}"},
                                      "salt", draw=False))
    assert (found.fixed, found.seeds, played) == (False, 2, [])


ONLY_SMALL_SEEDS = '''
class SmallSeeds:
    """Its oracle wins only on seeds below 1000: the benchmark seeds here, never a drawn one."""

    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = seed
        return f"Room {seed % 97}: say the word.", {}

    def step(self, action):
        if self.seed < 1000 and action.strip() == "\\\\boxed{word}":
            return "Yes.", 1.0, True, False, {}
        return "No.", 0.0, True, False, {}

    def oracle_action(self):
        return "\\\\boxed{word}"
'''


async def test_an_oracle_that_does_not_win_a_drawn_seed_makes_the_environment_invalid(pool):
    verdict = await validate_env(EnvSpec("small", ONLY_SMALL_SEEDS), pool, seeds=[11, 22],
                                 require_oracle=True, probe_seed="x")
    assert not verdict.valid and verdict.oracle == "failed"
    assert verdict.reasons[0].endswith("(drawn for the answer check): playing oracle_action() each "
                                       "turn does not win: make oracle_action return a winning "
                                       "action on every seed")
