"""Pure engine logic: boxed extraction, solver prompts, author replies, keys, history."""

from __future__ import annotations

import time

import run_records

from envduels.config import parse_config
from envduels.engine._keys import (
    changed_setting,
    episode_key,
    fingerprint,
    result_settings,
)
from envduels.engine.authoring import AUTHOR_REPLY_MAX_CHARS as AUTHOR_CAP
from envduels.engine.authoring import parse_reply, repair_prompt
from envduels.engine.history import history_digest
from envduels.engine.solving import (
    ACTION_SEARCH_MAX_CHARS,
    FORMAT_ERROR,
    SYSTEM_PROMPT,
    first_turn,
    last_boxed,
    next_turn,
    turn_cap,
)


def test_last_boxed_takes_the_last_balanced_one_with_its_wrapper():
    assert last_boxed(r"I think \boxed{a} no wait \boxed{b}") == r"\boxed{b}"
    assert last_boxed(r"\boxed{f(x) = {1, 2}} done") == r"\boxed{f(x) = {1, 2}}"
    assert last_boxed(r"\boxed{left} then \boxed{unclosed") == r"\boxed{left}"
    assert last_boxed(r"\boxed{\boxed{x}}") == r"\boxed{\boxed{x}}"
    assert last_boxed(r"\boxed{}") == r"\boxed{}"
    assert last_boxed("no action here") is None
    assert last_boxed(r"\boxed{never closed") is None


def test_solver_prompts_use_the_envduels_wording_exactly():
    assert SYSTEM_PROMPT == (
        "You are playing an interactive language game. Make one valid action per turn. "
        "Reason carefully and put the action for that turn inside \\boxed{}.")
    assert first_turn("grid", hint="go left") == (
        "Hint: go left\n\nObservation: grid\n\n"
        "Respond with exactly one action for this turn inside \\boxed{}.")
    assert first_turn("grid", hint=None) == (
        "Observation: grid\n\nRespond with exactly one action for this turn inside \\boxed{}.")
    assert next_turn("{{ not jinja }}") == (
        "Observation: {{ not jinja }}\n\n"
        "Respond with exactly one action for this turn inside \\boxed{}.")
    assert FORMAT_ERROR == "Invalid action format. Use \\boxed{ACTION}."
    assert turn_cap(20, 6) == 6 and turn_cap(3, 24) == 3


def test_author_reply_uses_the_last_python_block_and_tags_outside_code():
    reply = (
        "Draft:\n```python\nclass Old: pass\n```\nFinal:\n```python\nclass New:\n"
        "    s = '<hint>inside code</hint>'\n```\n"
        "<hint> press the red button </hint>\n<domain>Logic</domain>\n<title>Red  button</title>"
    )
    parsed = parse_reply(reply)
    assert parsed.source == "class New:\n    s = '<hint>inside code</hint>'\n"
    assert parsed.hint == "press the red button"
    assert (parsed.domain, parsed.title, parsed.problems) == ("logic", "Red button", [])


def test_author_reply_defaults_and_problems():
    parsed = parse_reply("```python\nclass E: pass\n```\n<hint>h</hint><domain>two words</domain>")
    assert (parsed.domain, parsed.title) == ("other", "")
    missing = parse_reply("no code, no hint")
    assert missing.source is None and missing.hint is None
    assert len(missing.problems) == 2 and "```python" in missing.problems[0]


def test_repair_prompt_lists_every_reason():
    text = repair_prompt(["reset raised ValueError", "hint is empty"])
    assert "- reset raised ValueError\n- hint is empty\n" in text


def _cfg(**tournament):
    return parse_config({
        "name": "t", "players": [{"name": "a", "provider": "openai", "model": "m"}],
        "tournament": tournament,
    })


def test_fingerprint_ignores_speed_and_budget_but_names_result_changes():
    base = result_settings(_cfg())
    assert fingerprint(base) == fingerprint(result_settings(_cfg()))
    faster = parse_config({"name": "t", "budget": {"max_usd": 5}, "players": [
        {"name": "a", "provider": "openai", "model": "m", "max_concurrency": 64, "timeout_s": 9}]})
    assert fingerprint(result_settings(faster)) == fingerprint(base)
    assert changed_setting(base, result_settings(_cfg(seeds_per_env=2))) == "tournament.seeds_per_env"
    assert changed_setting(base, result_settings(_cfg(rounds=3))) is None


def test_episode_key_is_deterministic_and_separates_conditions():
    k = episode_key("fp", "env", "sha", "b", 7, 0, False)
    assert k == episode_key("fp", "env", "sha", "b", 7, 0, False)
    assert k != episode_key("fp", "env", "sha", "b", 7, 0, True)
    assert k != episode_key("fp", "env", "sha2", "b", 7, 0, False)


def _env(env_id, author, valid=True, reason=None, round_=1, hint="count the vowels"):
    return run_records.env(env_id, author, round=round_, valid=valid, invalid_reason=reason,
                           hint=hint, domain="logic", title=env_id.upper(), source="",
                           class_name="E", max_turns=5, benchmark_seeds=(1, 2))


def _ep(env_id, author, solver, seed, hinted, outcome, action="\\boxed{x}", self_play=False):
    return {"episode_key": f"{env_id}{solver}{seed}{hinted}", "env_id": env_id, "author": author,
            "solver": solver, "round": 1, "domain": "logic", "seed": seed, "trial": 0,
            "hinted": hinted, "outcome": outcome, "reason": "r", "turns": 1,
            "self_play": self_play,
            "transcript": [{"role": "env", "action": action, "reward": 0.0}]}


def test_history_orders_by_hint_gain_and_respects_visibility_and_budget():
    envs = [_env("flat", "a"), _env("gated", "b"), _env("broken", "a", valid=False,
                                                            reason="reset raised")]
    eps = [
        _ep("flat", "a", "b", 1, False, "success"), _ep("flat", "a", "b", 1, True, "success"),
        _ep("gated", "b", "a", 1, False, "failure", "\\boxed{guess}"),
        _ep("gated", "b", "a", 1, True, "success", "\\boxed{vowels}"),
        _ep("gated", "b", "b", 1, True, "failure", self_play=True),
    ]
    t = run_records.tables(envs, eps)
    assert history_digest(t, author="a", round_=1, mode="all", max_chars=9999) == ""
    assert history_digest(t, author="a", round_=2, mode="none", max_chars=9999) == ""
    text = history_digest(t, author="a", round_=2, mode="all", max_chars=9999)
    assert text.index('"GATED"') < text.index('"FLAT"') < text.index('"BROKEN"')
    assert "  a: 0% -> 100%" in text and "  b: 100% -> 100%" in text
    assert "flags: hint_gated, hint_leak" in text  # "vowels" is inside the hint
    assert "rescued (a): without the hint it ended with \\boxed{guess}" in text
    assert "INVALID: reset raised" in text
    own = history_digest(t, author="a", round_=2, mode="own", max_chars=9999)
    assert '"GATED"' not in own and '"FLAT"' in own
    short = history_digest(t, author="a", round_=2, mode="all", max_chars=200)
    assert len(short) <= 200 and '"GATED"' not in short and "BROKEN" in short


def test_episode_task_is_a_picklable_value():
    import pickle

    from envduels.engine.solving import EpisodeTask
    from envduels.envs import EnvSpec

    task = EpisodeTask(key="k", env=EnvSpec(id="e", source="x", hints={"hint": "h"}),
                       solver="s", seed=2**62, trial=0, hinted=True, max_turns=4)
    assert pickle.loads(pickle.dumps(task)) == task


def _tasks(tmp_path, **tournament):
    from envduels.engine.progress import Progress
    from envduels.engine.scheduler import Tournament
    from envduels.envs import EnvSpec
    from envduels.store import EnvRecord
    from envduels.store.writer import RunWriter

    cfg = parse_config({"name": "t", "tournament": tournament, "players": [
        {"name": "a", "provider": "openai", "model": "m"},
        {"name": "b", "provider": "openai", "model": "m", "roles": ["solver"]},
        {"name": "c", "provider": "openai", "model": "m", "roles": ["author"]}]})
    env = EnvRecord(EnvSpec("r1-a-0", "s", class_name="E", max_turns=9, domain="d", author="a",
                            hints={"hint": "h"}, benchmark_seeds=(11, 12)), round=1)
    t = Tournament(cfg, writer=RunWriter(tmp_path), players={}, sandboxes=None, fingerprint="fp",
                   fixed_envs=[], progress=Progress(rounds=1))
    return t._tasks([env])


def test_every_solver_plays_every_seed_and_trial_in_both_conditions(tmp_path):
    tasks = _tasks(tmp_path, trials_per_seed=2, max_turns=5)
    assert len(tasks) == 2 * 2 * 2 * 2  # solvers a, b (c only authors) x seeds x trials x hinted
    assert {(t.solver, t.seed, t.trial) for t in tasks if t.hinted} == {
        (t.solver, t.seed, t.trial) for t in tasks if not t.hinted}
    assert {t.max_turns for t in tasks} == {5}  # min(env 9, tournament 5)
    assert {t.solver for t in tasks if t.self_play} == {"a"}
    assert len({t.key for t in tasks}) == len(tasks)


def test_self_play_false_skips_an_author_on_its_own_environment(tmp_path):
    tasks = _tasks(tmp_path, self_play=False)
    assert {t.solver for t in tasks} == {"b"} and not any(t.self_play for t in tasks)


def test_every_example_config_is_valid():
    from pathlib import Path

    from envduels.config import load_config

    examples = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        cfg = load_config(path)
        assert cfg.players, path
    quick = load_config(examples[0].with_name("quickstart.yaml"))
    assert {p.provider for p in quick.players} == {"local"}
    assert len({p.temperature for p in quick.players}) == len(quick.players) >= 2


def _timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def test_last_boxed_is_linear_on_adversarial_replies():
    # before: 23 s on 70 KB of repeated "\boxed{" (each opening rescanned the rest)
    found, took = _timed(last_boxed, "\\boxed{" * 10_000)
    assert found is None and took < 1.0
    found, took = _timed(last_boxed, "\\boxed{" * 10_000 + "x}")
    assert found == "\\boxed{x}" and took < 1.0


def test_last_boxed_searches_only_the_end_of_a_long_reply():
    tail = "\\boxed{late}"
    text = "\\boxed{early}" + "x" * ACTION_SEARCH_MAX_CHARS
    assert last_boxed(text) is None
    assert last_boxed(text + tail) == tail
    assert last_boxed("y" * 50 + "z" * (ACTION_SEARCH_MAX_CHARS - 55) + "\\boxed{ok}") == \
        "\\boxed{ok}"


def test_parse_reply_is_linear_on_adversarial_replies():
    # before: 95 s on 180 KB of "<hint>" (each opening rescanned the rest)
    parsed, took = _timed(parse_reply, "<hint>" * 30_000)
    assert parsed.hint is None and took < 1.0
    parsed, took = _timed(parse_reply, "```python" * 40_000 + "\n<hint>h</hint>")
    assert (parsed.source, parsed.hint) == (None, "h") and took < 1.0
    parsed, took = _timed(parse_reply, "<hint>" * 30_000 + "x</hint>" + "```python\nA\n```" * 9_000)
    assert (parsed.hint, parsed.source) == ("<hint>" * 29_999 + "x", "A\n") and took < 1.0


def test_parse_reply_refuses_a_reply_over_the_cap_and_reads_lone_surrogates_as_fffd():
    long = "```python\nclass E: pass\n```\n<hint>h</hint>" + " " * AUTHOR_CAP
    assert parse_reply(long).problems == [
        f"the reply has {len(long)} characters; at most {AUTHOR_CAP} are read, so send one "
        "shorter reply with the environment and its hint"]
    parsed = parse_reply("```python\nx = '\ud800'\n```\n<hint>a\udcff</hint>")
    assert (parsed.source, parsed.hint, parsed.problems) == ("x = '\ufffd'\n", "a\ufffd", [])
