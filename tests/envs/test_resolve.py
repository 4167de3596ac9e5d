"""One resolver for every string that names environments (`envduels.envs.resolve`): with a folder
`./maze` beside the library's `maze`, `validate`, `play`, `tournament.environments` and
`envduels.gym.make` all read `maze`, `./maze` and `library:maze` the same way (issue 13).

On the main before this change `validate maze` loaded the folder while a config listing `maze`
loaded the library environment."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envduels import gym
from envduels.config import parse_config
from envduels.engine.checks import load_fixed_envs
from envduels.engine.commands import play_command, run_command
from envduels.envs import EnvSpec, library_env, resolve, write_export
from envduels.errors import UserError

ENVDUELS = str(Path(sys.executable).parent / "envduels")

FOLDER_SOURCE = '''
class FolderMaze:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "FOLDER MAZE: say the word that opens it", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{open}"
        return ("it opens" if won else "still shut"), float(won), won, False, {}

    def oracle_action(self):
        return "\\\\boxed{open}"
'''
AMBIGUOUS = ("'maze' is both a library environment and the folder ./maze here; write ./maze for "
             "the folder or library:maze for the library environment")


@pytest.fixture
def folder_maze(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EnvSpec:
    """The working directory holds an export folder `maze` (one environment, `folder-maze`)."""
    spec = EnvSpec(id="folder-maze", source=FOLDER_SOURCE, class_name="FolderMaze", max_turns=5,
                   hints={"hint": "It is a four-letter verb."}, author="someone")
    write_export(tmp_path / "maze", [spec])
    monkeypatch.chdir(tmp_path)
    return resolve("./maze").one()


def _validate(text: str, cwd: Path) -> tuple[int, dict]:
    run = subprocess.run([ENVDUELS, "validate", text, "--seeds", "2", "--json"], cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    return run.returncode, json.loads(run.stdout)


def _play(text: str, stdin: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return play_command(text, config=None, player=None, human=True, hint=False, seed=0,
                        unsafe_no_sandbox=False)


def _config(text: str) -> dict:
    return {"name": "t", "output_dir": "runs/t",
            "players": [{"name": "a", "provider": "openai", "model": "m", "api_key_env": "K"}],
            "tournament": {"environments": [text]}}


def _pool_ids(text: str) -> list[str]:
    return [s.id for s in load_fixed_envs(parse_config(_config(text)))]


def test_a_bare_library_name_that_is_also_a_folder_here_is_refused_by_every_entry_point(
        folder_maze: EnvSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError) as err:
        resolve("maze")
    assert err.value.message == AMBIGUOUS
    assert _validate("maze", tmp_path) == (2, {"valid": False, "path": "maze",
                                               "reasons": [AMBIGUOUS]})
    with pytest.raises(UserError, match="^'maze' is both a library environment"):
        _play("maze", "open\n", monkeypatch)
    with pytest.raises(UserError) as err:
        _pool_ids("maze")
    assert err.value.message == f"tournament.environments: {AMBIGUOUS}"
    config = tmp_path / "run.yaml"   # `envduels run` reads it the same way, before any write
    config.write_text(yaml.safe_dump(_config("maze")))
    with pytest.raises(UserError) as err:
        run_command(config, unsafe_no_sandbox=False, quiet=True)
    assert err.value.message == f"tournament.environments: {AMBIGUOUS}"
    assert not (tmp_path / "runs").exists()
    with pytest.raises(UserError) as err:
        gym.make("maze")
    assert err.value.message == AMBIGUOUS


def test_dot_slash_names_the_folder_at_every_entry_point(
        folder_maze: EnvSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert folder_maze.id == "folder-maze"
    code, verdict = _validate("./maze", tmp_path)
    assert (code, [e["id"] for e in verdict["environments"]]) == (0, ["folder-maze"])
    assert _play("./maze", "open\n", monkeypatch) == 0
    assert "FOLDER MAZE: say the word" in capsys.readouterr().out
    assert _pool_ids("./maze") == ["folder-maze"]
    assert gym.make("./maze").env_spec == folder_maze
    assert gym.make(Path("maze") / "folder-maze").env_spec == folder_maze   # FOLDER/ENV_ID


def test_library_prefix_names_the_library_environment_at_every_entry_point(
        folder_maze: EnvSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    library_maze = library_env("maze")
    code, verdict = _validate("library:maze", tmp_path)
    assert (code, verdict["id"]) == (0, "maze")
    assert _play("library:maze", "", monkeypatch) == 1   # standard input closed at once
    out = capsys.readouterr().out
    assert "You are in a dark maze of" in out and "FOLDER MAZE" not in out
    assert _pool_ids("library:maze") == ["maze"]
    assert gym.make("library:maze").env_spec == library_maze
    assert resolve("library:maze").kind == "library"


def test_without_a_folder_here_a_bare_library_name_is_the_library_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("maze").specs == [library_env("maze")]
    assert _pool_ids("maze") == ["maze"]
    assert gym.make("maze").env_spec == library_env("maze")


def test_a_name_in_no_form_is_one_error_naming_every_form(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for text in ("no_such_env", "no/such/env.py"):
        with pytest.raises(UserError) as err:
            resolve(text)
        assert err.value.message == (
            f"{text!r} is not an environment file, an EnvDuels export folder or a library name: "
            "check the path, or see `envduels library list`")


@pytest.mark.parametrize("text", ["x" * 300, "folder/" + "y" * 300, "nul\x00byte"])
def test_a_name_the_os_cannot_look_up_is_the_same_one_line_error(text):
    """A path component over 255 bytes made `Path.exists` raise (a traceback from validate,
    play, a config and gym.make alike)."""
    with pytest.raises(UserError, match="is not an environment file, an EnvDuels export folder"):
        resolve(text)
