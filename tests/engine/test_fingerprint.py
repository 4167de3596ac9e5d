"""The run fingerprint is derived from the declarations on the config's fields (config.py), and
is the same as before that derivation: a run started by an earlier version still resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from envduels.config import (
    NO_RESULT_EFFECT,
    PlayerConfig,
    RunConfig,
    SandboxConfig,
    load_config,
    parse_config,
)
from envduels.engine._keys import changed_setting, fingerprint, result_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Computed once with main at 6b44c60 (before the fields declared whether they change results,
# when engine/_keys.py listed them), by running, for each config below and each example file:
#   fingerprint(result_settings(parse_config(cfg)))   /   ... (load_config(path))
# A change here means a run started by that version no longer resumes.
OLD_EXAMPLE_FINGERPRINTS = {
    "openai_compatible.yaml": "93a31cb1dd92cbd033a22c64bf4dad074434b28a14d31a6a23e3448e74e59d34",
    "solver_eval.yaml": "ea9e76700c3c4a65ebd688da1c5c7d7dd83eb0cd25889d2bcc373570306c28bb",
    "train_target.yaml": "31af338c043b5f0e5fcd64c182638e5ea6c44aa09a8c684012c779a94312212c",
}
OLD_VARIED_FINGERPRINTS = {
    "defaults": "0c5d0955c12011c0ee2b0ca638c97e2bbbc059ee084836f95286d9310422df63",
    "every_field": "7dc7bd48b45b087f90afd802f0448729b28f32a212b1056a6b66d4f626a861a2",
    "pool_only_solvers": "4f2f7cf696ffe018e29ada00d5d7c7895fda5333fb369e3059642a83a4c58140",
    # examples/quickstart.yaml as it was until issue 30 made the quickstart smaller: a run of it
    # still resumes
    "quickstart_before_issue_30": "895aa0f9b8e804f97404db46133a4ba7b549c7c967410e1613c17eff44e15a04",
}

BASE_PLAYER = {"name": "a", "provider": "openai", "model": "m"}
EVERY_PLAYER_FIELD = {
    "name": "full", "provider": "anthropic", "model": "claude-x", "base_url": "http://127.0.0.1:9/v1",
    "api_key_env": "ANTHROPIC_KEY", "temperature": 0.3, "top_p": 0.9, "max_tokens": 2048,
    "author_max_tokens": 8000, "context_tokens": 32000, "reasoning_effort": "low", "timeout_s": 30,
    "max_retries": 2, "max_concurrency": 32, "requests_per_minute": 60, "tokens_per_minute": 90000,
    "params_b": 70, "roles": ["solver", "author"],
    "price": {"input_per_mtok": 3, "output_per_mtok": 15, "cached_input_per_mtok": 0.3,
              "cache_write_per_mtok": 3.75},
    "cache": False,
}
VARIED = {
    "defaults": {"name": "t", "players": [BASE_PLAYER]},
    "every_field": {
        "name": "every", "seed": 17, "output_dir": "runs/elsewhere",
        "players": [EVERY_PLAYER_FIELD, {"name": "b.2", "provider": "local", "model": "smollm2",
                                         "roles": ["solver"]}],
        "tournament": {"rounds": 3, "envs_per_author": 2, "seeds_per_env": 5, "trials_per_seed": 2,
                       "max_turns": 9, "history": "own", "history_chars": 100,
                       "author_repairs": 0, "require_oracle": False, "hint_max_chars": 200,
                       "self_play": False, "environments": ["maze", "twenty_questions"]},
        "sandbox": {"memory_mb": 1024, "step_timeout_s": 2.5, "cpu_s": 30, "max_procs": 16,
                    "observation_max_chars": 4000, "warm_workers": 0},
        "budget": {"max_usd": 2.5, "max_tokens": 100000},
        "executor": {"kind": "ray", "address": "auto", "sandboxes_per_cpu": 2},
    },
    "pool_only_solvers": {
        "name": "pool", "seed": -3,
        "players": [{"name": "s1", "provider": "openai", "model": "m1", "roles": ["solver"],
                     "temperature": 0.0, "top_p": 1.0},
                    {"name": "s2", "provider": "local", "model": "m2", "roles": ["solver"]}],
        "tournament": {"environments": ["maze"], "seeds_per_env": 8},
    },
    "quickstart_before_issue_30": {
        "name": "quickstart", "seed": 0, "output_dir": "runs/quickstart",
        "players": [{"name": name, "provider": "local", "model": "smollm2-135m-instruct",
                     "temperature": temperature, "max_tokens": 96, "author_max_tokens": 400,
                     "max_concurrency": 1, "timeout_s": 600}
                    for name, temperature in (("cool", 0.2), ("warm", 1.0))],
        "tournament": {"rounds": 1, "envs_per_author": 1, "max_turns": 2, "author_repairs": 1,
                       "history": "all", "environments": ["number_guess", "word_transform"]},
        "sandbox": {"warm_workers": 1},
    },
}


@pytest.mark.parametrize("name", sorted(OLD_EXAMPLE_FINGERPRINTS))
def test_every_example_config_keeps_the_fingerprint_it_had_before(name):
    cfg = load_config(EXAMPLES / name)
    assert fingerprint(result_settings(cfg)) == OLD_EXAMPLE_FINGERPRINTS[name]


@pytest.mark.parametrize("name", sorted(OLD_VARIED_FINGERPRINTS))
def test_varied_configs_keep_the_fingerprint_they_had_before(name):
    assert fingerprint(result_settings(parse_config(VARIED[name]))) == OLD_VARIED_FINGERPRINTS[name]


def test_the_settings_that_change_results_are_named_as_before():
    every = result_settings(parse_config(VARIED["every_field"]))
    assert sorted(every) == [
        "players", *sorted(f"players.{p}.{k}" for p, keys in (
            ("full", ["provider", "model", "temperature", "top_p", "max_tokens", "author_max_tokens",
                      "context_tokens", "reasoning_effort", "roles"]),
            ("b.2", ["provider", "model", "temperature", "top_p", "max_tokens", "author_max_tokens",
                     "context_tokens", "reasoning_effort", "roles"])) for k in keys),
        "sandbox.observation_max_chars", "seed",
        "tournament.author_repairs", "tournament.environments", "tournament.envs_per_author",
        "tournament.hint_max_chars", "tournament.history", "tournament.history_chars",
        "tournament.max_turns", "tournament.require_oracle", "tournament.seeds_per_env",
        "tournament.self_play", "tournament.trials_per_seed"]
    assert every["players"] == ["full", "b.2"]
    assert every["players.full.roles"] == ["solver", "author"]


class _SandboxWithGpu(SandboxConfig):
    gpu_memory_mb: int = 0                                             # declared nothing: changes results
    gpu_warm_workers: int = Field(1, json_schema_extra=NO_RESULT_EFFECT)


class _PlayerWithStop(PlayerConfig):
    stop: list[str] = Field(default_factory=list)


class _RunWithNewFields(RunConfig):
    sandbox: _SandboxWithGpu = Field(default_factory=_SandboxWithGpu)
    players: list[_PlayerWithStop] = Field(default_factory=list)


def _new(sandbox: dict | None = None, stop: list[str] | None = None) -> dict:
    player = {**BASE_PLAYER, **({"stop": stop} if stop is not None else {})}
    return result_settings(_RunWithNewFields.model_validate(
        {"name": "t", "players": [player], "sandbox": sandbox or {}}))


def test_a_new_config_field_enters_the_fingerprint_without_an_edit_to_keys():
    # A sandbox field: the old "kept" list in _keys.py left every new one out.
    assert _new({"gpu_memory_mb": 8})["sandbox.gpu_memory_mb"] == 8
    assert changed_setting(_new(), _new({"gpu_memory_mb": 8})) == "sandbox.gpu_memory_mb"
    assert fingerprint(_new()) != fingerprint(_new({"gpu_memory_mb": 8}))
    # A player field, in a nested list of named sections.
    assert changed_setting(_new(), _new(stop=["\n"])) == "players.a.stop"


def test_a_new_field_declared_without_effect_on_results_stays_out_of_the_fingerprint():
    assert "sandbox.gpu_warm_workers" not in _new()
    assert fingerprint(_new({"gpu_warm_workers": 9})) == fingerprint(_new())


OLD_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "resume_main_6b44c60"


def _old_run(tmp_path: Path) -> tuple[RunConfig, Path]:
    import shutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(OLD_RUN / "run" / "run.db", run_dir / "run.db")
    cfg = load_config(OLD_RUN / "config.yaml").model_copy(update={"output_dir": str(run_dir)})
    return cfg, run_dir


def test_a_run_started_by_the_previous_version_resumes_with_the_same_config(tmp_path):
    """run.db was opened by main at 6b44c60 (tests/fixtures/resume_main_6b44c60/make.py), and
    has an answered call, so a resume checks its recorded settings."""
    from envduels.engine.run import open_run
    from envduels.store import Store

    cfg, run_dir = _old_run(tmp_path)
    with Store.open_readonly(run_dir, live=False) as old:
        recorded_fingerprint = old.get_meta("fingerprint")
        recorded = old.run_config()
    assert recorded_fingerprint == OLD_VARIED_FINGERPRINTS["every_field"]
    # read back typed, as given (output_dir was the folder it was made in)
    assert recorded.model_copy(update={"output_dir": None}) == cfg.model_copy(update={"output_dir": None})
    store, fp = open_run(cfg)
    store.close()
    assert fp == recorded_fingerprint


def test_a_run_started_by_the_previous_version_still_refuses_a_changed_setting(tmp_path):
    from envduels.engine.run import open_run
    from envduels.errors import UserError

    cfg, _ = _old_run(tmp_path)
    changed = cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(
        update={"observation_max_chars": 3000})})
    with pytest.raises(UserError, match="a different 'sandbox.observation_max_chars'"):
        open_run(changed)
