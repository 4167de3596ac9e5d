"""One `envduels run` per run folder: a second one, from another process, stops at once (it
would play and pay for the same work); `status` still reads while the run goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml
from duel_script import config, respond

from envduels.engine.commands import run_command, status_command
from envduels.errors import UserError
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-lock"


def _wait_for_holder(lock, proc: subprocess.Popen) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end and proc.poll() is None:
        if lock.is_file() and lock.read_text().strip() == str(proc.pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"the first run never took the lock (exit {proc.poll()})")


@pytest.mark.slow
def test_a_second_run_on_the_same_folder_fails_at_once_naming_the_holder(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    run_dir = tmp_path / "run"
    with ScriptedServer(respond, api_key=KEY, latency_s=1.0) as server:
        cfg = config(server.base_url, str(run_dir))
        cfg["players"] = [p for p in cfg["players"] if p["name"] == "carol"]
        cfg["tournament"]["environments"] = ["subtraction_game"]
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        first = subprocess.Popen(
            [sys.executable, "-c", "from envduels.cli import main; main()", "run", str(path),
             "--quiet"], env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_for_holder(run_dir / "run.lock", first)
            with pytest.raises(UserError) as refused:
                run_command(path, unsafe_no_sandbox=False, quiet=True)
            assert str(refused.value) == (
                f"{run_dir} is in use by another envduels run (pid {first.pid}); wait for it "
                "to finish or stop it, or set output_dir to another folder")
            assert first.poll() is None              # refused while the first still runs
            assert status_command(run_dir) == 0       # readers take no lock
            out, err = first.communicate(timeout=240)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        assert first.returncode == 0, err.decode()
        calls = RunReader(run_dir).totals().calls
        # the lock went with the first process: a later run takes it, and has nothing to redo
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    assert RunReader(run_dir).totals().calls == calls
