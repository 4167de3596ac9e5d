"""The verdict cache trusts only its owner (envs/_verdict_cache.py): a verdict planted in a
folder another user owns or anyone can write, or a cached entry that is not a well-formed
verdict, is judged afresh, with one warning line and no traceback, and nothing from the entry
reaches the terminal. Through the installed console script, as a user runs it.

The planted verdict says "valid" for `door_oracle_loses`, whose oracle cannot win (judged
fresh: INVALID, oracle failed). Its key is the one `envduels validate` itself files it under:
each test validates once into its private cache (tests/conftest.py) and plants from there.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from envduels.envs import load_env_file, write_export
from envduels.envs._verdict_cache import cache_dir

from .conftest import FIXTURES

ENVDUELS = str(Path(sys.executable).parent / "envduels")
DOOR_INVALID = ("seed {seed}: playing oracle_action() each turn does not win (the episode was "
                "truncated at turn 4): make oracle_action return a winning action for the "
                "current state")


def validate(folder: Path, *args: str, cache: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache is not None:
        env["ENVDUELS_CACHE_DIR"] = str(cache)
    return subprocess.run([ENVDUELS, "validate", str(folder), "--seeds", "2", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def door_export(tmp_path: Path) -> Path:
    spec = load_env_file(FIXTURES / "door_oracle_loses.py")
    folder = tmp_path / "export"
    write_export(folder, [spec])
    return folder


def cached_entry(folder: Path) -> tuple[str, dict]:
    """Validate `folder` into this test's private cache; the entry's file name and content."""
    first = validate(folder, "--json")
    assert first.returncode == 1 and json.loads(first.stdout)["valid"] is False, first.stderr
    (path,) = cache_dir().glob("*.json")
    return path.name, json.loads(path.read_text())


def planted(entry: dict, **verdict: object) -> str:
    """`entry` with its verdict changed to "valid, oracle passed" and `verdict` on top."""
    v = {**entry["verdict"], "valid": True, "reasons": [], "oracle": "passed", **verdict}
    return json.dumps({**entry, "verdict": v})


def assert_judged_afresh(run: subprocess.CompletedProcess[str], *, as_json: bool) -> None:
    assert run.returncode == 1, run.stderr
    if as_json:
        (door,) = json.loads(run.stdout)["environments"]
        assert (door["valid"], door["oracle"]) == (False, "failed")
        assert door["reasons"] == [DOOR_INVALID.format(seed=door["seeds"][0])]
    else:
        assert run.stdout.splitlines()[0] == (
            "INVALID  door_oracle_loses  (class Door, oracle failed, 2 seeds, no hint supplied)")
    assert "Traceback" not in run.stderr and "Error" not in run.stderr, run.stderr


def warnings_of(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if "verdict" in line]


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="platform: making a folder another user owns needs root")
def test_a_verdict_planted_in_a_folder_another_user_owns_is_ignored(tmp_path: Path) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    nobody = pwd.getpwnam("nobody").pw_uid
    shared = tmp_path / "shared"            # ENVDUELS_CACHE_DIR=/tmp/... on a shared machine
    (shared / "verdicts").mkdir(parents=True)
    (shared / "verdicts" / name).write_text(planted(entry))
    for path in (shared, shared / "verdicts", shared / "verdicts" / name):
        os.chown(path, nobody, nobody)
        path.chmod(0o755 if path.is_dir() else 0o644)   # not even writable by others

    run = validate(folder, "--json", cache=shared)
    assert_judged_afresh(run, as_json=True)
    assert warnings_of(run) == [
        f"ignoring the verdict cache {shared}/verdicts: {shared} belongs to uid {nobody}, not to you (uid 0); every verdict is judged afresh. Fix: set "
        "ENVDUELS_CACHE_DIR to a folder of your own (mkdir -m 700 DIR), or remove that folder"]
    assert json.loads((shared / "verdicts" / name).read_text())["verdict"]["valid"] is True


def test_a_verdict_planted_in_a_folder_anyone_can_write_is_ignored(tmp_path: Path) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    shared = tmp_path / "shared"
    (shared / "verdicts").mkdir(parents=True)
    (shared / "verdicts" / name).write_text(planted(entry))
    (shared / "verdicts").chmod(0o1777)     # sticky or not, anyone can add an entry

    run = validate(folder, "--json", cache=shared)
    assert_judged_afresh(run, as_json=True)
    assert warnings_of(run) == [
        f"ignoring the verdict cache {shared}/verdicts: {shared}/verdicts can be written by "
        f"others (mode 1777); every verdict is judged afresh. Fix: chmod go-w "
        f"{shared}/verdicts, or remove it if you did not make it so"]


def test_a_folder_above_the_cache_that_anyone_can_write_makes_it_untrusted(tmp_path: Path
                                                                           ) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    shared = tmp_path / "shared"
    (shared / "verdicts").mkdir(parents=True, mode=0o700)
    (shared / "verdicts" / name).write_text(planted(entry))
    shared.chmod(0o777)                     # anyone can swap `verdicts` for a folder of theirs

    run = validate(folder, "--json", cache=shared)
    assert_judged_afresh(run, as_json=True)
    assert warnings_of(run) == [
        f"ignoring the verdict cache {shared}/verdicts: {shared} can be written by others "
        f"(mode 0777); every verdict is judged afresh. Fix: chmod go-w {shared}, or remove it "
        "if you did not make it so"]


def test_an_entry_anyone_can_write_or_a_link_is_judged_afresh_and_replaced(tmp_path: Path
                                                                           ) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    path = cache_dir() / name
    path.write_text(planted(entry))
    path.chmod(0o666)
    run = validate(folder, "--json")
    assert_judged_afresh(run, as_json=True)
    assert warnings_of(run) == [f"ignoring the cached verdict {path}: others can write it "
                                "(mode 0666); it is judged afresh and the entry replaced"]
    assert json.loads(path.read_text())["verdict"]["valid"] is False   # the fresh verdict

    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(planted(entry))
    path.unlink()
    path.symlink_to(elsewhere)
    run = validate(folder, "--json")
    assert_judged_afresh(run, as_json=True)
    assert warnings_of(run) == [f"ignoring the cached verdict {path}: it is a symbolic link; "
                                "it is judged afresh"]
    assert not path.is_symlink() and json.loads(elsewhere.read_text())["verdict"]["valid"]


def test_markup_in_a_cached_oracle_is_judged_afresh_without_a_traceback(tmp_path: Path) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    path = cache_dir() / name
    path.write_text(planted(entry, oracle="[/] [/]"))

    run = validate(folder)
    assert_judged_afresh(run, as_json=False)
    assert warnings_of(run) == [
        f"ignoring the cached verdict {path}: verdict.oracle: Input should be 'passed', "
        "'failed', 'absent' or 'skipped'; it is judged afresh and the entry replaced"]


def test_an_escape_sequence_in_a_cached_verdict_never_reaches_the_terminal(tmp_path: Path
                                                                           ) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    path = cache_dir() / name
    osc = "\x1b]0;pwned\x07"
    path.write_text(planted(entry, oracle=osc))

    run = validate(folder)
    assert_judged_afresh(run, as_json=False)
    assert "\x1b" not in run.stdout + run.stderr and "\x07" not in run.stdout + run.stderr
    assert len(warnings_of(run)) == 1

    # an extra field named by the hostile text itself: the warning names it, sanitised
    path.write_text(planted(entry)[:-2] + f", {json.dumps(osc + 'x')}: 1}}}}")
    run = validate(folder)
    assert_judged_afresh(run, as_json=False)
    assert "\x1b" not in run.stdout + run.stderr and "\x07" not in run.stdout + run.stderr
    assert warnings_of(run) == [
        f"ignoring the cached verdict {path}: verdict.]0;pwnedx: Extra inputs are not "
        "permitted; it is judged afresh and the entry replaced"]


def test_a_well_formed_verdict_of_the_users_own_is_still_reused(tmp_path: Path) -> None:
    folder = door_export(tmp_path)
    name, entry = cached_entry(folder)
    (cache_dir() / name).write_text(planted(entry))   # the user's own folder and file
    run = validate(folder, "--json")
    assert run.returncode == 0 and json.loads(run.stdout)["valid"] is True
    assert warnings_of(run) == []
