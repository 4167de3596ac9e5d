"""examples/train_trl.py end to end: TRL's GRPOTrainer trains the bundled SmolLM2 for real on CPU,
rolling out library environments in the sandbox, with the hinted rescue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_trl.py"
COUNTERS = ("no_hint_success_fraction", "hinted_group_fraction", "rescued_group_fraction",
            "rescued_trainable_group_fraction", "constant_group_fraction",
            "exhausted_group_fraction")


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRL_EXPERIMENTAL_SILENCE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_two_real_grpo_steps_on_number_guess_and_nim_log_the_rescue_and_re_roll_with_the_hint(tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    proc = _run("--environments", "number_guess", "nim", "--steps", "2", "--group", "4",
                "--max-turns", "3", "--out", str(out), timeout=3500)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "rescue.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["groups"] == 2 and r["no_hint_rollouts"] == 8
        assert all(k in r for k in COUNTERS)
        assert r["hinted_rollouts"] == 4 * round(r["hinted_group_fraction"] * 2)
    # the tiny model fails these cold: some group was re-rolled with the hint
    assert sum(r["hinted_group_fraction"] * r["groups"] for r in rows) >= 1
    state = json.loads((out / "train.json").read_text())
    assert state["steps"] == 2
    assert (out / "model" / "config.json").is_file()
    assert (out / "model" / "model.safetensors").is_file()
    print(f"train_trl.py 2 steps: {wall:.0f} s wall")


@pytest.mark.parametrize("args, message", [
    (["--environments", "nim", "--steps", "0", "--group", "4", "--out", "o"], "--steps must be at least 1"),
    (["--environments", "nim", "--steps", "1", "--group", "1", "--out", "o"], "--group must be at least 2"),
    (["--environments", "no_such_env", "--steps", "1", "--group", "2", "--out", "o"], "'no_such_env' is not an environment"),
    (["--environments", "nim", "nim", "--steps", "1", "--group", "2", "--out", "o"], "environment ids repeat (nim)"),
    (["--environments", "nim", "--steps", "1", "--group", "2", "--out", "o", "--model", "x.bin"], "is not a bundled name"),
    (["--steps", "1", "--group", "2", "--out", "o"], "--environments"),
    (["--environments", "nim", "--steps", "1", "--group", "2", "--out", "f"], "is a file; give a folder"),
    (["--environments", "nim", "--steps", "1", "--group", "2", "--out", "o", "--curriculum",
      "learnability"], "no environment has a measured learnability"),
])
def test_bad_arguments_are_one_line_errors_with_exit_2(tmp_path, args, message):
    (tmp_path / "f").write_text("not a folder")
    proc = _run(*[str(tmp_path / a) if a in ("o", "f") else a for a in args], timeout=300)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert message in lines[-1]
    assert "Traceback" not in proc.stderr
