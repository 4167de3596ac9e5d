"""Readers leave run folders as they found them, byte for byte and mtime for mtime (issue 19):
`envduels view` (pages read, the analysis done, then stopped), and after it `status`,
`report`, `leaderboard` and `export`, on a finished run in a folder they could write, through
the installed console script. And a viewer that watched a run to its end leaves the folder as
that run alone would have left it."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from report.rundb import small_run
from test_cli_usage import SCRIPT, SRC
from test_readonly import READERS, _args

from envduels.store import RunReader, run_lock
from envduels.store._lock import LOCK_CHECK_S


def folder(run: Path) -> dict[str, object]:
    """Every entry of `run`: name, size, mtime and content hash; and the folder's own mtime."""
    return {"": run.stat().st_mtime_ns} | {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(run.iterdir())}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC}


def start_view(run: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([str(SCRIPT), "view", str(run), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=cwd)
    line = proc.stdout.readline()
    assert line.startswith("envduels view: http://127.0.0.1:"), line + proc.stderr.read()
    return proc, line.split()[2].rstrip("/")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()


def wait_for(url: str, ready: callable, what: str) -> dict:
    deadline = time.monotonic() + 120
    while True:
        live = httpx.get(f"{url}/run/0/live.json", timeout=120).json()
        if ready(live):
            return live
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    run = small_run(tmp_path / "sim")
    with run_lock(run):   # as a real `envduels run` leaves it: run.db and run.lock
        pass
    return run


@pytest.mark.slow
def test_view_then_every_reading_command_leave_a_finished_writable_run_unchanged(finished_run, tmp_path):
    before = folder(finished_run)
    assert sorted(before) == ["", "run.db", "run.lock"]
    proc, url = start_view(finished_run, tmp_path)
    try:
        wait_for(url, lambda live: live["analysis_ready"], "the first analysis took over 2 minutes")
        for page in ("/", "/run/0/", "/run/0/environments"):
            assert httpx.get(url + page, timeout=120).status_code == 200
        assert folder(finished_run) == before   # while it is open, too
    finally:
        stop(proc)
    assert folder(finished_run) == before
    for cmd in READERS:   # after a viewer, a reader used to find its -wal/-shm and rewrite them
        r = subprocess.run([str(SCRIPT), *_args(cmd, finished_run, tmp_path)], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path, env=_env())
        assert r.returncode == 0, r.stderr[-2000:]
        assert folder(finished_run) == before, cmd


WRITER = """
import sys, time
from envduels.store.writer import RunWriter
with RunWriter.locked(sys.argv[1]) as store:   # what `envduels run` holds for its life
    for n in range(1, 31):
        store.set_meta("round", n)
        time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_viewer_that_followed_a_run_to_its_end_leaves_what_the_run_alone_would(finished_run, tmp_path):
    proc, url = start_view(finished_run, tmp_path)
    try:
        version = wait_for(url, lambda live: live["analysis_ready"], "no first analysis")["version"]
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(finished_run)], env=_env())
        wait_for(url, lambda live: live["version"] != version, "the viewer never saw the run write")
        assert writer.wait(timeout=60) == 0
        time.sleep(LOCK_CHECK_S + 0.2)
        httpx.get(f"{url}/run/0/live.json", timeout=120)   # the viewer sees the run has ended
        assert sorted(p.name for p in finished_run.iterdir()) == ["run.db", "run.lock"]
    finally:
        stop(proc)
    assert sorted(p.name for p in finished_run.iterdir()) == ["run.db", "run.lock"]
    with RunReader(finished_run) as store:   # nothing of it was lost
        assert store.meta("round") == 30


def test_a_held_run_lock_is_seen_without_taking_it(tmp_path):
    from envduels.store import run_lock_held

    assert not run_lock_held(tmp_path)   # no lock file: no run was ever here
    with run_lock(tmp_path):
        assert run_lock_held(tmp_path)
        with run_lock(tmp_path / "other"):   # another folder's lock is not this one's
            pass
        assert not run_lock_held(tmp_path / "other")
    assert not run_lock_held(tmp_path)
