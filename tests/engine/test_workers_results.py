"""Nothing about a run's results changes with the number of harness workers (docs/workers.md):
the same run with its sandboxes in the engine's process, in one worker and in two records the
same episodes, transcripts and audit verdicts. Real scripted server, real sandboxes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from envduels.engine.commands import run_command
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-workers-test"


def solver(model: str, messages: list[dict]) -> str:
    """A guess that depends on everything the episode showed so far."""
    seen = sum(len(m["content"]) for m in messages if m["role"] == "user")
    return f"I guess \\boxed{{{seen % 100}}}"


def _run(tmp_path: Path, base_url: str, workers: int) -> list[tuple[object, ...]]:
    cfg = {
        "name": "workers", "seed": 5, "output_dir": str(tmp_path / f"run-{workers}"),
        "players": [{"name": "s", "provider": "openai", "model": "m-s", "base_url": base_url,
                     "api_key_env": "ENVDUELS_TEST_KEY", "roles": ["solver"],
                     "max_concurrency": 8, "max_retries": 1, "timeout_s": 20}],
        "tournament": {"environments": ["number_guess"], "trials_per_seed": 2, "max_turns": 4,
                       "history": "none"},
        "sandbox": {"workers": workers},
    }
    path = tmp_path / f"run-{workers}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    store = RunReader(tmp_path / f"run-{workers}")
    try:
        episodes = sorted((e.episode_key, e.outcome, e.turns, e.reason, str(e.transcript))
                          for e in store.episodes())
        audits = sorted(tuple(str(v) for v in row) for row in
                        store.tables().audits.itertuples(index=False))
    finally:
        store.close()
    return [*episodes, *audits]


@pytest.mark.slow
def test_a_run_records_the_same_results_in_process_in_one_worker_and_in_two(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(solver, api_key=KEY) as server:
        results = {workers: _run(tmp_path, server.base_url, workers) for workers in (0, 1, 2)}
    assert len(results[0]) == 16 + 16   # 4 seeds x 2 conditions x 2 trials, each audited
    assert results[1] == results[0]
    assert results[2] == results[0]
    assert len({r[4] for r in results[0][:16]}) > 1   # the transcripts differ between episodes


def test_each_replay_runs_in_the_other_worker_from_its_play_and_both_workers_do_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's rule (docs/workers.md): an episode's replay runs in a different worker
    from its play. Every worker plays and every worker replays, so neither role is held to
    one core."""
    from envduels.sandbox import HarnessPool

    opened: list[tuple[bool, object, object]] = []   # (replay, its worker, apart_from)
    real_open = HarnessPool.open

    async def spy(self, source, **kw):   # the real pool, its choices written down
        instance = await real_open(self, source, **kw)
        opened.append((kw.get("replay", False), instance.holder, kw.get("apart_from")))
        return instance

    monkeypatch.setattr(HarnessPool, "open", spy)
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(solver, api_key=KEY) as server:
        results = _run(tmp_path, server.base_url, 2)
    plays = [worker for replay, worker, _ in opened if not replay]
    replays = [(worker, apart) for replay, worker, apart in opened if replay]
    assert len(results) == 16 + 16 and len(replays) == 16
    assert all(apart is not None and worker is not apart for worker, apart in replays)
    # each play's worker is named by exactly one replay (validation's opens are plays too)
    named = [apart for _, apart in replays]
    assert all(named.count(w) <= plays.count(w) for w in set(named))
    assert len({id(w) for w in plays}) == 2 and len({id(w) for w, _ in replays}) == 2


def _harness_workers() -> set[int]:
    from envduels.sandbox._launcher import children

    found = set()
    for pid in children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"envduels.sandbox._harness_worker" in cmdline:
            found.add(pid)
    return found


def test_the_workers_started_during_the_checks_end_when_a_check_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check_run` starts the harness workers before it checks the players (their start
    overlaps the checks): a failed check ends them, and the run folder stays empty."""
    from envduels.config import load_config
    from envduels.engine.run import check_run
    from envduels.errors import UserError

    monkeypatch.delenv("ENVDUELS_TEST_KEY", raising=False)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "w", "seed": 1, "output_dir": str(tmp_path / "run"),
        "players": [{"name": "s", "provider": "openai", "model": "m", "base_url":
                     "http://127.0.0.1:9/v1", "api_key_env": "ENVDUELS_TEST_KEY",
                     "roles": ["solver"]}],
        "tournament": {"environments": ["number_guess"]}, "sandbox": {"workers": 2}}))
    before = _harness_workers()
    with pytest.raises(UserError, match="ENVDUELS_TEST_KEY"):
        check_run(load_config(path), unsafe_no_sandbox=False)
    assert _harness_workers() == before
    assert not (tmp_path / "run").exists()
