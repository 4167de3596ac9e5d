"""`envduels run --no-cache`: calls are still recorded, but never served from earlier records.

One solver (bob), one call at a time, on the LOCK environment as a fixed pool: without the hint
he answers `closed` for 4 turns (failure), with it `open` (success in 1). In the first session
the request right after his first unhinted turn gets a 500 with no retries, so that episode
ends in `error` with one call recorded. Resuming a copy of the run twice shows the difference:
the cached resume sends turns 2-4 of that episode (3 requests), `--no-cache` sends turns 1-4
(4 requests) and records the repeated first turn as a repeat.
"""

from __future__ import annotations

import shutil

import yaml
from duel_script import LOCK_HINT, LOCK_SOURCE, config, respond
from run_records import call_records
from typer.testing import CliRunner

from envduels.cli import app
from envduels.engine.commands import EXIT_ERRORS, run_command
from envduels.envs import EnvSpec, write_export
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-no-cache"


def _config(tmp_path, base_url: str, run: str) -> str:
    cfg = config(base_url, str(tmp_path / run))
    cfg["players"] = [dict(p, roles=["solver"], max_concurrency=1, max_retries=0)
                      for p in cfg["players"] if p["name"] == "bob"]
    cfg["tournament"]["environments"] = [str(tmp_path / "export")]
    path = tmp_path / f"{run}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _outcomes(run_dir) -> list[tuple]:
    store = RunReader(run_dir)
    try:
        return sorted((e.seed, e.hinted, e.outcome, e.turns) for e in store.episodes())
    finally:
        store.close()


def test_no_cache_resends_recorded_calls_and_records_the_repeats(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    write_export(tmp_path / "export", [EnvSpec(id="lock", source=LOCK_SOURCE,
                                               hints={"hint": LOCK_HINT}, author="x")])
    state = {"armed": True}

    def respond_then_fail_once(model: str, messages: list[dict]) -> str:
        first_turn = not any(m["role"] == "assistant" for m in messages)
        unhinted = not messages[1]["content"].startswith("Hint: ")
        if state["armed"] and first_turn and unhinted:
            state["armed"] = False
            server.faults.append("500")   # the next request: this episode's turn 2
        return respond(model, messages)

    with ScriptedServer(respond_then_fail_once, api_key=KEY) as server:
        path = _config(tmp_path, server.base_url, "run")
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        # 2 seeds: unhinted 4 turns + hinted 1 turn each; the broken episode sent 2 of its 4
        assert server.request_count == 4 + 1 + 1 + 2
        store = RunReader(tmp_path / "run")
        assert store.totals().calls == 4 + 1 + 1 + 1
        store.close()
        shutil.copytree(tmp_path / "run", tmp_path / "copy")
        copy_path = _config(tmp_path, server.base_url, "copy")

        before = server.request_count
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        assert server.request_count - before == 3      # turn 1 came from the record

        before = server.request_count
        result = CliRunner().invoke(app, ["run", copy_path, "--quiet", "--no-cache"])
        assert result.exit_code == 0, result.output
        assert server.request_count - before == 4      # turn 1 asked again

    store = RunReader(tmp_path / "copy")
    records = call_records(tmp_path / "copy")
    assert store.totals().calls == 7 + 4               # the repeat is recorded, not dropped
    store.close()
    repeated = [r for r in records if r["call_id"].endswith(":turn:1")
                and not r["request"]["messages"][1]["content"].startswith("Hint: ")]
    assert len(repeated) == 3                          # two seeds, one of them twice
    got = _outcomes(tmp_path / "run")
    assert sorted(o[1:] for o in got) == [(False, "failure", 4)] * 2 + [(True, "success", 1)] * 2
    assert _outcomes(tmp_path / "copy") == got        # same results either way
