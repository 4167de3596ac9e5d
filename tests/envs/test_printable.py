"""Environment text printed by `validate` and `library` never carries a terminal escape sequence."""

import json
import subprocess

from envduels._text import printable
from envduels.envs import EnvSpec, commands

from .test_cli import ENVDUELS

OSC52 = "\x1b]52;c;aGFja2Vk\x07"  # writes the clipboard
CLEAR = "\x1b[2J"                  # clears the screen
CSI_C1 = "\x9b2J"                  # the same, as one C1 code point


def test_printable_removes_c0_c1_and_del_and_keeps_newline_and_tab():
    assert printable(f"a{OSC52}b{CLEAR}c{CSI_C1}d\x7fe\r\nf\tg\x00") == "a]52;c;aGFja2Vkb[2Jc2Jde\nf\tg"


def test_printable_keeps_ordinary_text_and_replaces_lone_surrogates():
    ordinary = "déjà vu 🎲 — Ω\n\tend"
    assert printable(ordinary) == ordinary
    assert printable("x\ud800y") == "x\ufffdy"


HOSTILE_ENV = f'''
class Hostile:
    def reset(self, seed=None):
        return "start", {{}}

    def step(self, action):
        raise ValueError({OSC52 + CLEAR + "boom"!r})
'''


def test_validate_strips_escape_sequences_from_reasons_and_ids(tmp_path):
    path = tmp_path / f"evil{CLEAR}.py"
    path.write_text(HOSTILE_ENV)
    run = subprocess.run([ENVDUELS, "validate", str(path), "--seeds", "1"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1
    assert "\x1b" not in run.stdout and "\x07" not in run.stdout
    first, reason = run.stdout.splitlines()
    assert first == "INVALID  evil[2J  (class Hostile, oracle skipped, 1 seed, no hint supplied)"
    assert reason.startswith("  - seed ")
    assert "in step (turn 1): step raised ValueError: ]52;c;aGFja2Vk[2Jboom" in reason
    as_json = subprocess.run([ENVDUELS, "validate", str(path), "--seeds", "1", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert "\x1b" not in as_json.stdout  # JSON escapes it as \u001b, and keeps it
    assert OSC52 in json.loads(as_json.stdout)["reasons"][0]


def test_library_show_and_list_strip_escape_sequences(monkeypatch, capsys):
    spec = EnvSpec(f"evil{CLEAR}", f"# {OSC52}\nclass E:\n    pass\n", class_name="E",
                   title=f"T{OSC52}", hints={"hint": f"h{CLEAR}"},
                   metadata={"description": f"d{CSI_C1}", "difficulty": "easy"})
    monkeypatch.setattr(commands, "library_env", lambda name: spec)
    monkeypatch.setattr(commands, "library_names", lambda: ["evil"])
    assert commands.library_show_command("evil") == 0
    assert commands.library_list_command() == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\x9b"):
        assert raw not in out
    assert "T]52;c;aGFja2Vk" in out and "h[2J" in out and "d2J" in out and "evil[2J" in out
