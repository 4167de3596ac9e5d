"""SPEC §4: the turn cap of an authored environment is min(its own max_turns, the tournament's);
it is constructed with its own default, never raised to the tournament's."""

from __future__ import annotations

import pytest
import yaml
from duel_script import AUTHOR_SYSTEM_START, config

from envduels.engine.commands import run_command
from envduels.store import RunReader
from envduels.store.writer import RunWriter
from envduels.testing import ScriptedServer

KEY = "sk-turns"


def _limited(default: str) -> str:
    return f'''
class Limited:
    def __init__(self, max_turns: int = {default}):
        self.max_turns = max_turns

    def reset(self, seed=None):
        import random
        self.lock = random.Random(seed).randint(1, 10**9)
        return f"LIMIT {{self.max_turns}} lock {{self.lock}}", {{}}

    def step(self, action):
        # the key is the lock's number plus one: no policy that copies or echoes finds it
        if action == "\\\\boxed{{%d}}" % (self.lock + 1):
            return "open", 1.0, True, False, {{}}
        return "shut", 0.0, False, False, {{}}

    def oracle_action(self):
        return "\\\\boxed{{%d}}" % (self.lock + 1)
'''


def respond(model: str, messages: list[dict]) -> str:
    if messages[0]["content"].startswith(AUTHOR_SYSTEM_START):
        default = {"m-alice": "2", "m-bob": "1000000000"}[model]
        return f"```python\n{_limited(default)}```\n<hint>Add one to the lock number.</hint>"
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
    store = RunReader(tmp_path / "run")
    assert {e.env_id: (e.valid, e.max_turns) for e in store.environments()} == {
        "r1-alice-0": (True, 2), "r1-bob-0": (True, 10**9)}
    got = {(e.env_id, e.outcome, e.reason, e.turns) for e in store.episodes()}
    assert got == {("r1-alice-0", "failure", "turn cap 2 reached", 2),
                   ("r1-bob-0", "failure", "turn cap 4 reached", 4)}
    # each was constructed with its own default, not the tournament's 4
    assert firsts == {"LIMIT 2", "LIMIT 1000000000"}


# -- one rule, every caller -------------------------------------------------------------------

STUCK_SOURCE = '''
class Stuck:
    def __init__(self, max_turns: int = 20):
        self.max_turns = max_turns

    def reset(self, seed=None):
        import random
        return f"STUCK {random.Random(seed).randint(1, 10**9)}: nothing opens", {}

    def step(self, action):
        return "still stuck", 0.0, False, False, {}

    def oracle_action(self):
        return "\\\\boxed{push}"
'''

# (the environment's own max_turns, the limit the caller is given, the cap SPEC §4 says)
CASES = [(8, 3, 3), (2, 24, 2), (5, 5, 5)]


def _stuck(own: int):
    from envduels.envs import EnvSpec

    return EnvSpec(id="stuck", source=STUCK_SOURCE, class_name="Stuck", max_turns=own,
                   hints={"hint": "Nothing works."}, benchmark_seeds=(11, 12))


def _cfg(limit: int, base_url: str = "http://127.0.0.1:9/v1") -> dict:
    return {"name": "caps", "players": [
        {"name": "s", "provider": "openai", "model": "m-s", "roles": ["solver"], "base_url": base_url,
         "api_key_env": "ENVDUELS_TEST_KEY", "max_retries": 0}],
        "tournament": {"environments": ["stuck"], "max_turns": limit}}


def test_the_rule_lowers_an_environment_s_own_limit_and_never_raises_it():
    from envduels.engine.solving import turn_cap as episode_rule
    from envduels.envs import turn_cap

    assert episode_rule is turn_cap   # the engine asks the one rule, it keeps no copy
    assert [turn_cap(own, limit) for own, limit, _ in CASES] == [cap for *_, cap in CASES]
    assert turn_cap(7) == 7 and turn_cap(0, 5) == 1


@pytest.mark.parametrize(("own", "limit", "cap"), CASES)
def test_episodes_plan_estimate_and_gym_give_one_environment_the_same_cap(tmp_path, own, limit, cap):
    from envduels.config import parse_config
    from envduels.engine.estimate import _plan
    from envduels.engine.progress import Progress
    from envduels.engine.scheduler import Tournament, fixed_env_record
    from envduels.gym import EnvDuelsGymEnv
    from envduels.report.plan import design_cost

    spec = _stuck(own)
    cfg = parse_config(_cfg(limit))
    tournament = Tournament(cfg, writer=RunWriter(tmp_path), players={}, sandboxes=None, fingerprint="fp",
                            fixed_envs=[spec], progress=Progress(rounds=1))
    episodes = tournament._tasks([fixed_env_record(spec, run_seed=cfg.seed, seeds_per_env=2)])
    assert {t.max_turns for t in episodes} == {cap}
    design = design_cost(cfg, [spec])["players"]["s"]
    assert design["solving_calls_max"] == design["episodes"] * cap
    assert {turns for _, turns in _plan(cfg, [spec], None).episodes["s"]} == {cap}   # the estimate
    assert EnvDuelsGymEnv(spec, max_turns=limit).max_turns == cap
    assert EnvDuelsGymEnv(spec).max_turns == own   # no limit given: the environment's own


def test_validation_and_play_stop_at_the_same_cap_as_the_episodes(tmp_path, monkeypatch, capsys):
    """The sandbox plays both: validation's oracle gets the cap's turns, `play` the solver."""
    import asyncio

    from envduels.engine.commands import play_command
    from envduels.envs import validate_env
    from envduels.sandbox import EnvPool

    own, limit, cap = CASES[0]
    spec = _stuck(own)

    async def verdict():
        async with EnvPool(warm=0) as pool:
            return await validate_env(spec, pool, seeds=[11], require_oracle=True, max_turns=limit)

    reasons = asyncio.run(verdict()).reasons
    assert any(f"no win within the {cap}-turn cap" in r for r in reasons), reasons

    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    path = tmp_path / "stuck.py"
    path.write_text(STUCK_SOURCE.replace("max_turns: int = 20", f"max_turns: int = {own}"))
    with ScriptedServer(lambda model, messages: "\\boxed{push}", api_key=KEY) as server:
        config = tmp_path / "caps.yaml"
        config.write_text(yaml.safe_dump(_cfg(limit, server.base_url)))
        capsys.readouterr()
        assert play_command(str(path), config=config, player="s", human=False, hint=False,
                            seed=11, unsafe_no_sandbox=False) == 1
        solver_turns = len(server.requests)
    assert f"turn cap {cap} reached" in capsys.readouterr().out
    assert solver_turns == cap
