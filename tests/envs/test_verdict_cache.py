"""`envduels validate` reuses a library or export environment's verdict only when nothing that
decides it changed: the source, the validator, the seeds, the options (envs/_verdict_cache.py).

Each test has its own cache folder (ENVDUELS_CACHE_DIR, set by tests/conftest.py). A reuse is
seen by marking the cached verdict: the marked reason is printed only if the cache answered.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from envduels.envs import load_env_file, write_export
from envduels.envs._verdict_cache import cache_dir, validator_hash

from .conftest import FIXTURES

SRC = Path(__file__).parents[2] / "src"
MARK = "MARKED: this verdict came from the cache"


def validate(folder: Path, *args: str, pythonpath: Path = SRC) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    run = subprocess.run([sys.executable, "-c", "from envduels.cli import main; main()",
                          "validate", str(folder), "--seeds", "2", "--json", *args],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


def export(tmp_path: Path, source_suffix: str = "") -> Path:
    spec = load_env_file(FIXTURES / "good_env.py")
    spec = dataclasses.replace(spec, source=spec.source + source_suffix)
    folder = tmp_path / "export"
    shutil.rmtree(folder, ignore_errors=True)
    write_export(folder, [spec])
    return folder


def mark_cache() -> int:
    """Make every cached verdict invalid with MARK as its reason; how many there were."""
    files = list(cache_dir().glob("*.json"))
    for path in files:
        data = json.loads(path.read_text())
        data["verdict"].update(valid=False, reasons=[MARK], warnings=[], flags=[])
        path.write_text(json.dumps(data))
    return len(files)


def test_an_unchanged_export_environment_gets_its_cached_verdict(tmp_path: Path) -> None:
    folder = export(tmp_path)
    first = validate(folder)
    assert first["valid"] is True
    assert mark_cache() == 1
    assert validate(folder)["environments"][0]["reasons"] == [MARK]


def test_revalidate_judges_again_and_refreshes_the_cache(tmp_path: Path) -> None:
    folder = export(tmp_path)
    validate(folder)
    mark_cache()
    again = validate(folder, "--revalidate")
    assert again["valid"] is True and again["environments"][0]["reasons"] == []
    assert validate(folder)["environments"][0]["reasons"] == []   # the fresh verdict was kept


def test_a_changed_source_is_never_answered_by_the_cached_verdict(tmp_path: Path) -> None:
    validate(export(tmp_path))
    mark_cache()
    changed = validate(export(tmp_path, "\n# one more line\n"))
    assert changed["environments"][0]["reasons"] == []


def test_other_seeds_are_never_answered_by_the_cached_verdict(tmp_path: Path) -> None:
    folder = export(tmp_path)
    validate(folder)
    mark_cache()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    run = subprocess.run([sys.executable, "-c", "from envduels.cli import main; main()",
                          "validate", str(folder), "--seeds", "3", "--json"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert json.loads(run.stdout)["environments"][0]["reasons"] == []


def test_a_changed_validator_is_never_answered_by_the_cached_verdict(tmp_path: Path) -> None:
    folder = export(tmp_path)
    validate(folder)
    mark_cache()
    copy = tmp_path / "pkg"
    shutil.copytree(SRC / "envduels", copy / "envduels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    validator = copy / "envduels" / "envs" / "_validate.py"
    validator.write_text(validator.read_text() + "\n# a changed validator\n")
    assert validator_hash(copy / "envduels") != validator_hash(SRC / "envduels")
    changed = validate(folder, pythonpath=copy)
    assert changed["valid"] is True and changed["environments"][0]["reasons"] == []


def test_an_unreadable_cache_entry_is_ignored(tmp_path: Path) -> None:
    folder = export(tmp_path)
    validate(folder)
    for path in cache_dir().glob("*.json"):
        path.write_text("[" * 100_000)
    assert validate(folder)["valid"] is True


def test_a_cached_verdict_keeps_the_battery_findings(tmp_path: Path) -> None:
    folder = export(tmp_path)
    first = validate(folder)["environments"][0]
    assert isinstance(first.get("battery"), dict)
    assert validate(folder)["environments"][0] == first
