"""A request the provider refuses (400): before a player's first answer it is a configuration
problem and stops the run at once; after it, it is that one unit's `error` and the run goes on."""

from __future__ import annotations

import pytest
import yaml
from duel_script import config

from envduels.engine.commands import EXIT_ERRORS, run_command
from envduels.envs import library_env
from envduels.errors import UserError
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-refusals"


def _carol_on_a_pool(base_url: str, run_dir) -> dict:
    cfg = config(base_url, str(run_dir))
    cfg["players"] = [dict(p, max_concurrency=1, max_retries=0)
                      for p in cfg["players"] if p["name"] == "carol"]
    cfg["tournament"]["environments"] = ["subtraction_game"]
    return cfg


def _write(tmp_path, cfg: dict):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_bad_request_before_the_first_answer_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(lambda m, msgs: "\\boxed{1}", api_key=KEY, faults=["400"]) as server:
        path = _write(tmp_path, _carol_on_a_pool(server.base_url, tmp_path / "run"))
        with pytest.raises(UserError, match=r"^player 'carol' .*: bad request \(400\): "):
            run_command(path, unsafe_no_sandbox=False, quiet=True)
        assert server.request_count == 1


def test_a_bad_request_after_an_answer_is_that_episode_s_error_and_the_run_goes_on(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    n_episodes = len(library_env("subtraction_game").benchmark_seeds) * 2
    server: ScriptedServer

    def respond(model: str, messages: list[dict]) -> str:
        if server.request_count == 1:   # the first answer: refuse the next request
            server.add_faults("400")
        return "\\boxed{1}"

    with ScriptedServer(respond, api_key=KEY) as server:
        path = _write(tmp_path, _carol_on_a_pool(server.base_url, tmp_path / "run"))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        episodes = RunReader(tmp_path / "run").episodes()
        assert len(episodes) == n_episodes
        errors = [e for e in episodes if e.outcome == "error"]
        assert len(errors) == 1
        assert errors[0].reason.startswith("provider error: player 'carol' (")
        assert ": bad request (400): " in errors[0].reason
        assert errors[0].reason.endswith(
            "(this request only: the player has answered others in this run)")
        # a resume that is refused again on its very first call: carol has answered in this
        # run (recorded by the first session), so it is the episode's error again, not an abort
        server.add_faults("400")
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        again = RunReader(tmp_path / "run").episodes()
        assert [e.episode_key for e in again if e.outcome == "error"] == [errors[0].episode_key]
        # and once the provider accepts it, the run completes
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    final = RunReader(tmp_path / "run").episodes()
    assert len(final) == n_episodes and {e.outcome for e in final} <= {"success", "failure"}
