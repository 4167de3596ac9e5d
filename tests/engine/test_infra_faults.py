"""A sandbox that cannot start is the host's fault: the work it stops is `error` (exit 4),
never `incomplete` or invalid against the author, and the next run retries it in full.

The start failure is real: the pool's launcher is pointed at a bubblewrap that does not exist,
and its harness workers at one that cannot start (`broken_sandbox.break_bwrap`).
"""

from __future__ import annotations

import yaml
from broken_sandbox import break_bwrap
from duel_script import EXPECTED, config, respond

from envduels.engine.run import EXIT_ERRORS, run_command
from envduels.envs import library_env
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-infra"
START_FAILED = "sandbox error: the sandbox failed to start: "


def _write(tmp_path, cfg: dict):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_an_episode_whose_sandbox_cannot_start_is_an_error_and_is_replayed(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    seeds = library_env("subtraction_game").benchmark_seeds
    with ScriptedServer(respond, api_key=KEY) as server:
        cfg = config(server.base_url, str(tmp_path / "warm"))
        cfg["players"] = [p for p in cfg["players"] if p["name"] == "carol"]
        cfg["tournament"]["environments"] = ["subtraction_game"]
        # a run validates its fixed pool first, in a sandbox too: a first run caches the
        # verdict, so the broken sandbox below meets the episodes
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == 0
        asked = server.request_count
        cfg["output_dir"] = str(tmp_path / "run")
        path = _write(tmp_path, cfg)
        with monkeypatch.context() as broken:
            break_bwrap(broken, tmp_path / "broken")
            assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        store = Store(tmp_path / "run", create=False)
        first = store.episodes()
        store.close()
        assert len(first) == len(seeds) * 2
        assert {e.outcome for e in first} == {"error"}
        assert all(e.reason.startswith(START_FAILED) and e.turns == 0 for e in first)
        assert server.request_count == asked  # no model was asked: the episode never began
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    store = Store(tmp_path / "run", create=False)
    again = store.episodes()
    assert sorted(e.episode_key for e in again) == sorted(e.episode_key for e in first)
    assert {e.outcome for e in again} <= {"success", "failure"}


def test_validation_stopped_by_a_sandbox_that_cannot_start_never_judges_the_author(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        path = _write(tmp_path, config(server.base_url, str(tmp_path / "run")))
        with monkeypatch.context() as broken:
            break_bwrap(broken, tmp_path / "broken")
            assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        store = Store(tmp_path / "run", create=False)
        # judged without a sandbox: dave's replies hold no code, bob's first a syntax error;
        # what needed a sandbox (alice's attempt, bob's repair) is not judged at all
        assert [e.env_id for e in store.environments()] == ["r1-dave-0"]
        assert [(v["env_id"], v["attempt"], v["valid"]) for v in store.validations()] == [
            ("r1-bob-0", 0, False), ("r1-dave-0", 0, False), ("r1-dave-0", 1, False)]
        assert store.episodes() == []
        store.close()
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    got: dict = {}
    for e in Store(tmp_path / "run", create=False).episodes():
        got.setdefault((e.env_id, e.solver, e.hinted), set()).add((e.outcome, e.turns))
    assert got == {k: {v} for k, v in EXPECTED.items()}
