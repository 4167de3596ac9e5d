"""The public Python surface (`envduels.run`, `arun`, `open_run`, `Run`): the user guide's example
runs as written, nothing prints or exits, bad input is one-line `UserError`s, and
`import envduels` stays cheap. Real parts throughout: the scripted server on loopback, the
bubblewrap sandbox, SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import envduels
from envduels.analysis.result import RatingRow
from envduels.testing import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The first ```python block of the user's guide's "Python API" section (docs/guide.md,
    where the README points), exactly as printed."""
    text = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "docs/guide.md's Python API section has no ```python block"
    return found.group(1)


def one_line(err: pytest.ExceptionInfo[envduels.UserError]) -> str:
    message = str(err.value)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def test_readme_example_runs_a_tournament_and_reads_a_rating_without_printing(capfd):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    scope: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(readme_example(), "docs/guide.md", "exec"), scope)   # its own asserts run too
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    best = scope["best"]
    assert isinstance(best, RatingRow) and best.model == "perfect" and best.rating > 1000
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def _solver_config(base_url: str) -> dict[str, object]:
    return {"name": "api-test", "seed": 3,
            "players": [{"name": "solo", "provider": "openai", "model": "solo",
                         "base_url": base_url, "roles": ["solver"]}],
            "tournament": {"environments": ["subtraction_game"], "max_turns": 2},
            "sandbox": {"warm_workers": 1}}


def test_arun_runs_in_an_event_loop_and_a_second_run_resumes_without_redoing_work(tmp_path, capfd):
    run_dir = tmp_path / "run"
    with ScriptedServer(lambda model, messages: r"\boxed{1}") as server:
        cfg = _solver_config(server.base_url)
        first = asyncio.run(envduels.arun(cfg, run_dir=run_dir))
        assert first.session is not None and first.session.complete
        assert first.session.tokens > 0
        played = first.episodes()
        assert first.session.outcomes == dict(Counter(e.outcome for e in played))
        assert sum(e.hinted for e in played) * 2 == len(played) > 0   # both conditions
        asked = len(server.requests)

        with pytest.raises(envduels.UserError) as refused:
            envduels.run(cfg, run_dir=run_dir, resume=False)
        assert "already holds a run" in one_line(refused)

        again = envduels.run(cfg, run_dir=run_dir)
        assert again.session is not None and again.session.tokens == 0
        assert len(server.requests) == asked   # nothing asked twice
    assert capfd.readouterr() == ("", "")
    assert [e.outcome for e in envduels.open_run(run_dir).episodes()] == [
        e.outcome for e in first.episodes()]
    assert first.config is not None and first.config.name == "api-test" == first.name


def test_run_raises_a_one_line_user_error_on_a_bad_config_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "never"
    with pytest.raises(envduels.UserError) as bad_key:
        envduels.run({"name": "x", "playerz": []}, run_dir=run_dir)
    assert "unknown key 'playerz'" in one_line(bad_key)
    with pytest.raises(envduels.UserError) as missing:
        envduels.run(tmp_path / "nope.yaml")
    assert "not found" in one_line(missing)
    assert not run_dir.exists()


def test_run_stops_at_the_budget_and_says_so_in_the_session_instead_of_raising(tmp_path, capfd):
    with ScriptedServer(lambda model, messages: r"\boxed{1}") as server:
        cfg = {**_solver_config(server.base_url), "budget": {"max_tokens": 1}}
        stopped = envduels.run(cfg, run_dir=tmp_path / "run")
    assert stopped.session is not None
    assert stopped.session.budget_reached and not stopped.session.complete
    assert capfd.readouterr() == ("", "")


def test_run_inside_an_event_loop_is_a_user_error_pointing_to_arun(tmp_path):
    async def inside() -> None:
        envduels.run({"name": "x"}, run_dir=tmp_path / "run")

    with pytest.raises(envduels.UserError) as in_loop:
        asyncio.run(inside())
    assert "use `await envduels.arun(...)`" in one_line(in_loop)
    assert not (tmp_path / "run").exists()


def test_open_run_on_a_path_that_is_not_a_run_is_a_one_line_user_error(tmp_path):
    with pytest.raises(envduels.UserError) as missing:
        envduels.open_run(tmp_path / "missing")
    assert "is not a folder" in one_line(missing)
    with pytest.raises(envduels.UserError) as empty:
        envduels.open_run(tmp_path)
    assert "holds no run database" in one_line(empty)
    (tmp_path / "run.db").write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(envduels.UserError) as garbage:
        envduels.open_run(tmp_path)
    assert "run.db (file is not a database)" in one_line(garbage)
    assert [p.name for p in tmp_path.iterdir()] == ["run.db"]   # nothing created beside it



def test_open_run_reports_an_old_main_database_exactly_as_envduels_report_does(tmp_path):
    from envduels.report.commands import report_command

    old = tmp_path / "old"
    shutil.copytree(ROOT / "tests" / "data" / "main_6b44c60" / "run", old)
    report_command([old], json_path=tmp_path / "report.json", html_path=None, bootstrap=0)
    run = envduels.open_run(old)
    assert run.report(bootstrap=0).to_json() == json.loads((tmp_path / "report.json").read_text())
    assert len(run.episodes()) == len(run.tables().episodes) > 0
    assert {e.env_id for e in run.environments()} == set(run.tables().environments.env_id)
    assert [p.name for p in old.iterdir()] == ["run.db"]   # read, never written


def test_import_envduels_loads_only_the_package_and_its_errors():
    code = ("import sys, envduels; print(sorted(m for m in sys.modules if m.startswith('envduels')));"
            "print(all(getattr(envduels, n) is not None for n in envduels.__all__))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    loaded, resolved = done.stdout.splitlines()
    assert loaded == "['envduels', 'envduels.errors']"
    assert resolved == "True"


def test_the_library_s_warnings_reach_logging_not_stderr_and_the_cli_shows_them():
    # outside pytest (whose logging plugin installs a handler of its own): without the
    # package's NullHandler, Python's fallback handler would print envduels' warnings
    code = ("import logging, sys, envduels\n"
            "logging.getLogger('envduels.sandbox').warning('reduced protection (library)')\n"
            "if sys.argv[1] == 'cli':\n"
            "    import envduels.cli\n"
            "    logging.getLogger('envduels.sandbox').warning('reduced protection (cli)')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    library = subprocess.run([sys.executable, "-c", code, "library"], capture_output=True,
                             text=True, check=True, env=env)
    assert (library.stdout, library.stderr) == ("", "")
    cli = subprocess.run([sys.executable, "-c", code, "cli"], capture_output=True, text=True,
                         check=True, env=env)
    assert (cli.stdout, cli.stderr) == ("", "reduced protection (cli)\n")
