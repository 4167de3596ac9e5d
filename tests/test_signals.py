"""Long-running commands leave no process of their own behind on SIGTERM or SIGINT (issue 19):
`envduels view` stopped while its analysis worker computes, `envduels run` stopped while it
authors and solves against a slow scripted model server, through the installed console script.
Every descendant is watched by a subreaper (tests/process_tree.py), whatever its session."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import yaml
from process_tree import stop_midway
from report.rundb import small_run
from test_cli_usage import SCRIPT, SRC

from envduels.store import RunReader
from envduels.testing import ScriptedServer

sys.path.insert(0, str(Path(__file__).parent / "engine"))
from duel_script import config, respond  # noqa: E402

SIGNALS = [signal.SIGTERM, signal.SIGINT]
KEY = "sk-signals"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC, "ENVDUELS_TEST_KEY": KEY}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    return small_run(tmp_path_factory.mktemp("signals") / "sim")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_view_stopped_while_it_analyses_leaves_no_process_behind(sig, finished_run, tmp_path):
    stopped = stop_midway([str(SCRIPT), "view", str(finished_run), "--port", "0"], signal=sig,
                          env=_env(), cwd=tmp_path, ready_text="envduels view: http://127.0.0.1:",
                          descendants=2)   # the analysis worker and the resource tracker
    assert stopped.ready, stopped.stderr[-2000:]
    assert any("multiprocessing" in c for _p, c in stopped.seen), stopped.seen
    assert stopped.survivors == [], stopped.survivors
    assert stopped.rc == 0, stopped.stderr[-2000:]   # stopping is how a viewer ends
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_run_stopped_mid_tournament_leaves_no_process_behind_and_resumes(sig, tmp_path):
    run_dir = tmp_path / "run"
    with ScriptedServer(respond, api_key=KEY, latency_s=0.3) as server:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config(server.base_url, str(run_dir), rounds=3)))
        stopped = stop_midway([str(SCRIPT), "run", str(path), "--quiet"], signal=sig, env=_env(),
                              cwd=tmp_path, ready_text="", descendants=1, settle=2.0)
        assert stopped.ready, stopped.stderr[-2000:]
        assert stopped.seen, "the run had started no sandbox yet"
        assert stopped.survivors == [], stopped.survivors
        assert stopped.rc == 130, stopped.stderr[-2000:]
        assert stopped.stderr.splitlines()[-1] == ("interrupted; finished work is saved, run "
                                                   "the same command again to resume")
        assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
        assert server.request_count > 0
    with RunReader(run_dir) as store:   # what was finished is kept
        assert store.meta("config")["name"] == "scripted"


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_serve_stopped_ends_cleanly_with_exit_0_and_no_process_behind(sig, tmp_path):
    pytest.importorskip("openenv.core", reason="envduels serve needs the serve extra")
    stopped = stop_midway([str(SCRIPT), "serve", "nim", "--port", "0"], signal=sig, env=_env(),
                          cwd=tmp_path, ready_text="envduels serve: http://127.0.0.1:",
                          descendants=0)
    assert stopped.ready, stopped.stderr[-2000:]
    assert stopped.survivors == [], stopped.survivors
    # stopping is how a server ends: not killed by the signal (-15), not a run's "resume" line
    assert stopped.rc == 0, stopped.stderr[-2000:]
    assert "resume" not in stopped.stderr and "Traceback" not in stopped.stderr, stopped.stderr
