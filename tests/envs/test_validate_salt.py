"""`envduels validate` draws its probe actions with a fresh secret salt per invocation: with a
fixed one (main gave none) an author could run validate, read the drawn probes off the
reasons, and special-case them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ENVDUELS = str(Path(sys.executable).parent / "envduels")

ECHO_FIRST_ACTIONS = '''
class EchoFirstActions:
    def reset(self, seed=None):
        self.seen = []
        return "say anything", {}

    def step(self, action):
        self.seen.append(action)
        if len(self.seen) == 3:   # the verdict's reason then shows the first three probes
            raise ValueError(" | ".join(self.seen))
        return "ok", 0.0, False, False, {}
'''


def _reasons(path: Path) -> list[str]:
    run = subprocess.run([ENVDUELS, "validate", str(path), "--seeds", "1", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    return json.loads(run.stdout)["reasons"]


def test_two_validate_invocations_draw_different_probe_actions(tmp_path: Path) -> None:
    path = tmp_path / "echo_first_actions.py"
    path.write_text(ECHO_FIRST_ACTIONS)
    first, second = _reasons(path), _reasons(path)
    assert any("ValueError: \\boxed{" in reason for reason in first), first
    assert first != second
