"""The viewer over HTTP and from the command line: headers, errors, read-only, never blocking."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from envduels.store import DB_NAME
from envduels.view import create_app
from envduels.view.commands import running

from .conftest import analysed

SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture(scope="module")
def served(scripted_run):
    with running(create_app([scripted_run], bootstrap=50)) as url:
        yield analysed(url).rstrip("/")


def test_every_response_carries_a_strict_content_security_policy(served):
    for path in ("/", "/run/0/", "/run/0/environments", "/run/0/env/r1-alice-0",
                 "/run/0/player/alice", "/run/0/live.json", "/static/live.js",
                 "/static/view.css", "/static/pygments.css", "/run/0/env/nope", "/run/9/"):
        r = httpx.get(served + path, timeout=120)
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp, path
        assert "unsafe" not in csp and "frame-ancestors 'none'" in csp, path
        assert r.headers["x-content-type-options"] == "nosniff", path


def test_unknown_environment_episode_or_run_is_a_404_page(served):
    for path in ("/run/0/env/nope", "/run/0/episode/nope", "/run/0/player/nobody", "/run/3/"):
        r = httpx.get(served + path, timeout=120)
        assert r.status_code == 404 and "Traceback" not in r.text and "<h1>404</h1>" in r.text


def test_a_request_naming_another_host_is_refused(served):
    # a DNS-rebinding page would send its own name as Host: it must not read the run
    r = httpx.get(served + "/run/0/", headers={"host": "attacker.example"}, timeout=120)
    assert r.status_code == 400 and "alice" not in r.text


def test_live_json_counts_what_the_database_holds(served):
    j = httpx.get(served + "/run/0/live.json", timeout=120).json()
    assert (j["episodes_done"], j["episodes_left"], j["environments"], j["valid"]) == (24, 0, 3, 2)
    assert j["outcomes"] == {"success": 16, "failure": 4, "incomplete": 4, "error": 0}
    assert len(j["latest"]) == 12 and all(x["url"].startswith("/run/0/episode/") for x in j["latest"])


def _folder(run: Path) -> dict[str, tuple[int, int, str]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run.iterdir())}


def test_the_viewer_never_changes_the_run_folder(scripted_run):
    before = _folder(scripted_run)
    with running(create_app([scripted_run], bootstrap=50)) as url:
        for path in ("", "run/0/", "run/0/environments", "run/0/env/r1-bob-0", "run/0/player/bob",
                     "run/0/live.json"):
            assert httpx.get(url + path, timeout=120).status_code == 200
    # byte for byte and mtime for mtime, no side file either: with no writer there the viewer
    # reads run.db immutable (a read-only open left an empty run.db-wal and a run.db-shm)
    assert _folder(scripted_run) == before


def test_the_viewer_opens_a_run_on_a_read_only_folder(scripted_run, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("platform: root ignores file permissions")
    ro = tmp_path / "ro"
    ro.mkdir()
    with sqlite3.connect(scripted_run / DB_NAME) as a, sqlite3.connect(ro / DB_NAME) as b:
        a.backup(b)
    ro.chmod(0o555)
    try:
        with running(create_app([ro], bootstrap=50)) as url:
            assert httpx.get(url + "run/0/environments", timeout=120).status_code == 200
    finally:
        ro.chmod(0o755)


def test_a_writer_is_never_blocked_while_pages_are_read(scripted_run, tmp_path):
    run = tmp_path / "busy"
    run.mkdir()
    with sqlite3.connect(scripted_run / DB_NAME) as a, sqlite3.connect(run / DB_NAME) as b:
        a.backup(b)
    stop = threading.Event()
    with running(create_app([run], bootstrap=20)) as url:
        def read() -> None:
            with httpx.Client(timeout=120) as c:
                while not stop.is_set():
                    for path in ("run/0/", "run/0/environments", "run/0/live.json"):
                        c.get(url + path)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        # timeout=0: a write that had to wait for the viewer would fail at once ("locked")
        db = sqlite3.connect(run / DB_NAME, timeout=0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        try:
            for k in range(300):
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (f"k{k % 7}", str(k)))
                db.execute("COMMIT")
        finally:
            stop.set()
            for t in readers:
                t.join()
            db.close()


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "envduels.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60, **kw)


def test_view_of_a_folder_without_a_run_is_one_line_error(tmp_path):
    r = cli("view", str(tmp_path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "holds no run database" in r.stderr


def test_view_on_a_port_in_use_is_one_line_error(scripted_run):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        r = cli("view", str(scripted_run), "--port", str(s.getsockname()[1]))
    assert r.returncode == 2 and "cannot listen on 127.0.0.1" in r.stderr
    assert "--port 0" in r.stderr and r.stderr.strip().count("\n") == 0


def test_view_with_port_0_prints_a_loopback_url_and_serves_it(scripted_run):
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-m", "envduels.cli", "view", str(scripted_run), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("envduels view: http://127.0.0.1:")
        url = line.split()[2]
        r = httpx.get(url + "run/0/", timeout=60)
        assert r.status_code == 200 and "Run scripted" in r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_status_points_to_the_viewer(scripted_run):
    r = cli("status", str(scripted_run))
    assert r.returncode == 0 and f"watch it live: envduels view {scripted_run}" in r.stdout


def test_view_of_a_file_that_is_not_a_run_database_is_one_line_error(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"not a database, just text " * 100)
    r = cli("view", str(tmp_path))
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: cannot read the run database {tmp_path / DB_NAME}")
    assert r.stderr.strip().count("\n") == 0


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("viewer.example", False)])
def test_only_loopback_hosts_count_as_loopback(host, loopback):
    from envduels.view.commands import is_loopback

    assert is_loopback(host) is loopback
