"""A scripted run as a new user meets it (issue 15): `status` says what failed, a run whose output
is not a terminal prints progress as it goes, and every failed precondition is named at once."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from duel_script import config, respond
from rich.console import Console

import envduels
from envduels.engine.commands import EXIT_ERRORS, run_command
from envduels.engine.progress import LiveView, Progress
from envduels.testing import ScriptedServer

KEY = "sk-first-contact"
SCRIPT = Path(sys.executable).parent / "envduels"
SRC = str(Path(envduels.__file__).resolve().parents[1])


def _write(tmp_path, cfg: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC, "COLUMNS": "120", **(env or {})},
                          **kw)


@pytest.mark.slow
def test_status_counts_authoring_jobs_that_ended_in_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY, faults=["500"]) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))
        cfg["players"] = [dict(p, max_retries=0) for p in cfg["players"]]
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False,
                           quiet=True) == EXIT_ERRORS
    r = _cli("status", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    assert "1 authoring job to retry (error)" in r.stdout
    assert "1/1 started" in r.stdout


@pytest.mark.slow
def test_a_run_piped_to_a_file_prints_progress_lines_while_it_works(tmp_path):
    with ScriptedServer(respond, api_key=KEY, latency_s=0.05) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))
        log = tmp_path / "run.log"
        with log.open("w") as out:
            proc = subprocess.Popen([str(SCRIPT), "run", str(_write(tmp_path, cfg))],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": SRC,
                                         "ENVDUELS_TEST_KEY": KEY})
            try:
                deadline = time.monotonic() + 240
                while "solving" not in log.read_text() and time.monotonic() < deadline:
                    assert proc.poll() is None, log.read_text()
                    time.sleep(0.05)
                running_when_seen = proc.poll() is None
                assert proc.wait(timeout=240) == 0, log.read_text()
            finally:
                if proc.poll() is None:
                    proc.kill()
    lines = log.read_text().splitlines()
    progress = [line for line in lines if line.startswith("progress: ")]
    assert running_when_seen, "the progress line came only at the end"
    assert progress[0].startswith("progress: round 1/1 authoring; ")
    assert "this round: episodes - (authoring)" in progress[0]
    assert any(line.startswith("progress: round 1/1 solving; ") for line in progress)
    assert lines.index(progress[0]) < len(lines) - 1   # before the run's summary line


def test_off_a_terminal_the_progress_line_repeats_at_a_steady_interval():
    progress = Progress(rounds=2, round=1, phase="authoring")
    buf = io.StringIO()
    with LiveView(progress, quiet=False, console=Console(file=buf), interval_s=0.4):
        time.sleep(1.5)
    lines = buf.getvalue().splitlines()
    assert 3 <= len(lines) <= 5, lines     # the phase line, then one every 0.4 s
    assert all(line.startswith("progress: round 1/2 authoring") for line in lines)
    quiet = io.StringIO()
    with LiveView(progress, quiet=True, console=Console(file=quiet), interval_s=0.1):
        time.sleep(0.3)
    assert quiet.getvalue() == ""


def test_the_live_view_keeps_the_run_apart_from_the_round_and_hides_counts_while_authoring():
    progress = Progress(rounds=2, round=1, phase="authoring")
    progress.begin_solving(planned=4, done=0)
    for outcome in ("success", "failure", "failure", "success"):
        progress.episode_finished(outcome)
    progress.round, progress.phase = 2, "authoring"
    line = progress.line()
    assert "this round: episodes - (authoring)" in line
    assert "whole run: failure 2, success 2" in line
    progress.begin_solving(planned=6, done=0)
    progress.episode_finished("success")
    line = progress.line()
    assert "this round: episodes 1 done / 5 left (success 1)" in line
    assert "whole run: failure 2, success 3" in line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_names_every_failed_precondition_at_once_in_config_order(tmp_path):
    with ScriptedServer(respond) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        alice, bob, carol, dave = cfg["players"]
        alice["base_url"] = dead
        bob["api_key_env"] = "FIRST_CONTACT_UNSET_B"
        carol["api_key_env"] = "FIRST_CONTACT_UNSET_C"
        dave["api_key_env"] = "FIRST_CONTACT_SET"
        r = _cli("run", str(_write(tmp_path, cfg)), env={"FIRST_CONTACT_SET": "k", "ENVDUELS_TEST_KEY": KEY})
        assert server.request_count == 0
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "error: 3 problems; fix them all, then run again:"
    assert lines[1].startswith(f"  player 'alice': cannot reach {dead}")
    assert lines[2].startswith("  player 'bob': set FIRST_CONTACT_UNSET_B to the API key of "
                               f"this player's server {server.base_url}")
    assert lines[3].startswith("  player 'carol': set FIRST_CONTACT_UNSET_C")
    assert len(lines) == 4
    assert not (tmp_path / "run").exists()


def test_models_check_names_failed_players_in_the_same_config_order(tmp_path):
    with ScriptedServer() as server:   # answers "OK"
        cfg = config(server.base_url, str(tmp_path / "run"))
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        alice, bob, carol, dave = cfg["players"]
        alice["base_url"] = dead
        alice["max_retries"] = 0
        bob["api_key_env"] = "FIRST_CONTACT_UNSET_B"
        carol["api_key_env"] = "FIRST_CONTACT_UNSET_C"
        r = _cli("models", "check", str(_write(tmp_path, cfg)), env={"ENVDUELS_TEST_KEY": KEY})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    failed = [line.split(":")[0] for line in r.stdout.splitlines() if line.startswith("player '")]
    assert failed == ["player 'alice'", "player 'bob'", "player 'carol'"]
    assert "3 of 4 players failed" in r.stdout
