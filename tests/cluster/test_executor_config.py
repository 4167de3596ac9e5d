"""The executor setting: where environment code runs, never what the results are."""

from __future__ import annotations

import socket

import pytest
import yaml

from envduels.config import RunConfig
from envduels.engine._keys import fingerprint, result_settings
from envduels.errors import UserError


def _cfg(**executor: object) -> RunConfig:
    raw = {"name": "x", "players": [{"name": "a", "provider": "openai", "model": "m"}]}
    if executor:
        raw["executor"] = executor
    return RunConfig.model_validate(raw)


def test_the_executor_is_local_by_default_and_never_enters_the_run_fingerprint():
    local, ray = _cfg(), _cfg(kind="ray", address="auto", sandboxes_per_cpu=8)
    assert local.executor.kind == "local"
    assert fingerprint(result_settings(local)) == fingerprint(result_settings(ray))


def test_an_unknown_executor_kind_or_key_is_a_config_error():
    with pytest.raises(ValueError, match="kind"):
        _cfg(kind="slurm")
    with pytest.raises(ValueError, match="nodes"):
        _cfg(kind="ray", nodes=3)


def test_an_address_nobody_answers_on_is_one_line_at_once(tmp_path, monkeypatch):
    from envduels.sandbox.ray_pool import _check_reachable

    with socket.socket() as s:   # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match=rf"cannot reach the Ray cluster at 127.0.0.1:{port} "):
        _check_reachable(f"127.0.0.1:{port}")
    with pytest.raises(UserError, match="is not HOST:PORT"):
        _check_reachable("nonsense")


def test_run_with_an_unreachable_cluster_exits_2_before_writing_anything(tmp_path, monkeypatch):
    from envduels.engine.commands import run_command
    from envduels.testing import ScriptedServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "k")
    run_dir = tmp_path / "run"
    path = tmp_path / "run.yaml"
    with ScriptedServer(api_key="k") as server:   # the players are fine: only Ray is missing
        path.write_text(yaml.safe_dump({
            "name": "x", "output_dir": str(run_dir),
            "players": [{"name": "a", "provider": "openai", "model": "m",
                         "base_url": server.base_url, "api_key_env": "ENVDUELS_TEST_KEY"}],
            "tournament": {"environments": ["nim"]},
            "executor": {"kind": "ray", "address": f"127.0.0.1:{port}"}}))
        with pytest.raises(UserError, match="cannot reach the Ray cluster"):
            run_command(path, unsafe_no_sandbox=False, quiet=True)
    assert not run_dir.exists()
