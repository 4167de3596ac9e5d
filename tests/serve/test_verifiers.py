"""verifiers (prime-rl's environments) plays `envduels serve` through its own OpenEnv taskset,
`vf-eval` and all, and scores the duel's reward.

verifiers 0.4.0 cannot share our virtual environment: it pins `mcp==2.0.0`, while OpenEnv 0.10's
server needs `fastmcp<4`, which needs `mcp<2`. So this test builds verifiers its own venv (cached
under ~/.cache/envduels/venvs, about 160 MB): our venv's packages on its path after its own, so
that pip installs only what verifiers needs and ours cannot give (about 40 packages, among them
`openenv` 0.4.1 as its client). The model is the scripted OpenAI-compatible server
(`envduels.testing`), bisecting number_guess's range; verifiers' own chat harness drives it as a
subprocess (its `uv` and caches go into the venv's folder, never the user's home).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from envduels.serve.client import DuelClient
from envduels.testing import ScriptedServer

pytest.importorskip("openenv.core", reason="the serve extra is not installed: pip install 'envduels[serve]'")

VERIFIERS = "verifiers[openenv]==0.4.0"
SEED = 2   # number_guess picks 12 of 1..100: bisection guesses 50, 25, then wins with 12


def _verifiers_venv() -> Path:
    """A venv with `VERIFIERS` layered over ours, built once per (verifiers, Python, our venv)."""
    ours = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{VERIFIERS}|{sys.version}|{ours}".encode()).hexdigest()[:12]
    venv = Path.home() / ".cache" / "envduels" / "venvs" / f"verifiers-0.4.0-{key}"
    if (venv / "ready").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)   # an attempt that did not finish
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "envduels-overlay.pth").write_text(ours + "\n")   # after the venv's own packages
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", VERIFIERS, "uv"],
                         capture_output=True, text=True, timeout=1200)
    if pip.returncode != 0:
        last = (pip.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot install {VERIFIERS} from the package index: {last}")
    (venv / "ready").write_text(VERIFIERS + "\n")   # last: a venv without it is rebuilt
    return venv
    building = venv.with_name(f"{venv.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, timeout=300)
    site = next((building / "lib").glob("python*/site-packages"))
    (site / "envduels-overlay.pth").write_text(ours + "\n")   # after the venv's own packages
    pip = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", VERIFIERS, "uv"],
                         capture_output=True, text=True, timeout=1200)
    if pip.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        last = (pip.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot install {VERIFIERS} from the package index: {last}")
    # a venv's scripts name their interpreter by path: build in place of the final name
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--upgrade", str(building)], check=True,
                   timeout=300)
    building.rename(venv)
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(building).encode() in text:
                script.write_bytes(text.replace(str(building).encode(), str(venv).encode()))
    (venv / "ready").write_text(VERIFIERS + "\n")
    return venv


def _bisect(model: str, messages: list[dict]) -> str:
    """A player that bisects number_guess's range from the observations verifiers shows it."""
    low = high = None
    for message in messages:
        if message["role"] != "user":
            continue
        try:
            text = json.loads(message["content"])["observation"]["text"]
        except (ValueError, KeyError, TypeError):
            text = str(message["content"])
        if found := re.search(r"from 1 to (\d+)", text):
            low, high = 1, int(found.group(1))
        if found := re.search(r"(\d+) is wrong: the number is (higher|lower)", text):
            guess = int(found.group(1))
            low, high = (guess + 1, high) if found.group(2) == "higher" else (low, guess - 1)
    return "no range yet" if low is None or high is None else f"I guess \\boxed{{{(low + high) // 2}}}"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_verifiers_openenv_taskset_plays_the_duel_and_scores_its_reward(server, tmp_path):
    venv = _verifiers_venv()
    home = venv / "home"   # verifiers' caches and its harness's uv: never the user's home
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if "PRIME" not in k and "API_KEY" not in k}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    with ScriptedServer(_bisect) as llm:
        (tmp_path / "eval.toml").write_text(f'''
model = "scripted"
push = false
output_dir = "{tmp_path / 'outputs'}"
max_concurrent = 2

[client]
base_url = "{llm.base_url}"
api_key_var = "SCRIPTED_KEY"

[env.taskset]
id = "openenv"
base_url = "{server.url}"
resets = [{{env_id = "number_guess", seed = {SEED}, hint = 0}},
          {{env_id = "number_guess", seed = {SEED}, hint = 0, max_turns = 2}}]

[env.player.runtime]
type = "subprocess"

[env.player.harness]
id = "null"
''')
        done = subprocess.run([str(venv / "bin" / "vf-eval"), "@", str(tmp_path / "eval.toml"),
                               "--no-rich"], capture_output=True, text=True, timeout=1800,
                              env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    traces = [json.loads(line) for path in (tmp_path / "outputs").glob("*/traces.jsonl")
              for line in path.read_text().splitlines()]
    played = {t["task"]["data"]["idx"]: t["traces"][0] for t in traces}
    assert sorted(played) == [0, 1] and all(t["ok"] and not t["errors"] for t in played.values())
    won, capped = played[0], played[1]

    def turns(trace: dict, role: str) -> list[str]:
        return [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == role]

    replies = turns(won, "assistant")
    shown = [json.loads(t)["observation"]["text"] for t in turns(won, "user")]
    # the same replies through envduels' own client: the same turns, and the duel's verdict
    with DuelClient(server.url) as duel:
        expected = [duel.reset(env_id="number_guess", seed=SEED)]
        for reply in replies:
            text = duel.play(reply)
            if not duel.done:
                expected.append(text)
        assert duel.success and duel.get_reward() == 1.0
    assert shown == expected and len(replies) == 3
    assert won["rewards"]["openenv_reward"]["score"] == 1.0
    # max_turns=2 lowers the cap: two guesses, no win, the duel's reward 0
    assert len(turns(capped, "assistant")) == 2
    assert capped["rewards"]["openenv_reward"]["score"] == 0.0
