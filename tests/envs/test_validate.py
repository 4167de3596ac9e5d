"""validate_env in the real sandbox: one exact, actionable reason per failure."""

import re
import time
from pathlib import Path

from envduels.envs import EnvSpec, load_env_file, validate_env

from .conftest import FIXTURES

SEEDS = [11, 22, 33]
GOOD = load_env_file(FIXTURES / "good_env.py")


def fixture_spec(name: str, **changes) -> EnvSpec:
    spec = load_env_file(FIXTURES / name)
    return EnvSpec(**{**spec.__dict__, **changes})


async def verdict_of(pool, spec, *, seeds=SEEDS, require_oracle=False, **kw):
    return await validate_env(spec, pool, seeds=seeds, require_oracle=require_oracle, **kw)


async def test_a_good_environment_with_its_hint_is_valid_and_its_oracle_passes(pool):
    verdict = await verdict_of(pool, GOOD, require_oracle=True)
    found = verdict.to_json()
    assert found.pop("battery")["flag"] is None   # no policy without intelligence wins it
    assert found == {"valid": True, "reasons": [], "oracle": "passed",
                     "class_name": "ParityLock", "seeds": SEEDS}


async def test_a_syntax_error_is_refused_with_its_line(pool, tmp_path: Path):
    source = "class Env:\n    def reset(self, seed=None):\n        return '', {}\n    def step(self, a)\n"
    verdict = await verdict_of(pool, EnvSpec("broken", source))
    assert verdict.reasons == ["syntax error at line 4: expected ':': fix the source so that it parses"]
    assert (verdict.valid, verdict.oracle, verdict.class_name) == (False, "skipped", None)


async def test_a_source_without_environment_class_is_refused(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/no_class.py"))
    assert verdict.reasons == [
        "no environment class: define one top-level class with reset(seed) and step(action) methods"]


async def test_two_classes_without_class_name_are_refused_and_class_name_picks_one(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/two_classes.py"))
    assert verdict.reasons == ["2 environment classes (First, Second): keep exactly one class with "
                               "reset and step, or name it with class_name"]
    picked = await verdict_of(pool, fixture_spec("bad/two_classes.py", class_name="Second"), seeds=[1])
    assert (picked.valid, picked.class_name, picked.oracle) == (True, "Second", "absent")


async def test_reset_returning_a_string_is_refused(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/reset_wrong_type.py"))
    assert verdict.reasons == ["seed 11, probe episode: in reset: reset must return "
                               "(observation, info), got a value of type str"]


async def test_a_non_bool_terminated_flag_is_refused(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/nonbool_terminated.py"))
    assert verdict.reasons == ["seed 11, probe episode: in step (turn 1): step returned terminated "
                               "of type int; expected True or False"]


CLOCK_ENV = """
import time


class Clock:
    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        return f"it is {time.perf_counter_ns()}", 0.0, False, False, {}
"""


async def test_an_environment_reading_the_clock_fails_the_determinism_check(pool):
    verdict = await verdict_of(pool, EnvSpec("clock", CLOCK_ENV))
    [reason] = verdict.reasons
    assert reason.startswith("seed 11: not deterministic: two fresh instances given the same seed "
                             "and actions diverge: turn 1 observations differ ('it is ")


async def test_an_unseeded_environment_fails_the_determinism_check(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/nondeterministic.py"))
    [reason] = verdict.reasons
    assert reason.startswith("seed 11: not deterministic: two fresh instances given the same seed "
                             "and actions diverge: the initial observations differ (")
    assert reason.endswith("; draw all randomness from random.Random(seed) in reset, never the "
                           "global random module or the clock")
    assert verdict.oracle == "skipped"


async def test_an_environment_that_wins_only_after_oracle_action_fails_the_replay(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/oracle_dependent.py"))
    assert verdict.reasons == [
        "seed 11: replaying the oracle's 1 actions in a fresh instance does not reproduce its win: "
        "turn 1 observations differ ('You win!' vs 'Wrong.'); oracle_action must only read the "
        "state, never change it"]
    assert verdict.oracle == "failed"


async def test_an_environment_that_ignores_its_seed_is_refused(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/ignores_seed.py"))
    assert verdict.reasons == [
        "every one of the 3 benchmark seeds gives the same initial observation and the same "
        "trajectories: the environment ignores its seed; build each instance from "
        "random.Random(seed) in reset"]


async def test_one_seed_cannot_show_that_the_seed_is_ignored(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/ignores_seed.py"), seeds=[5])
    assert verdict.valid


async def test_an_environment_without_oracle_is_valid_unless_the_oracle_is_required(pool):
    spec = fixture_spec("good/no_oracle.py")
    found = (await verdict_of(pool, spec)).to_json()
    assert found.pop("battery")["flag"] is None
    assert found == {
        "valid": True, "reasons": [], "oracle": "absent", "class_name": "Coin", "seeds": SEEDS}
    required = await verdict_of(pool, spec, require_oracle=True)
    assert required.reasons == ["Coin has no oracle_action: add oracle_action() returning a winning "
                                "action for the current state (required here)"]
    assert (required.valid, required.oracle) == (False, "absent")


async def test_an_oracle_that_never_wins_fails_within_the_turn_cap(pool):
    source = GOOD.source.replace('return f"\\\\boxed{{{self.code}}}"', 'return "\\\\boxed{2222}"')
    assert source != GOOD.source
    verdict = await verdict_of(pool, EnvSpec("loser", source, max_turns=10), max_turns=4)
    assert verdict.reasons == ["seed 11: playing oracle_action() each turn does not win (no win within "
                               "the 4-turn cap): make oracle_action return a winning action for the "
                               "current state"]
    assert verdict.oracle == "failed"
    truncated = await verdict_of(pool, EnvSpec("loser", source, max_turns=6))
    assert truncated.reasons[0].startswith(
        "seed 11: playing oracle_action() each turn does not win (the episode was truncated at turn 6)")


async def test_an_episode_that_never_ends_is_fine_and_capped_by_max_turns(pool):
    source = ("import random\nclass Endless:\n    def reset(self, seed=None):\n"
              "        return str(random.Random(seed).random()), {}\n"
              "    def step(self, action):\n        return 'again', 0.0, False, False, {}\n")
    verdict = await verdict_of(pool, EnvSpec("endless", source, max_turns=10_000), max_turns=5)
    assert (verdict.valid, verdict.oracle) == (True, "absent")


async def test_hint_with_code_block_boxed_and_over_long_each_give_a_reason(pool):
    hint = "Use this:\n```\nguess()\n```\nthen \\boxed{0000}." + " pad" * 40
    verdict = await verdict_of(pool, EnvSpec(**{**GOOD.__dict__, "hints": {"hint": hint}}),
                               hint_max_chars=100)
    assert verdict.reasons == [
        f"the hint is {len(hint)} characters, over the limit of 100: shorten it to the key insight",
        "the hint contains a code block: state the insight in prose, without ``` fences",
        "the hint contains \\boxed{...}: a hint may not hand over an action; describe the idea instead",
    ]
    assert verdict.oracle == "passed"  # the environment itself was still checked


async def test_graded_hints_are_each_checked_and_named(pool):
    spec = EnvSpec(**{**GOOD.__dict__, "hints": {"hint_1": "fine", "hint_2": "say \\boxed{1}"}})
    verdict = await verdict_of(pool, spec, seeds=[1])
    assert verdict.reasons == ["hint_2: the hint contains \\boxed{...}: a hint may not hand over an "
                               "action; describe the idea instead"]


async def test_a_malicious_environment_gets_a_clear_verdict_and_the_pool_goes_on(pool):
    verdict = await verdict_of(pool, fixture_spec("malicious_env.py"))
    assert verdict.reasons == [
        "seed 11, probe episode: in reset: reset raised FileNotFoundError: [Errno 2] No such file "
        "or directory: '/etc/shadow' (env line 17 in reset)"]
    assert (await verdict_of(pool, GOOD)).valid


async def test_an_infinite_loop_times_out_into_a_reason_and_the_pool_goes_on(pool):
    verdict = await verdict_of(pool, fixture_spec("bad/loop_forever.py"))
    assert verdict.reasons == ["seed 11, probe episode: in step (turn 1): step timed out after 2 s"]
    assert (await verdict_of(pool, GOOD)).valid


async def test_a_constructor_that_raises_means_the_environment_does_not_load(pool):
    source = GOOD.source.replace("self.max_turns = max_turns", "raise RuntimeError('no')")
    verdict = await verdict_of(pool, EnvSpec("crash", source))
    [reason] = verdict.reasons
    assert reason.startswith("the environment does not load: ")
    assert "RuntimeError: no" in reason


async def test_a_source_too_deeply_nested_to_parse_is_an_invalid_verdict(pool):
    verdict = await verdict_of(pool, EnvSpec("deep", "x = " + "-" * 3000 + "1\n"))
    assert verdict.to_json() == {
        "valid": False, "oracle": "skipped", "class_name": None, "seeds": SEEDS,
        "reasons": ["the source is too deeply nested to parse: flatten the deeply nested expression"]}


SLOW_WINNER = '''
import random, time

class SlowWinner:
    def __init__(self, max_turns: int = 10**9):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.start, self.turn = random.Random(seed).random(), 0
        return f"start {self.start}", {}

    def step(self, action):
        time.sleep(DELAY)
        self.turn += 1
        won = self.turn > WIN_AFTER
        return f"turn {self.turn}", float(won), won, False, {}

    def oracle_action(self):
        return "\\\\boxed{go}"
'''


def slow_winner(delay: float, win_after: int) -> EnvSpec:
    source = SLOW_WINNER.replace("DELAY", repr(delay)).replace("WIN_AFTER", str(win_after))
    return EnvSpec("slow", source, max_turns=10**9)


async def test_without_a_caller_cap_validation_stops_at_1000_turns_whatever_max_turns_says(pool):
    verdict = await verdict_of(pool, slow_winner(0.0, 1000), seeds=[5])
    assert verdict.reasons == ["seed 5: playing oracle_action() each turn does not win (no win within "
                               "the 1000-turn cap): make oracle_action return a winning action for "
                               "the current state"]
    within = await verdict_of(pool, slow_winner(0.0, 999), seeds=[5])
    assert (within.valid, within.oracle) == (True, "passed")


async def test_validation_past_its_wall_clock_budget_is_invalid_with_one_reason(pool):
    started = time.monotonic()
    verdict = await verdict_of(pool, slow_winner(0.05, 10**6), seeds=[5], budget_s=0.5)
    elapsed = time.monotonic() - started
    [reason] = verdict.reasons
    assert re.fullmatch(r"seed 5, probe episode before turn \d+: validation ran past its 0\.5 s "
                        r"budget: make reset and step faster, or end episodes in fewer turns", reason)
    assert (verdict.valid, verdict.oracle) == (False, "skipped")
    assert elapsed < 0.5 + 2.0  # at most one more step past the budget (its deadline is 2 s)
