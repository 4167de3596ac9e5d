"""The run database: what analysis, report, export and resume rely on."""

from __future__ import annotations

import pytest
from run_records import call

from envduels.envs import EnvSpec
from envduels.errors import UserError
from envduels.store import EnvRecord, EpisodeRow, RunReader, ValidationRecord
from envduels.store.writer import RunWriter


def _env(env_id: str = "r1-a-0", valid: bool = True) -> EnvRecord:
    spec = EnvSpec(env_id, "class E: ...", class_name="E", max_turns=5, domain="logic",
                   author="a", title="Lock", hints={"hint": "try 7"},
                   benchmark_seeds=(2**62 + 5, 11), metadata={"k": 1})
    return EnvRecord(spec, round=1, valid=valid, invalid_reason=None if valid else "reset raised")


def _episode(key: str, outcome: str = "success", hinted: bool = True) -> EpisodeRow:
    return EpisodeRow(
        episode_key=key, env_id="r1-a-0", author="a", solver="b", round=1, domain="logic",
        seed=2**62 + 5, trial=0, hinted=hinted, outcome=outcome, reason="won", turns=2,
        self_play=False, transcript=[{"role": "user", "content": "Observation: x"}],
    )


def test_tables_have_the_documented_columns_and_types(tmp_path):
    store = RunWriter(tmp_path)
    store.set_meta("config", {"name": "t", "players": [
        {"name": "a", "provider": "openai", "model": "m-a", "params_b": 8, "roles": ["author"]},
        {"name": "b", "provider": "local", "model": "m-b", "roles": ["author", "solver"]},
    ]})
    store.put("k1", call("a", "author", "c1", input_tokens=10, output_tokens=5, cost_usd=0.25,
                         text="hi"))
    store.put_environment(_env())
    store.put_episode(_episode("e1"))
    t = store.reader.tables()
    assert list(t.players.columns) == ["name", "provider", "model", "params_b", "roles",
                                       "cost_usd", "input_tokens", "output_tokens",
                                       "cache_read_tokens", "cache_write_tokens",
                                       "reasoning_tokens", "saved_usd"]
    a = t.players.set_index("name").loc["a"]
    assert (a.cost_usd, a.input_tokens, a.output_tokens, a.roles) == (0.25, 10, 5, ["author"])
    assert t.players.set_index("name").loc["b"].cost_usd == 0.0
    env = t.environments.iloc[0]
    assert env.benchmark_seeds == [2**62 + 5, 11]
    assert bool(env.valid)
    assert env.hint == "try 7"
    assert str(t.environments["fixed_pool"].dtype) == "bool"
    ep = t.episodes.iloc[0]
    assert list(t.episodes.columns) == ["episode_key", "env_id", "author", "solver", "round",
                                        "domain", "seed", "trial", "hinted", "outcome", "reason",
                                        "turns", "self_play", "transcript"]
    assert ep.seed == 2**62 + 5 and ep.transcript == [{"role": "user", "content": "Observation: x"}]
    assert str(t.episodes["hinted"].dtype) == "bool"


def test_empty_run_gives_empty_tables_with_columns(tmp_path):
    t = RunWriter(tmp_path).reader.tables()
    assert len(t.episodes) == 0 and "outcome" in t.episodes.columns
    assert len(t.environments) == 0 and "benchmark_seeds" in t.environments.columns


def test_response_cache_keeps_the_first_record_and_counts_it_once(tmp_path):
    store = RunWriter(tmp_path)
    assert store.get("k") is None
    store.put("k", call("a", text="one", input_tokens=3, output_tokens=4, cost_usd=1.0))
    store.put("k", call("a", text="two", input_tokens=3, output_tokens=4, cost_usd=1.0))
    assert store.get("k").text == "one"
    totals = store.totals()
    assert (totals.calls, totals.tokens, totals.cost_usd) == (1, 7, 1.0)


def test_error_episodes_are_not_finished_and_a_retry_replaces_them(tmp_path):
    store = RunWriter(tmp_path)
    store.put_episode(_episode("e1", outcome="error"))
    store.put_episode(_episode("e2", outcome="failure"))
    assert store.finished_episode_keys() == {"e2"}
    store.put_episode(_episode("e1", outcome="success"))
    assert store.finished_episode_keys() == {"e1", "e2"}
    assert len(store.reader.episodes()) == 2


def test_records_survive_reopening_the_database(tmp_path):
    with RunWriter(tmp_path) as store:
        store.put_environment(_env())
        store.put_validation(ValidationRecord("r1-a-0", 0, author="a", round=1, valid=False,
                                              reasons=["no class"], verdict=None, reply="..."))
        store.set_meta("fingerprint", "f")
    again = RunWriter(tmp_path, create=False)
    assert again.reader.environment("r1-a-0") == _env()
    assert again.reader.validations("r1-a-0")[0].reasons == ["no class"]
    assert again.reader.meta("fingerprint") == "f"
    assert again.db.query("PRAGMA journal_mode")[0][0] == "wal"


def test_opening_a_folder_without_a_run_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="holds no run database"):
        RunWriter(tmp_path / "nothing", create=False)


def test_lone_surrogates_are_stored_as_replacement_characters(tmp_path):
    # environment code and model replies may hold lone surrogates, which UTF-8 cannot encode
    store = RunWriter(tmp_path)
    bad = "bad \udcff action"
    env = EnvRecord(EnvSpec(
        "r1-a-0", "x = '\udcff'\n", class_name="E", max_turns=5, domain="logic", author="a",
        title="T\ud800", hints={"hint": "h\ud800"}, benchmark_seeds=(1,), metadata={"m": "\ud800"}),
        round=1, valid=False, invalid_reason=f"reset raised ValueError: {bad}")
    store.put_environment(env)
    store.put_validation(ValidationRecord("r1-a-0", 0, author="a", round=1, valid=False,
                                          reasons=[bad], verdict={"why": bad},
                                          reply="```python\n\ud800```"))
    store.put_episode(EpisodeRow(
        episode_key="e1", env_id="r1-a-0", author="a", solver="b", round=1, domain="logic",
        seed=1, trial=0, hinted=True, outcome="incomplete",
        reason=f"environment fault: step raised ValueError: {bad}", turns=1, self_play=False,
        transcript=[{"role": "assistant", "content": "\\boxed{a\ud800}"}],
    ))
    store.put("k\ud800", call("a", "solver", text="r\udcff", request={"m": "\ud800"}))
    ep, = RunReader(tmp_path).episodes()
    assert ep.reason == "environment fault: step raised ValueError: bad \ufffd action"
    assert ep.transcript == [{"role": "assistant", "content": "\\boxed{a\ufffd}"}]
    row = store.reader.environment("r1-a-0")
    assert (row.title, row.invalid_reason, row.hints, row.source, row.metadata) == (
        "T\ufffd", "reset raised ValueError: bad \ufffd action", {"hint": "h\ufffd"},
        "x = '\ufffd'\n", {"m": "\ufffd"})
    v, = store.reader.validations()
    assert (v.reasons, v.verdict, v.reply) == (
        ["bad \ufffd action"], {"why": "bad \ufffd action"}, "```python\n\ufffd```")
    got = store.get("k\ud800")
    assert (got.player, got.role, got.text, got.request) == ("a", "solver", "r\ufffd", {"m": "\ufffd"})


def test_the_environments_table_keeps_every_field_of_the_record(tmp_path):
    store = RunWriter(tmp_path)
    spec = EnvSpec("maze", "class M: ...", hints={"hint_1": "walls", "hint_2": "exit east"},
                   metadata={"split": "train"}, benchmark_seeds=(3,))
    store.put_environment(EnvRecord(spec, round=1, slot=2, fixed_pool=True))
    row = store.reader.tables().environments.iloc[0]
    assert (row.hint, row.hints, row.metadata, row.slot, row.source_sha256) == (
        "walls", {"hint_1": "walls", "hint_2": "exit east"}, {"split": "train"}, 2,
        spec.source_sha256)
    assert store.reader.environment("maze").spec == spec
