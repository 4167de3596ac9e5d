"""`envduels play --human` at a real terminal (a pty): Ctrl-C ends it at once with exit 130,
Ctrl-D ends the episode with a plain message, and an environment's text cannot restyle or
forge the transcript (issue 15, defects 2 and 9 "Terminal")."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import envduels
from envduels.engine.commands import play_command

SCRIPT = Path(sys.executable).parent / "envduels"
SRC = str(Path(envduels.__file__).resolve().parents[1])


def _spawn_play() -> tuple[int, int]:
    """`envduels play subtraction_game --human` on a new pty; returns (pid, master fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        os.environ["PYTHONPATH"] = SRC
        os.execv(str(SCRIPT), [str(SCRIPT), "play", "subtraction_game", "--human"])
    return pid, fd


def _read_until(fd: int, needle: bytes, timeout_s: float = 60.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} in {seen[-400:]!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def _wait(pid: int, fd: int, timeout_s: float) -> tuple[int | None, bytes]:
    """Exit code within `timeout_s` (None if still running: then it is killed), and output."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), out
        if select.select([fd], [], [], 0.05)[0]:
            with contextlib.suppress(OSError):
                out += os.read(fd, 4096)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, out


def test_ctrl_c_at_the_human_prompt_ends_play_within_a_second_with_exit_130():
    pid, fd = _spawn_play()
    try:
        _read_until(fd, b"your action> ")
        time.sleep(0.2)
        os.write(fd, b"\x03")       # the terminal's Ctrl-C: SIGINT to the foreground group
        code, out = _wait(pid, fd, timeout_s=1.0)
    finally:
        os.close(fd)
    assert code == 130, out
    assert b"Traceback" not in out


def test_ctrl_d_at_the_human_prompt_ends_the_episode_with_a_plain_message():
    pid, fd = _spawn_play()
    try:
        _read_until(fd, b"your action> ")
        os.write(fd, b"\x04")       # Ctrl-D on an empty line: end of input
        code, out = _wait(pid, fd, timeout_s=30.0)
    finally:
        os.close(fd)
    assert code == 1, out
    assert b"you closed standard input; episode stopped" in out
    assert b"provider error" not in out and b"Traceback" not in out


FORGER = '''
class Forger:
    """Observations that try to restyle and forge the transcript."""

    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return ("[bold red]solver ->[/bold red] \\\\boxed{win} :smile: "
                "evil\\u202etxt.exe zero\\u200bwidth [link=http://x]click[/link]"), {}

    def step(self, action):
        return "[green]success: terminated with reward 1[/green]", 0.0, True, False, {}
'''


def test_environment_text_is_printed_literally_without_markup_emoji_or_format_characters(
        tmp_path, monkeypatch, capsys):
    env = tmp_path / "forger.py"
    env.write_text(FORGER)
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\n"))
    play_command(str(env), config=None, player=None, human=True, hint=False, seed=0,
                 unsafe_no_sandbox=False)
    out = capsys.readouterr().out
    assert "[bold red]solver ->[/bold red] \\boxed{win} :smile:" in out
    assert "[link=http://x]click[/link]" in out
    assert "\U0001f604" not in out                      # :smile: stays text
    assert "\u202e" not in out and "\u200b" not in out
    assert "eviltxt.exe zerowidth" in out
