"""SIGKILL `envduels run` at several points, resume, and get exactly the uninterrupted results,
without ever sending again a call whose answer was already recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import yaml
from duel_script import config, respond
from run_records import call_records

from envduels.store import RunReader
from envduels.testing import ScriptedServer

pytestmark = pytest.mark.slow
KEY = "sk-crash-test"


def _identity(model: str, messages: list[dict], seed) -> str:
    return json.dumps([model, messages, seed], sort_keys=True)


class KillingResponder:
    """Answers like duel_script, but SIGKILLs the run when the server sees request `kill_at`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.kill_at: int | None = None
        self.seen = 0
        self.lock = threading.Lock()

    def __call__(self, model: str, messages: list[dict]) -> str:
        with self.lock:
            self.seen += 1
            if self.kill_at is not None and self.seen == self.kill_at and self.proc is not None:
                os.kill(self.proc.pid, signal.SIGKILL)
        return respond(model, messages)


def _run(path, responder: KillingResponder, kill_at: int | None) -> int:
    responder.seen, responder.kill_at = 0, kill_at
    env = dict(os.environ, ENVDUELS_TEST_KEY=KEY)
    responder.proc = subprocess.Popen(
        [sys.executable, "-m", "envduels.cli", "run", str(path), "--quiet"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = responder.proc.communicate(timeout=240)
    assert responder.proc.returncode in (0, -signal.SIGKILL), err.decode()
    return responder.proc.returncode


def _results(run_dir):
    store = RunReader(run_dir)
    envs = sorted((e.env_id, e.valid, e.invalid_reason, e.source_sha256, e.benchmark_seeds)
                  for e in store.environments())
    eps = sorted((e.episode_key, e.outcome, e.reason, e.turns, json.dumps(e.transcript))
                 for e in store.episodes())
    validations = [(v.env_id, v.attempt, v.valid, v.reasons)
                   for v in store.validations()]
    persisted = {_identity(r["request"]["model"], r["request"]["messages"],
                           r["request"]["params"]["seed"]) for r in call_records(run_dir)}
    store.close()
    return envs, eps, validations, persisted


def _sent(server: ScriptedServer, start: int) -> list[str]:
    return [_identity(r["model"], r["messages"], r["params"].get("seed"))
            for r in server.requests[start:]]


def test_sigkilled_runs_resume_to_identical_results_without_repeating_finished_calls(tmp_path):
    responder = KillingResponder()
    with ScriptedServer(responder, api_key=KEY) as server:
        def write(name: str):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config(server.base_url, str(tmp_path / name),
                                                  rounds=2)))
            return path

        assert _run(write("clean"), responder, None) == 0
        expected = _results(tmp_path / "clean")
        clean_calls = len(server.requests)

        crashed = write("crashed")
        persisted: set[str] = set()
        # per session: during authoring, during round-1 solving, during round 2
        for kill_at in (3, 15, 25):
            start = len(server.requests)
            assert _run(crashed, responder, kill_at) == -signal.SIGKILL
            repeated = set(_sent(server, start)) & persisted
            assert not repeated, f"{len(repeated)} recorded call(s) sent again"
            persisted = _results(tmp_path / "crashed")[3]
        start = len(server.requests)
        assert _run(crashed, responder, None) == 0
        assert not set(_sent(server, start)) & persisted
        got = _results(tmp_path / "crashed")
        crash_calls = len(server.requests) - clean_calls

    assert got[0] == expected[0]  # environments
    assert got[1] == expected[1]  # episodes: keys, outcomes, reasons, turns, transcripts
    assert got[2] == expected[2]  # every validation attempt
    assert got[3] == expected[3]  # the same set of recorded calls
    # only calls in flight at a kill may be sent twice: each episode or authoring job holds at
    # most one call, and a player runs at most max_concurrency of them, so per kill at most
    # the players' total max_concurrency
    in_flight = sum(p["max_concurrency"] for p in config("x", "x")["players"])
    assert crash_calls - clean_calls <= 3 * in_flight


def test_ctrl_c_says_how_to_resume_and_the_resumed_run_completes(tmp_path):
    from duel_script import EXPECTED

    class Interrupting(KillingResponder):
        def __call__(self, model, messages):
            with self.lock:
                self.seen += 1
                if self.seen == self.kill_at and self.proc is not None:
                    os.kill(self.proc.pid, signal.SIGINT)
            return respond(model, messages)

    responder = Interrupting()
    with ScriptedServer(responder, api_key=KEY) as server:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config(server.base_url, str(tmp_path / "run"))))
        env = dict(os.environ, ENVDUELS_TEST_KEY=KEY)
        responder.kill_at = 8
        responder.proc = subprocess.Popen(
            [sys.executable, "-m", "envduels.cli", "run", str(path)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, err = responder.proc.communicate(timeout=240)
        assert responder.proc.returncode == 130
        assert "interrupted; finished work is saved, run the same command again" in err
        assert _run(path, responder, None) == 0
    got: dict = {}
    for e in RunReader(tmp_path / "run").episodes():
        got.setdefault((e.env_id, e.solver, e.hinted), set()).add((e.outcome, e.turns))
    assert got == {k: {v} for k, v in EXPECTED.items()}
