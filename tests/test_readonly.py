"""Read-only commands only read (SPEC §11): `status`, `report`, `leaderboard` and `export` open
the run database read-only, write nothing in the run folder, and work on a read-only mount."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from report.rundb import small_run
from test_cli_usage import SCRIPT, SRC

from envduels.errors import UserError
from envduels.store import RunReader
from envduels.store.writer import RunWriter


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return small_run(tmp_path_factory.mktemp("ro") / "sim")


def snapshot(folder):
    """Every entry of `folder` with its mtime and size, and the folder's own mtime."""
    return (folder.stat().st_mtime_ns,
            {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()})


READERS = [
    ["status", "{run}"],
    ["report", "{run}", "--json", "{out}/r.json", "--html", "{out}/r.html", "--bootstrap", "20"],
    ["report", "{run}", "--bootstrap", "20"],
    ["leaderboard", "{run}", "--bootstrap", "20"],
    ["export", "{run}", "{out}/export"],
]


def _args(cmd, run, out):
    return [a.format(run=run, out=out) for a in cmd]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", READERS, ids=lambda c: " ".join(c[:1] + c[2:4]))
def test_a_reading_command_leaves_a_writable_run_folder_untouched(cmd, run_dir, tmp_path):
    before = snapshot(run_dir)
    r = subprocess.run([str(SCRIPT), *_args(cmd, run_dir, tmp_path)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": SRC,
                                                                  "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert snapshot(run_dir) == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.db"]


@pytest.mark.slow
def test_report_without_paths_writes_into_the_current_folder(run_dir, tmp_path):
    r = subprocess.run([str(SCRIPT), "report", str(run_dir), "--bootstrap", "20"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sim-report.json").read_text())["run"]["name"] == "sim"
    assert (tmp_path / "sim-report.html").is_file()


@pytest.mark.slow
def test_reading_commands_succeed_on_a_read_only_mount(run_dir, tmp_path):
    """As root (who may write anywhere) a read-only bind mount in a private mount namespace;
    as another user a folder without write permission, which is the same to SQLite."""
    mounted = tmp_path / "mounted"
    shutil.copytree(run_dir, mounted)
    out = tmp_path / "out"
    out.mkdir()
    commands = [" ".join(f"'{a}'" for a in [str(SCRIPT), *_args(cmd, mounted, out)])
                for cmd in READERS]
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if shutil.which("unshare") is None or probe.returncode != 0:
            pytest.skip("platform: root without unshare(1) or mount namespaces")
        check = tmp_path / "live_reader.py"   # a long-lived reader (the viewer's way)
        check.write_text("import sys\nfrom envduels.store import RunReader\n"
                         "assert RunReader(sys.argv[1], live=True).meta('config')\n")
        live = f"'{sys.executable}' '{check}' '{mounted}'"
        script = [f"mount --bind -o ro {mounted} {mounted}",
                  f"! touch {mounted}/probe 2>/dev/null", *commands, live]
        argv = ["unshare", "-m", "sh", "-ec", " && ".join(script)]
    else:
        for path in (mounted / "run.db", mounted):
            path.chmod(0o444 if path.is_file() else 0o555)
        argv = ["sh", "-ec", " && ".join(commands)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=out, env=env)
    finally:
        mounted.chmod(0o755)
    assert r.returncode == 0, r.stderr
    assert "cannot open" not in r.stderr and "Traceback" not in r.stderr
    assert (out / "r.json").is_file() and (out / "export").is_dir()
    assert sorted(p.name for p in mounted.iterdir()) == ["run.db"]


def test_a_reader_has_no_write_and_its_connection_refuses_one_with_one_line(run_dir):
    store = RunReader(run_dir, live=True)
    try:
        assert store.meta("config")["name"] == "sim"
        assert not [name for name in dir(store) if name.startswith(("put", "set_"))]
        with pytest.raises(UserError, match="opened read-only"), store.db.transaction():
            pass
    finally:
        store.close()


@pytest.mark.parametrize("live", [False, True])
def test_open_readonly_sees_records_still_in_a_running_writers_log(tmp_path, live):
    writer = RunWriter(tmp_path / "run")
    writer.set_meta("config", {"name": "live"})
    try:
        assert (tmp_path / "run" / "run.db-wal").exists()
        reader = RunReader(tmp_path / "run", live=live)
        assert reader.meta("config") == {"name": "live"}
        reader.close()
    finally:
        writer.close()


def test_a_live_reader_follows_a_run_that_resumes_after_it_opened(tmp_path):
    RunWriter(tmp_path / "run").close()      # a finished run: no -wal left
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["run.db"]
    reader = RunReader(tmp_path / "run", live=True)
    try:
        assert reader.meta("round") is None
        writer = RunWriter(tmp_path / "run")  # the run resumes while the viewer is open
        for n in range(1, 4):
            writer.set_meta("round", n)
            assert reader.meta("round") == n
        writer.close()
    finally:
        reader.close()


def test_open_readonly_names_a_folder_without_a_run(tmp_path):
    with pytest.raises(UserError, match="holds no run database"):
        RunReader(tmp_path, live=True)
    assert list(tmp_path.iterdir()) == []


def test_a_database_from_before_a_table_was_added_reads_as_having_none_recorded(tmp_path):
    import sqlite3

    (tmp_path / "old").mkdir()
    db = sqlite3.connect(tmp_path / "old" / "run.db")
    db.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "INSERT INTO meta VALUES ('config', '{\"name\": \"old\"}');")
    db.close()
    before = snapshot(tmp_path / "old")
    store = RunReader(tmp_path / "old")
    try:
        assert store.meta("config") == {"name": "old"}
        assert store.episodes() == [] and store.environments() == []
        assert store.authoring_errors() == {}
    finally:
        store.close()
    assert snapshot(tmp_path / "old") == before


def test_a_database_a_starting_run_has_created_but_not_filled_reads_as_empty(tmp_path):
    """`envduels run` estimates from the folder before it takes the run lock: a second run
    started while the first had created run.db but not its tables failed with "no such table:
    meta" instead of naming the run that holds the folder."""
    (tmp_path / "run.db").write_bytes(b"")
    store = RunReader(tmp_path)
    try:
        assert store.meta("config") is None and store.run_config() is None
        assert store.episodes() == [] and store.environments() == []
        assert store.totals().calls == 0
    finally:
        store.close()


def test_a_file_that_is_no_database_is_still_one_line(tmp_path):
    (tmp_path / "run.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError, match="cannot read the run database"):
        RunReader(tmp_path)


def test_a_live_reader_of_a_database_being_created_asks_to_open_it_again(tmp_path):
    """Empty stand-in tables would hide the real ones the starting run creates next, for as
    long as the reader (`envduels view`) stays open: it would show an empty run throughout."""
    (tmp_path / "run.db").write_bytes(b"")
    with pytest.raises(UserError, match="still being created; open it again in a moment"):
        RunReader(tmp_path, live=True)
    writer = RunWriter(tmp_path)
    writer.set_meta("config", {"name": "x"})
    reader = RunReader(tmp_path, live=True)
    try:
        assert reader.meta("config") == {"name": "x"}
    finally:
        reader.close()
        writer.close()
