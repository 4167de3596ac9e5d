"""Usage mistakes through the installed console script: the usage line and one error line,
exit 2, never a traceback (issue 15, defect 1); `--version`; help without Typer placeholders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import envduels

SCRIPT = Path(sys.executable).parent / "envduels"
SRC = str(Path(envduels.__file__).resolve().parents[1])


def envduels_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: install envduels (pip install -e .) first"
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "100"}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=60, cwd=cwd)


MISTAKES = [
    (["runn", "x.yaml"], "No such command 'runn'. Did you mean 'run'?"),
    (["validate", "nim", "--seed", "2"], "--seed"),
    (["report", "RUN", "--htm", "x.html"], "--htm"),
    (["run"], "Missing argument 'CONFIG'"),
    (["validate", "nim", "--seeds", "abc"], "--seeds"),
    (["models", "chek", "x.yaml"], "No such command 'chek'. Did you mean 'check'?"),
]


@pytest.mark.parametrize(("args", "said"), MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_usage_mistake_prints_the_usage_line_and_one_error_line_and_exits_2(args, said, tmp_path):
    r = envduels_cli(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    usage, error = r.stderr.splitlines()
    assert usage.startswith("Usage: envduels ")
    assert error.startswith("Error: ") and said in error, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("args", [[], ["library"], ["models"]], ids=["bare", "library", "models"])
def test_a_command_group_without_a_command_shows_its_help_and_exits_2(args):
    r = envduels_cli(*args)
    assert r.returncode == 2
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    assert "Usage: envduels" in out and "Commands:" in out


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    r = envduels_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"envduels {version('envduels')}"


def test_a_user_error_is_one_line_without_the_usage(tmp_path):
    r = envduels_cli("status", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ")


@pytest.mark.parametrize("command", [
    ["run"], ["status"], ["report"], ["leaderboard"], ["validate"], ["play"], ["export"],
    ["correlate"], ["plan"], ["library", "show"], ["models", "check"]])
def test_help_names_arguments_in_capitals_and_shows_no_internal_placeholders(command):
    r = envduels_cli(*command, "--help")
    assert r.returncode == 0, r.stderr
    usage = r.stdout.splitlines()[0]
    assert usage.startswith("Usage: envduels ")
    assert "<bool>" not in r.stdout and "list[" not in r.stdout
    arguments = usage.split()[2 + len(command):]
    assert arguments, usage
    # arguments are named in capitals (CONFIG, [NAME], RUN_DIR...), never Typer's parameter
    # names or its braces
    assert all(a.strip("[].").isupper() for a in arguments), usage
    assert "{" not in usage
