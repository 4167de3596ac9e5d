"""Nothing about a run's results changes with the number of harness workers (docs/workers.md):
the same run with its sandboxes in the engine's process, in one worker and in two records the
same episodes, transcripts and audit verdicts. Real scripted server, real sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envduels.engine.run import run_command
from envduels.store import Store
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
    store = Store(tmp_path / f"run-{workers}", create=False)
    try:
        episodes = sorted((e.episode_key, e.outcome, e.turns, e.reason, str(e.transcript))
                          for e in store.episodes())
        audits = sorted(store.audits())
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
