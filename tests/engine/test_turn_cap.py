"""SPEC §4: the turn cap of an authored environment is min(its own max_turns, the tournament's);
it is constructed with its own default, never raised to the tournament's."""

from __future__ import annotations

import yaml
from duel_script import AUTHOR_SYSTEM_START, config

from envduels.engine.run import run_command
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-turns"


def _limited(default: str) -> str:
    return f'''
class Limited:
    def __init__(self, max_turns: int = {default}):
        self.max_turns = max_turns

    def reset(self, seed=None):
        import random
        return f"LIMIT {{self.max_turns}} lock {{random.Random(seed).randint(1, 10**9)}}", {{}}

    def step(self, action):
        if action == "\\\\boxed{{open}}":
            return "open", 1.0, True, False, {{}}
        return "shut", 0.0, False, False, {{}}

    def oracle_action(self):
        return "\\\\boxed{{open}}"
'''


def respond(model: str, messages: list[dict]) -> str:
    if messages[0]["content"].startswith(AUTHOR_SYSTEM_START):
        default = {"m-alice": "2", "m-bob": "1000000000"}[model]
        return f"```python\n{_limited(default)}```\n<hint>Say open.</hint>"
    return "\\boxed{shut}"


def test_an_authored_environment_keeps_its_own_smaller_turn_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))   # tournament.max_turns: 4
        cfg["players"] = [p for p in cfg["players"] if p["name"] in ("alice", "bob")]
        cfg["tournament"]["self_play"] = False
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        firsts = {r["messages"][1]["content"].split("Observation: ")[1].split(" lock")[0]
                  for r in server.requests if not r["messages"][0]["content"].startswith(
                      AUTHOR_SYSTEM_START) and len(r["messages"]) == 2}
    store = Store(tmp_path / "run", create=False)
    assert {e.env_id: (e.valid, e.max_turns) for e in store.environments()} == {
        "r1-alice-0": (True, 2), "r1-bob-0": (True, 10**9)}
    got = {(e.env_id, e.outcome, e.reason, e.turns) for e in store.episodes()}
    assert got == {("r1-alice-0", "failure", "turn cap 2 reached", 2),
                   ("r1-bob-0", "failure", "turn cap 4 reached", 4)}
    # each was constructed with its own default, not the tournament's 4
    assert firsts == {"LIMIT 2", "LIMIT 1000000000"}
