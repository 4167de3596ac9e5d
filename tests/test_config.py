"""The run configuration (SPEC §6): what loads, and the one-line errors for what does not."""

from pathlib import Path

import pytest

from envduels.config import load_config, parse_config
from envduels.errors import UserError

MINIMAL = {
    "name": "t",
    "players": [{"name": "a", "provider": "openai", "model": "m", "api_key_env": "K"}],
    "tournament": {"environments": ["some-library-env"]},
}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_spec_example_config_loads_with_defaults(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            """
name: quickstart
seed: 0
output_dir: runs/quickstart
players:
  - {name: small, provider: local, model: smollm2-135m-instruct, temperature: 0.8, max_tokens: 1024}
  - name: gpt
    provider: openai
    model: gpt-4.1-mini
    base_url: http://localhost:8000/v1
    api_key_env: OPENAI_API_KEY
    max_concurrency: 16
    params_b: 8
    roles: [author, solver]
    price: {input_per_mtok: 0.4, output_per_mtok: 1.6}
tournament: {rounds: 2, envs_per_author: 1, seeds_per_env: 4, trials_per_seed: 1, max_turns: 24,
             history: all, author_repairs: 2, require_oracle: true, hint_max_chars: 600, environments: []}
sandbox: {memory_mb: 512, step_timeout_s: 5}
budget: {max_usd: null}
""",
        )
    )
    assert [p.name for p in cfg.players] == ["small", "gpt"]
    assert cfg.players[0].roles == ["author", "solver"]
    assert cfg.players[1].price.output_per_mtok == 1.6
    assert cfg.tournament.history == "all"
    assert cfg.run_dir == Path("runs/quickstart")
    assert cfg.sandbox.step_timeout_s == 5


def test_unknown_key_names_the_key() -> None:
    data = dict(MINIMAL, tournament={"environments": ["x"], "roundz": 3})
    with pytest.raises(UserError) as err:
        parse_config(data, "c.yaml")
    assert str(err.value) == (
        "c.yaml: unknown key 'tournament.roundz'; remove it or check its spelling against docs/SPEC.md §6"
    )


def test_missing_key_names_the_key() -> None:
    with pytest.raises(UserError, match=r"missing key 'players.0.model'"):
        parse_config({**MINIMAL, "players": [{"name": "a", "provider": "openai"}]}, "c.yaml")


def test_duplicate_player_names_are_refused() -> None:
    players = [{"name": "a", "provider": "local", "model": "m"}] * 2
    with pytest.raises(UserError, match="player names must be unique; repeated: a"):
        parse_config({**MINIMAL, "players": players})


def test_a_key_instead_of_a_variable_name_is_refused_without_echoing_it() -> None:
    bad = {**MINIMAL, "players": [{"name": "a", "provider": "openai", "model": "m", "api_key_env": "sk-live-123"}]}
    with pytest.raises(UserError) as err:
        parse_config(bad)
    assert "NAME of an environment variable" in str(err.value)
    assert "sk-live-123" not in str(err.value)


def test_a_run_needs_something_to_play() -> None:
    data = {"name": "t", "players": [{"name": "a", "provider": "local", "model": "m", "roles": ["solver"]}]}
    with pytest.raises(UserError, match="nothing to play"):
        parse_config(data)


def test_missing_file_and_bad_yaml_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match=r"not valid YAML at line 3"):
        load_config(write(tmp_path, "name: x\nplayers: [\n  - a: :\n"))


def test_the_sandbox_limits_a_config_sets_default_to_the_config_s_defaults() -> None:
    from dataclasses import fields

    from envduels.config import SandboxConfig
    from envduels.sandbox import SandboxLimits

    shared = [f.name for f in fields(SandboxLimits) if f.name in SandboxConfig.model_fields]
    assert shared == ["memory_mb", "step_timeout_s", "cpu_s", "max_procs", "observation_max_chars",
                      "runtime"]
    assert {n: getattr(SandboxLimits(), n) for n in shared} == {
        n: getattr(SandboxConfig(), n) for n in shared}
    assert SandboxLimits.from_config(SandboxConfig()) == SandboxLimits()
    assert SandboxLimits.from_config(SandboxConfig(memory_mb=1024, step_timeout_s=2)) == SandboxLimits(
        memory_mb=1024, step_timeout_s=2.0)


def test_the_sandbox_still_imports_without_the_project_s_dependencies() -> None:
    """The sandbox runs under a bare system interpreter (docs/sandbox.md); taking the limits'
    defaults from the pydantic config broke that (the unprivileged-user test caught it)."""
    import subprocess
    import sys

    src = str(Path(__file__).parents[1] / "src")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import envduels.sandbox; "
            "print('pydantic' in sys.modules, envduels.sandbox.SandboxLimits().memory_mb)")
    # -S: no site-packages, so no pydantic, yaml or numpy to lean on
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, src], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout.split()) == (0, ["False", "512"]), out.stderr


def test_a_limit_the_sandbox_config_gains_reaches_the_sandbox_without_an_edit_to_from_config() -> None:
    from envduels.config import SandboxConfig
    from envduels.sandbox import SandboxLimits

    class WithFileSize(SandboxConfig):
        file_size_mb: int = 16

    assert SandboxLimits.from_config(WithFileSize(file_size_mb=48)).file_size_mb == 48


def test_the_hint_limit_s_default_is_the_config_s_everywhere() -> None:
    import inspect

    from envduels.config import HINT_MAX_CHARS, TournamentConfig
    from envduels.envs import validate_env

    assert TournamentConfig().hint_max_chars == HINT_MAX_CHARS == 600
    assert inspect.signature(validate_env).parameters["hint_max_chars"].default == HINT_MAX_CHARS
