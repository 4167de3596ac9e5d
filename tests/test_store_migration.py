"""Run databases written by an older envduels still open, read-write and read-only, and read
exactly as that envduels read them; a column added since reads as its field's default."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from envduels.export import Filters, export_command, records, select
from envduels.report.commands import report_command
from envduels.store import ENVIRONMENT_COLUMNS, Store

OLD = Path(__file__).parent / "data" / "main_6b44c60"
"""Written by main at 6b44c60 (before the environment's one record); see its make.py."""


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD / "run", run)
    return run


def _open(run: Path, mode: str) -> Store:
    return Store(run, create=False) if mode == "rw" else Store.open_readonly(run, live=False)


def _tables_json(store: Store) -> dict:
    t = store.tables()
    return json.loads(json.dumps({"environments": t.environments.to_dict("records"),
                                  "episodes": t.episodes.to_dict("records")},
                                 sort_keys=True, default=str))


def _folder(path: Path) -> dict[str, object]:
    """Every file of an export folder by name: its text, and for the marker its JSON without the
    run folder's path (where the database lay when it was exported)."""
    files: dict[str, object] = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            files[p.relative_to(path).as_posix()] = p.read_text(encoding="utf-8")
    marker = json.loads(str(files.pop("export.json")))
    marker.pop("run_dir")
    return {**files, "export.json": marker}


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_an_old_run_database_reads_as_the_old_envduels_read_it(mode, tmp_path):
    run = _copy(tmp_path)
    expected = json.loads((OLD / "expected" / "tables.json").read_text())
    with _open(run, mode) as store:
        got = _tables_json(store)
        records = store.environments()
    # every column the old tables had, with the same values; the new columns come after them
    old_columns = list(expected["environments"][0])
    assert [{c: e[c] for c in old_columns} for e in got["environments"]] == expected["environments"]
    assert got["episodes"] == expected["episodes"]
    assert ENVIRONMENT_COLUMNS[:len(old_columns)] == [
        "env_id", "author", "round", "domain", "title", "valid", "invalid_reason", "hint", "source",
        "source_sha256", "class_name", "max_turns", "fixed_pool", "benchmark_seeds"]
    # what the old tables dropped is there too, read from the same file
    maze = next(e for e in got["environments"] if e["env_id"] == "maze")
    assert (maze["hints"], maze["metadata"], maze["hint"]) == (
        {"hint_1": "walls", "hint_2": "exit east"}, {"source_run": "x", "split": "train"}, "walls")
    assert {r.env_id: (r.slot, r.metadata.get("attempts")) for r in records if not r.fixed_pool} == {
        "r1-alice-0": (0, 1), "r1-alice-1": (1, 3), "r1-bob-0": (0, 2), "r2-bob-0": (0, 1)}
    # the recorded hash is the hash of the recorded source
    assert [e["source_sha256"] for e in got["environments"]] == [
        e["source_sha256"] for e in expected["environments"]]


def _report_and_exports(run: Path, out: Path) -> dict[str, object]:
    out.mkdir()
    report_command([run], json_path=out / "report.json", html_path=None, bootstrap=20)
    export_command(run, out / "export-envduels", fmt="envduels", authors=[], rounds=[], flags=[],
                   min_pass=None, max_pass=None, target=None)
    # the record formats also reset each environment for its first turn, which this file's
    # placeholder sources cannot do: their records as the export selects them
    with Store.open_readonly(run, live=False) as store:
        rows = records(select(store.environments(), store.tables(), Filters()))
    return {"report": json.loads((out / "report.json").read_text()),
            "envduels": _folder(out / "export-envduels"), "jsonl": rows}


def test_an_old_run_database_reports_and_exports_the_same_read_only_and_read_write(tmp_path,
                                                                                   capsys):
    run = _copy(tmp_path)
    os.chmod(run, 0o555)               # read-only first: nothing may be written there
    try:
        read_only = _report_and_exports(run, tmp_path / "ro")
    finally:
        os.chmod(run, 0o755)
    Store(run, create=False).close()   # then migrated in place
    read_write = _report_and_exports(run, tmp_path / "rw")
    assert read_write == read_only
    # the exports are what the old envduels exported from the same file (sources, hints, seeds,
    # metadata and the panel's results), and the report counts the same run; its statistics are
    # today's analysis, which may differ from 6b44c60's by design
    assert read_write["envduels"] == _folder(OLD / "expected" / "export-envduels")
    old_rows = [json.loads(line) for line in
                (OLD / "expected" / "export-jsonl" / "environments.jsonl").read_text().splitlines()]
    assert [{k: r[k] for k in old_rows[0]} for r in read_write["jsonl"]] == old_rows
    old_report = json.loads((OLD / "expected" / "report.json").read_text())
    assert read_write["report"]["run"] == old_report["run"]


def test_opening_read_write_adds_nothing_but_missing_columns_and_loses_no_row(tmp_path):
    run = _copy(tmp_path)
    before = sqlite3.connect(run / "run.db")
    counts = {t: before.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("meta", "calls", "environments", "validations", "episodes", "audits")}
    before.close()
    Store(run, create=False).close()
    after = sqlite3.connect(run / "run.db")
    assert {t: after.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in counts} == counts
    after.close()


def _drop_columns(run: Path, table: str, *columns: str) -> None:
    """The database as an envduels from before these columns would have written it."""
    db = sqlite3.connect(run / "run.db")
    for c in columns:
        db.execute(f"ALTER TABLE {table} DROP COLUMN {c}")
    db.commit()
    db.close()


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_record_column_the_database_lacks_reads_as_the_fields_default(mode, tmp_path):
    run = _copy(tmp_path)
    _drop_columns(run, "environments", "metadata", "slot", "class_name")
    _drop_columns(run, "episodes", "turns")
    with _open(run, mode) as store:
        envs = store.environments()
        t = store.tables()
        ep = store.episodes()[0]
    assert [(e.metadata, e.slot, e.class_name) for e in envs] == [({}, 0, None)] * 5
    assert ep.turns is None and ep.outcome in ("success", "failure")
    assert t.environments["metadata"].tolist() == [{}] * 5
    assert list(t.environments.columns) == ENVIRONMENT_COLUMNS
    if mode == "rw":   # the columns were added, so the next write keeps every field
        db = sqlite3.connect(run / "run.db")
        have = {r[1] for r in db.execute("PRAGMA table_info(environments)")}
        db.close()
        assert {"metadata", "slot", "class_name"} <= have


def test_a_record_written_today_into_an_old_database_reads_back_whole(tmp_path):
    from dataclasses import replace

    run = _copy(tmp_path)
    _drop_columns(run, "environments", "metadata")
    with Store(run, create=False) as store:
        old = store.environment("maze")
        new = replace(old, spec=replace(old.spec, id="maze-2", metadata={"split": "test"}))
        store.put_environment(new)
        assert store.environment("maze-2") == new
        assert len(store.environments()) == 6


def test_a_new_database_has_the_old_tables_column_for_column(tmp_path):
    # so the envduels before the named columns (which read `SELECT *` by position) can still
    # read a run database written today
    def columns(path: Path) -> dict[str, list[tuple]]:
        db = sqlite3.connect(path)
        out = {t: [r[1:] for r in db.execute(f"PRAGMA table_info({t})")]
               for t in ("meta", "calls", "environments", "validations", "episodes", "audits")}
        db.close()
        return out

    Store(tmp_path / "new").close()
    assert columns(tmp_path / "new" / "run.db") == columns(OLD / "run" / "run.db")
