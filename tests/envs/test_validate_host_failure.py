"""A sandbox that cannot start is the host's failure: `validate` says so in one line and judges
no environment, instead of calling a good environment invalid. The failure is real: the
launcher is pointed at a bubblewrap that does not exist (in this process) or that cannot run
(the one the harness worker processes find first on PATH)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from broken_sandbox import break_bwrap

from envduels.envs.commands import validate_command
from envduels.errors import UserError

ARGS = {"seeds": 2, "require_oracle": False, "hint_max_chars": 600, "unsafe_no_sandbox": False}
MESSAGE = "the sandbox could not start ("


@pytest.fixture
def broken_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    break_bwrap(monkeypatch, tmp_path / "broken")


@pytest.mark.usefixtures("broken_bwrap")
def test_validate_reports_a_broken_sandbox_as_a_user_error_not_a_verdict() -> None:
    with pytest.raises(UserError) as err:
        validate_command("nim", as_json=False, **ARGS)
    assert str(err.value).startswith(MESSAGE)
    assert "no environment was judged" in str(err.value)


@pytest.mark.usefixtures("broken_bwrap")
def test_validate_json_reports_a_broken_sandbox_as_one_object(capsys) -> None:
    assert validate_command("nim", as_json=True, **ARGS) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False
    assert len(out["reasons"]) == 1 and out["reasons"][0].startswith(MESSAGE)
