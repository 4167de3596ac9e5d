"""Bad input through the CLI: one line naming the fix, a non-zero exit, nothing lost."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from duel_script import config
from run_records import call

from envduels import cli
from envduels.config import parse_config
from envduels.engine.run import record_config
from envduels.errors import UserError
from envduels.store.writer import RunWriter
from envduels.testing import ScriptedServer


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["envduels", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err.strip()
    return exit_.value.code, err


@pytest.fixture
def earlier_run(tmp_path):
    """A run folder that already holds results, which no bad invocation may touch."""
    store = RunWriter(tmp_path / "run")
    store.put("call-1", call("alice", text="kept", input_tokens=1, output_tokens=1,
                             cost_usd=0.5))
    store.close()
    return tmp_path / "run"


def _unchanged(run_dir) -> None:
    store = RunWriter(run_dir, create=False)
    assert store.get("call-1").text == "kept"
    assert store.totals().calls == 1 and store.reader.environments() == []
    assert store.reader.meta("settings") is None
    store.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write(tmp_path, cfg) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg))
    return str(path)


def _assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code != 0
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for n in needles:
        assert n in err, err


def test_malformed_yaml_is_one_line_naming_the_syntax_fix(tmp_path, monkeypatch, capsys,
                                                          earlier_run):
    code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, "name: x\nplayers: [\n  - a"))
    _assert_one_line(code, err, "not valid YAML", "fix the syntax")
    _unchanged(earlier_run)


def test_unknown_key_is_named(tmp_path, monkeypatch, capsys, earlier_run):
    cfg = config("http://127.0.0.1:1/v1", str(earlier_run))
    cfg["tournament"]["roundz"] = 2
    code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, cfg))
    _assert_one_line(code, err, "unknown key 'tournament.roundz'", "spelling")
    _unchanged(earlier_run)


def test_missing_api_key_variable_is_named_before_any_call(tmp_path, monkeypatch, capsys,
                                                           earlier_run):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with ScriptedServer() as server:
        cfg = config(server.base_url, str(earlier_run), key_env="NO_SUCH_KEY_VAR")
        code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, cfg), "-q")
        assert server.request_count == 0
    _assert_one_line(code, err, "NO_SUCH_KEY_VAR")
    _unchanged(earlier_run)


def test_unreachable_server_is_named_with_its_url(tmp_path, monkeypatch, capsys, earlier_run):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "k")
    url = f"http://127.0.0.1:{_free_port()}/v1"
    code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, config(url, str(earlier_run))))
    _assert_one_line(code, err, f"cannot reach {url}", "start the server or fix")
    _unchanged(earlier_run)


@pytest.mark.parametrize(("host_port", "why"), [
    ("127.0.0.1:99999", "Port out of range"),
    ("h" * 70 + ".example:8000", "idna"),
])
def test_a_server_address_no_one_could_answer_on_is_one_line_not_a_traceback(
        tmp_path, monkeypatch, capsys, earlier_run, host_port, why):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "k")
    url = f"http://{host_port}/v1"
    code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, config(url, str(earlier_run))))
    _assert_one_line(code, err, f"cannot reach {url} (not a usable address:", why)
    _unchanged(earlier_run)


def test_missing_export_folder_is_named(tmp_path, monkeypatch, capsys, earlier_run):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "k")
    with ScriptedServer() as server:
        cfg = config(server.base_url, str(earlier_run))
        cfg["tournament"]["environments"] = [str(tmp_path / "no-such-export")]
        code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, cfg), "-q")
        assert server.request_count == 0
    _assert_one_line(code, err, "no-such-export", "is not an environment file, an EnvDuels export folder or a library name")
    _unchanged(earlier_run)


def test_a_config_change_that_changes_results_is_refused_by_name(tmp_path):
    cfg = config("http://127.0.0.1:1/v1", str(tmp_path / "run"))
    with RunWriter(tmp_path / "run") as writer:
        record_config(writer, parse_config(cfg))
        writer.put("k", call("alice", text="r"))
        faster = dict(cfg, budget={"max_usd": 3.0})
        faster["players"] = [dict(p, max_concurrency=32, timeout_s=5) for p in cfg["players"]]
        record_config(writer, parse_config(faster))  # budget, concurrency, timeouts may change
        changed = dict(cfg, tournament=dict(cfg["tournament"], seeds_per_env=3))
        with pytest.raises(UserError, match=r"different 'tournament.seeds_per_env'; restore it"):
            record_config(writer, parse_config(changed))


def test_status_of_a_folder_without_a_run_is_one_line(tmp_path, monkeypatch, capsys):
    code, err = _cli(monkeypatch, capsys, "status", str(tmp_path))
    _assert_one_line(code, err, "holds no run database")


def test_a_pool_environment_id_that_collides_with_an_authored_one_is_refused(tmp_path):
    from envduels.engine.checks import load_fixed_envs
    from envduels.envs import EnvSpec, write_export

    write_export(tmp_path / "export", [EnvSpec(id="r1-alice-0", source="class E: pass\n",
                                               hints={"hint": "h"}, author="alice")])
    cfg = config("http://127.0.0.1:1/v1", str(tmp_path / "run"))
    cfg["tournament"]["environments"] = [str(tmp_path / "export")]
    with pytest.raises(UserError, match="'r1-alice-0' is also an id this run's authors write"):
        load_fixed_envs(parse_config(cfg))


@pytest.mark.parametrize("broken", ["missing", "no namespaces"])
def test_a_machine_without_a_sandbox_is_refused_before_anything_is_written(
        tmp_path, monkeypatch, capsys, earlier_run, broken, request):
    from envduels.sandbox import _launcher

    if broken == "missing":
        bwrap, needle = None, "bubblewrap"
    else:   # installed, but the kernel refuses it namespaces
        where = tempfile.mkdtemp(prefix="envduels-fake-bwrap-")   # the sandbox uid reads it
        os.chmod(where, 0o755)
        request.addfinalizer(lambda: shutil.rmtree(where, ignore_errors=True))
        fake = Path(where) / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not "
                        "permitted' >&2\nexit 1\n")
        fake.chmod(0o755)
        bwrap, needle = str(fake), "bwrap: Creating new namespace failed"
    monkeypatch.setattr(_launcher.host(), "bwrap", bwrap)
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "sk-x")
    with ScriptedServer() as server:
        fresh = _write(tmp_path, config(server.base_url, str(tmp_path / "fresh")))
        code, err = _cli(monkeypatch, capsys, "run", fresh)
        _assert_one_line(code, err, needle)
        assert not (tmp_path / "fresh").exists()
        again = config(server.base_url, str(earlier_run))
        code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, again))
        _assert_one_line(code, err, needle)
        _unchanged(earlier_run)
        assert sorted(p.name for p in earlier_run.iterdir() if p.name != "run.db-wal"
                      and p.name != "run.db-shm") == ["run.db"]
        assert server.request_count == 0


def test_a_pool_environment_without_a_hint_is_refused_by_name(tmp_path, monkeypatch, capsys,
                                                               earlier_run):
    from envduels.envs import EnvSpec, write_export

    write_export(tmp_path / "export", [
        EnvSpec(id="hinted", source="class E: pass\n", hints={"hint": "h"}),
        EnvSpec(id="bare", source="class F: pass\n")])
    monkeypatch.setenv("ENVDUELS_TEST_KEY", "k")
    with ScriptedServer() as server:
        cfg = config(server.base_url, str(earlier_run))
        cfg["tournament"]["environments"] = [str(tmp_path / "export")]
        code, err = _cli(monkeypatch, capsys, "run", _write(tmp_path, cfg), "-q")
        assert server.request_count == 0
    assert err == (
        "error: tournament.environments: environment 'bare' has no hint, and every pool "
        "environment is also played in the hinted condition (SPEC §9); give it one (a "
        "`privileged` file in its export's manifest) or leave it out of the list")
    assert code == 2
    _unchanged(earlier_run)
