"""Hostile files are one line (issue 19): an export folder (its manifest, a privileged file, a
source), an episodes file and a YAML config that nest 100,000 deep, hold a 5,000-digit integer,
are a 64 GiB sparse file or a FIFO get one line on stderr and exit 2 from the installed console
script, never a traceback, a hang or an exhausted memory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_cli_usage import SCRIPT, SRC

from envduels.envs import library_env, write_export

DEEP = 100_000


def _deep_json() -> str:
    return '{"environments": ' + "[" * DEEP + "]" * DEEP + "}\n"


def _digits_json() -> str:
    return '{"format_version": 1, "environments": [], "x": ' + "9" * 5000 + "}\n"


def make_hostile(path: Path, kind: str, *, yaml: bool = False) -> None:
    """Replace `path` by a hostile file of `kind`: deep, digits, sparse or fifo."""
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(64 << 30)   # 64 GiB of holes: read whole, it would exhaust memory
    elif kind == "deep":
        path.write_text("name: x\nplayers: " + "[" * DEEP + "]" * DEEP + "\n" if yaml
                        else _deep_json())
    elif kind == "digits":
        path.write_text("name: x\nseed: " + "9" * 5000 + "\n" if yaml else _digits_json())
    else:
        raise AssertionError(kind)


# what each hostile kind is refused for, as said in the one line
SAID = {"deep": "nested more than 64 levels deep", "digits": "an integer of 5,000",
        "sparse": "is 65,536 MiB, over the limit of", "fifo": "is a FIFO (named pipe), not a regular file"}
KINDS = list(SAID)


def envduels_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    # a short timeout: a FIFO read would hang, a 64 GiB read would take minutes
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env={**os.environ, "PYTHONPATH": SRC})


def assert_one_line(r: subprocess.CompletedProcess, kind: str, names: str) -> None:
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("error: ") and SAID[kind] in lines[0], lines[0]
    assert names in lines[0], lines[0]


@pytest.fixture
def export(tmp_path: Path) -> Path:
    folder = tmp_path / "export"
    write_export(folder, [library_env("nim")])
    return folder


# nesting and digits are JSON hostilities; a source's own nesting is validation's (_static)
MEMBERS = [(m, k) for m in ("manifest.json", "privileged/nim.json") for k in KINDS] + [
    ("envs/nim.py", "sparse"), ("envs/nim.py", "fifo")]


@pytest.mark.parametrize(("member", "kind"), MEMBERS, ids=[f"{m}-{k}" for m, k in MEMBERS])
def test_a_hostile_file_in_an_export_folder_is_one_line_from_validate(member, kind, export, tmp_path):
    make_hostile(export / member, kind)
    r = envduels_cli("validate", export, "--json", cwd=tmp_path)
    # --json: the one line is the verdict's reason, on stdout; stderr stays empty
    assert "Traceback" not in r.stderr + r.stdout and r.stderr == "", r.stderr[-2000:]
    assert r.returncode == 2 and len(r.stdout.splitlines()) == 1, r.stdout[-2000:]
    verdict = json.loads(r.stdout)
    assert verdict["valid"] is False and len(verdict["reasons"]) == 1
    (reason,) = verdict["reasons"]
    assert SAID[kind] in reason and str(export / member) in reason, reason
    if member != "manifest.json":   # the row is named too
        assert reason.startswith("manifest row 0 (id 'nim'): "), reason
    plain = envduels_cli("validate", export, cwd=tmp_path)   # without --json: stderr
    assert_one_line(plain, kind, str(export / member))


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_episodes_file_is_one_line_from_report(kind, tmp_path):
    path = tmp_path / "episodes.jsonl"
    if kind in ("deep", "digits"):
        good = {"env_id": "e", "author": "a", "domain": "d", "solver": "s", "seed": 1,
                "hinted": True, "outcome": "success"}
        bad = _deep_json() if kind == "deep" else _digits_json()
        path.write_text(json.dumps(good) + "\n" + bad)
        names = f"{path} line 2"
    else:
        make_hostile(path, kind)
        names = str(path)
    r = envduels_cli("report", "--episodes", path, "--bootstrap", "10", cwd=tmp_path)
    assert_one_line(r, kind, names)
    assert list(tmp_path.iterdir()) == [path]   # no report written


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["run", "plan", "estimate"])
def test_a_hostile_config_is_one_line_from_every_command_that_reads_one(command, kind, tmp_path):
    path = tmp_path / "config.yaml"
    make_hostile(path, kind, yaml=True)
    said = {"digits": "an integer of 5,000 characters"}
    r = envduels_cli(command, path, cwd=tmp_path)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr[-2000:]
    assert said.get(kind, SAID[kind]) in r.stderr and str(path) in r.stderr, r.stderr


def test_a_billion_laughs_config_is_refused_before_it_expands(tmp_path):
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    r = envduels_cli("run", path, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == (f"error: {path}: its anchors and aliases expand to more than 100,000 "
                        "values: write the values out, or use fewer aliases\n")


def test_a_config_that_shares_settings_through_an_anchor_still_loads(tmp_path):
    from envduels.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("name: shared\nplayers:\n"
                    "  - &p {name: a, provider: openai, model: m, base_url: 'http://127.0.0.1:9'}\n"
                    "  - {<<: *p, name: b}\n")
    assert [p.name for p in load_config(path).players] == ["a", "b"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    from report.rundb import small_run

    return small_run(tmp_path_factory.mktemp("hostile") / "sim")


@pytest.mark.parametrize("kind", ["sparse", "fifo", "huge cell"])
def test_a_hostile_gains_file_is_one_line_from_correlate(kind, finished_run, tmp_path):
    path = tmp_path / "gains.csv"
    if kind == "huge cell":   # over the csv module's field limit: csv.Error
        path.write_text('author,gain\n"' + "x" * 200_000 + '",1\n')
        said = f"{path} line 2: not readable as CSV (field larger than field limit"
    else:
        make_hostile(path, kind)
        said = SAID[kind]
    r = envduels_cli("correlate", finished_run, "--gains", path, "--out", tmp_path / "out",
                     cwd=tmp_path)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr[-2000:]
    assert said in r.stderr and str(path) in r.stderr, r.stderr
