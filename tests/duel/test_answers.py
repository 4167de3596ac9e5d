"""The answer must depend on the instance (issue 29): what a win's answer is, and when the
hinted wins' answers are too alike across seeds to be chance (duel/answers.py)."""

from __future__ import annotations

import random

import pytest

from envduels.duel.answers import (
    ANSWER_SEEDS,
    PLAY_ALPHA,
    OracleAnswers,
    answer_digest,
    answer_key,
    decisive_action,
    fixed_in_play,
    hint_changed,
    rescue_answers,
    rescues,
    upper_tail,
)
from envduels.duel.faults import PLAY_REASON, author_faults
from envduels.duel.outcomes import Flag, Outcome


@pytest.mark.parametrize(("action", "key"), [
    ("\\boxed{YES}", "yes"),
    ("\\boxed{yes}", "yes"),
    ("\\boxed{ 'Sesame.' }", "sesame"),
    ("\\boxed{Open   Sesame}", "open sesame"),
    ("\\boxed{four-one-nine-seven}", "4197"),
    ("\\boxed{Four One Nine Seven}", "4197"),
    ("\\boxed{4-1-9-7}", "4197"),
    ("\\boxed{4 1 9 7}", "4197"),
    ("I say \\boxed{x} then \\boxed{4197}", "4197"),
    ("sesame", "sesame"),                       # an action without a box is its own answer
    # kept apart: different answers of honest environments
    ("\\boxed{emases}", "emases"),              # never reversed
    ("\\boxed{C A}", "c a"),
    ("\\boxed{10 - 3}", "10 - 3"),
    ("\\boxed{3 - 1}", "3 - 1"),
    ("\\boxed{1.5}", "1.5"),
    ("\\boxed{-5}", "-5"),
    ("\\boxed{+}", "+"),
    ("\\boxed{someone}", "someone"),            # a digit name only as a whole word
    ("\\boxed{}", ""),
])
def test_an_answer_is_compared_across_case_quotes_spacing_and_spelled_or_split_digits(action, key):
    assert answer_key(action) == key


def test_the_decisive_action_is_the_last_step_or_else_the_last_assistant_box():
    steps = [{"role": "user", "content": "Observation: KNOCK"},
             {"role": "env", "action": "\\boxed{7}", "content": "The door asks for the password."},
             {"role": "env", "action": "\\boxed{sesame}", "content": "The door opens."},
             {"role": "outcome", "content": "success: terminated with reward 1"}]
    assert decisive_action(steps) == "\\boxed{sesame}"
    assert decisive_action([{"role": "assistant", "content": "so \\boxed{42}"}]) == "\\boxed{42}"
    assert decisive_action("not a transcript") is None and decisive_action([]) is None


def _steps(*actions: str) -> list[dict]:
    return [{"role": "env", "action": f"\\boxed{{{a}}}", "content": "..."} for a in actions]


def test_what_the_hint_changed_starts_at_the_first_step_the_losing_episode_did_not_play():
    # the knock every solver passes drops out; the password stays
    assert hint_changed(_steps("7", "sesame"), _steps("seven", "open", "let me in")) == ("sesame",)
    # asked twice: both replies are the answer
    assert hint_changed(_steps("yes", "YES"), _steps("no")) == ("yes", "yes")
    # a route that changed from its first step is all of it, whatever its last move
    assert hint_changed(_steps("east", "south", "east"), _steps("south", "south")) == (
        "east", "south", "east")
    assert hint_changed([], _steps("x")) is None


def _ep(env_id: str, seed: int, hinted: bool, outcome: str, actions: tuple[str, ...], *,
        solver: str = "b", trial: int = 0, self_play: bool = False) -> dict:
    return {"env_id": env_id, "solver": solver, "seed": seed, "trial": trial, "hinted": hinted,
            "outcome": outcome, "self_play": self_play, "transcript": _steps(*actions)}


def test_only_the_panels_rescues_give_answers():
    rows = [_ep("e", 1, True, Outcome.SUCCESS, ("7", "sesame")),
            _ep("e", 1, False, Outcome.FAILURE, ("7", "open")),
            # both won: the hint changed nothing on this pair
            _ep("e", 2, True, Outcome.SUCCESS, ("5", "sesame")),
            _ep("e", 2, False, Outcome.SUCCESS, ("5", "sesame")),
            # self-play, and a pair whose unhinted episode is the author's fault
            _ep("e", 3, True, Outcome.SUCCESS, ("6", "sesame"), self_play=True),
            _ep("e", 3, False, Outcome.FAILURE, ("6", "no"), self_play=True),
            _ep("e", 4, True, Outcome.SUCCESS, ("4", "sesame")),
            _ep("e", 4, False, Outcome.INCOMPLETE, ("4",))]
    assert rescue_answers(rescues(rows)) == {"e": {1: {("sesame",)}}}


def _oracle(finals: dict[int, str]) -> OracleAnswers:
    return OracleAnswers({seed: answer_digest(answer_key(a)) for seed, a in finals.items()})


def test_a_password_the_oracle_never_gave_is_fixed_on_four_seeds_an_answer_it_gave_is_not():
    """The lying oracle: it boxes a new code per seed (which the environment also takes) while
    the hint's password wins every seed. Four rescued seeds say so; an answer the oracle itself
    gave on those seeds (the honest knock, a maze whose last move is east on each) never does."""
    sesame = {seed: {("sesame",)} for seed in (1, 2, 3, 4)}
    codes = _oracle({seed: str(10 * seed) for seed in (1, 2, 3, 4)})
    told = fixed_in_play(sesame, codes)
    assert told == ("what the hint changed in the panel's rescues (their steps from the first one "
                    "the same solver's losing episode without the hint did not play) is the same "
                    "on 4 of the 4 seeds they rescued, on 4 of them where validation's oracle won "
                    "with another answer: the chance of that for an answer that depends on the "
                    "seed is at most 0.008")
    assert fixed_in_play(sesame, _oracle({s: "sesame" for s in (1, 2, 3, 4)})) is None
    # one seed off, one seed fewer, one seed the oracle also won with it, two answers on a seed
    assert fixed_in_play({**sesame, 4: {("open",)}}, codes) is None
    assert fixed_in_play({s: a for s, a in sesame.items() if s < 4}, codes) is None
    assert fixed_in_play(sesame, _oracle({1: "10", 2: "20", 3: "30", 4: "sesame"})) is None
    assert fixed_in_play({**sesame, 4: {("sesame",), ("open",)}}, codes) is None


def test_without_the_oracles_record_an_answer_needs_eight_seeds():
    assert 2 * upper_tail(8, 8, 0.5) <= PLAY_ALPHA < 2 * upper_tail(7, 7, 0.5)
    assert fixed_in_play({s: {("yes",)} for s in range(7)}, OracleAnswers()) is None
    assert fixed_in_play({s: {("yes",)} for s in range(8)}, OracleAnswers()) is not None


def test_the_play_side_is_an_authors_fault_after_the_audit_and_the_battery_and_never_cleared():
    sesame = {"knock": {seed: {("sesame",)} for seed in (1, 2, 3, 4)}}
    codes = {"flag": None, "answer_seeds": 4,
             "answers": {str(seed): answer_digest(str(10 * seed)) for seed in (1, 2, 3, 4)},
             "policies": {"hint_copy": {"won": 0, "seeds": 2}}, "hint_tokens_covered": True}
    fault = author_faults([], {"knock": codes}, sesame)["knock"]
    assert (fault.flag, fault.source) == (Flag.FIXED_ANSWER, "play")
    assert fault.reason.startswith(f"{PLAY_REASON}: fixed_answer: what the hint changed ")
    # the audit's finding comes first, then the battery's
    audited = author_faults([("knock", "mismatch", "turn 1 differs")], {"knock": codes}, sesame)
    assert audited["knock"].flag is Flag.NONDETERMINISTIC
    flagged = author_faults([], {"knock": {**codes, "flag": "trivial", "detail": "d"}}, sesame)
    assert flagged["knock"].flag is Flag.TRIVIAL
    # findings from a database before the answer check: no record, 1/2 per seed, 4 seeds short
    assert author_faults([], {"knock": {"flag": None}}, sesame) == {}
    # a hostile record reads as none
    assert author_faults([], {"knock": {"answers": {"x": 1, "-2": "d", "3": 4}}}, sesame) == {}


def _draws(rng: random.Random, shares: list[float], n: int) -> list[int]:
    return rng.choices(range(len(shares)), weights=shares, k=n)


def _validation(rng: random.Random, shares: list[float], seeds: int) -> tuple[bool, list[int]]:
    """What validation's answer check does with an oracle drawing answers at `shares`: the
    benchmark seeds' answers, then drawn seeds while they agree, up to ANSWER_SEEDS; whether
    they all agreed, and the benchmark seeds' answers."""
    answers = _draws(rng, shares, seeds)
    drawn = list(answers)
    while len(set(drawn)) == 1 and len(drawn) < ANSWER_SEEDS:
        drawn += _draws(rng, shares, 1)
    return len(set(drawn)) == 1 and len(drawn) >= ANSWER_SEEDS, answers


@pytest.mark.parametrize("shares", [[0.5, 0.5], [0.56, 0.44], [2 / 3, 1 / 3], [0.4, 0.3, 0.3]])
@pytest.mark.parametrize("seeds", [4, 8, 16])
def test_honest_small_answer_spaces_are_rarely_flagged_at_the_designs_users_run(shares, seeds):
    """Known truth: every answer depends on the seed (drawn from `shares`: a maze's last move,
    the library's most lopsided `water_jugs` at 0.56, a 2:1 split), and is one step (the worst
    case: a longer answer repeats by chance less often). The rescues' answers are drawn apart
    from the oracle's (the worst case: solvers that win by another route), by one solver per
    seed (two make it rarer: each must give the answer). Either side's false flags stay at or
    under their stated bounds."""
    rng = random.Random(f"honest|{shares}|{seeds}")
    trials = 4000
    in_validation = in_play = 0
    for _ in range(trials):
        fixed, oracle = _validation(rng, shares, seeds)
        in_validation += fixed
        play = {s: {(str(a),)} for s, a in enumerate(_draws(rng, shares, seeds))}
        record = OracleAnswers({s: answer_digest(str(a)) for s, a in enumerate(oracle)})
        in_play += (not fixed) and fixed_in_play(play, record) is not None
    assert in_validation / trials <= max(shares) ** (ANSWER_SEEDS - 1) * len(shares) + 0.002
    assert in_play / trials <= PLAY_ALPHA, in_play


@pytest.mark.parametrize("seeds", [4, 8, 16])
def test_a_constant_answer_behind_an_oracle_that_varies_is_flagged_in_play_at_every_design(seeds):
    rng = random.Random(f"attack|{seeds}")
    for _ in range(200):
        fixed, oracle = _validation(rng, [1 / 50] * 50, seeds)   # a new code per seed
        record = OracleAnswers({s: answer_digest(str(a)) for s, a in enumerate(oracle)})
        assert not fixed
        assert fixed_in_play({s: {("sesame",)} for s in range(seeds)}, record) is not None
