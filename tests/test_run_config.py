"""A run's config is read back from its database as the validated `RunConfig` (`Store.run_config`),
also when another version of envduels recorded it."""

from __future__ import annotations

from envduels.config import parse_config
from envduels.store.writer import RunWriter

CONFIG = {
    "name": "recorded", "seed": 3,
    "players": [{"name": "a", "provider": "openai", "model": "m", "params_b": 8},
                {"name": "b", "provider": "local", "model": "small", "roles": ["solver"],
                 "params_b": 0.1}],
    "tournament": {"seeds_per_env": 2, "history": "own"},
}

# What the first release recorded (skeleton b07e930): no author_max_tokens, cache, cached prices
# or executor, which came later; plus a key of a version that is not this one and a value
# today's schema refuses.
FROM_ANOTHER_VERSION = {
    "name": "old", "seed": 5, "output_dir": "runs/old",
    "players": [
        {"name": "a", "provider": "openai", "model": "m", "base_url": None, "api_key_env": "K",
         "temperature": 0.2, "top_p": None, "max_tokens": 512, "context_tokens": None,
         "reasoning_effort": None, "timeout_s": 120.0, "max_retries": 6, "max_concurrency": 4,
         "requests_per_minute": None, "tokens_per_minute": None, "params_b": 7.0,
         "roles": ["author", "solver"], "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
         "stop_sequences": ["\n"]},
        {"name": "b", "provider": "openai", "model": "m2", "roles": ["solver"]}],
    "tournament": {"rounds": 2, "envs_per_author": 1, "seeds_per_env": 3, "trials_per_seed": 1,
                   "max_turns": 5000, "history": "all", "history_chars": 6000,
                   "author_repairs": 2, "require_oracle": True, "hint_max_chars": 600,
                   "self_play": True, "environments": []},
    "sandbox": {"memory_mb": 512, "step_timeout_s": 5.0, "cpu_s": 60, "max_procs": 64,
                "observation_max_chars": 8000, "warm_workers": 2},
    "budget": {"max_usd": None, "max_tokens": None},
}


def test_a_run_reads_back_the_config_it_was_started_with(tmp_path):
    cfg = parse_config(CONFIG)
    with RunWriter(tmp_path) as store:
        store.set_meta("config", cfg.model_dump(mode="json"))
        assert store.reader.run_config() == cfg
        players = store.reader.tables().players
    assert players[["name", "provider", "model", "params_b"]].to_dict("records") == [
        {"name": "a", "provider": "openai", "model": "m", "params_b": 8.0},
        {"name": "b", "provider": "local", "model": "small", "params_b": 0.1}]
    assert players["roles"].tolist() == [["author", "solver"], ["solver"]]


def test_a_config_recorded_by_another_version_opens_with_today_s_defaults(tmp_path):
    with RunWriter(tmp_path) as store:
        store.set_meta("config", FROM_ANOTHER_VERSION)
        cfg = store.reader.run_config()
        players = store.reader.tables().players
    assert cfg is not None and cfg.name == "old" and cfg.seed == 5
    assert [p.name for p in cfg.players] == ["a", "b"]
    assert (cfg.players[0].temperature, cfg.players[0].price.output_per_mtok) == (0.2, 2.0)
    assert cfg.players[0].cache is True and cfg.executor.kind == "local"   # came later: defaults
    assert cfg.tournament.max_turns == 24      # 5000 is refused today: the default
    assert (cfg.tournament.rounds, cfg.tournament.seeds_per_env) == (2, 3)
    assert players["name"].tolist() == ["a", "b"]
    assert players["roles"].tolist() == [["author", "solver"], ["solver"]]


def test_a_run_without_a_usable_config_reads_none_and_has_no_players(tmp_path):
    with RunWriter(tmp_path) as store:
        assert store.reader.run_config() is None
        assert store.reader.tables().players.empty
        store.set_meta("config", {"name": "x", "players": [{"name": "no spaces allowed",
                                                            "provider": "openai", "model": "m"}]})
        assert store.reader.run_config() is None      # a player without a usable name: nothing to guess
        store.set_meta("config", ["not", "a", "mapping"])
        assert store.reader.run_config() is None


def test_a_config_today_s_schema_cannot_read_still_gives_the_analysis_its_players(tmp_path):
    """One required value refused today (a provider since renamed) made the whole config
    unreadable, and the report silently lost every player: no author or duel ratings."""
    recorded = {"name": "old", "players": [
        {"name": "a", "provider": "vllm", "model": "m", "params_b": 7},
        {"name": "b", "provider": "openai", "model": "m2", "roles": ["solver"]}]}
    with RunWriter(tmp_path) as store:
        store.set_meta("config", recorded)
        assert store.reader.run_config() is None
        players = store.reader.tables().players
    assert players["name"].tolist() == ["a", "b"]
    assert players["provider"].tolist() == ["vllm", "openai"]
    assert players["roles"].tolist() == [["author", "solver"], ["solver"]]
    assert players["params_b"].tolist()[0] == 7


def test_refused_list_items_are_dropped_one_by_one_not_the_whole_list(tmp_path):
    """Each refused value is dropped on its own, so a list keeps its usable items (dropping
    several list items in one pass would shift the later indices)."""
    recorded = {"name": "r", "players": [
        {"name": "a", "provider": "openai", "model": "m", "roles": ["judge", "solver", "coach"]},
        {"name": "b", "provider": "openai", "model": "m"}]}
    with RunWriter(tmp_path) as store:
        store.set_meta("config", recorded)
        cfg = store.reader.run_config()
    assert cfg is not None and cfg.players[0].roles == ["solver"]
