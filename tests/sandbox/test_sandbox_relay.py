"""A timing verdict relayed from a play to its replay through a host-wide kernel counter
(issue 19, attack 4), played in a real tournament against the scripted server.

The solver answers the hinted first turn later (its prompt is longer). Each attack wins slow
answers, loses fast ones, and leaves a mark for the replay in a counter every sandbox shares
(`memfd_create` inode numbers; autogroup ids): the replay, answered at once, reads "my play
won" and wins too. On main both scored a lift of 0.5 with no flag and passed the audit. Now the counters
are refused (and the audit runs later, shuffled), so the replay disagrees: flagged
`nondeterministic`, or no lift above 0.25. The honest control keeps its lift and no flag."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
import yaml

from envduels.analysis.metrics import environment_flags
from envduels.analysis.pairs import matched_pairs
from envduels.engine.run import run_command
from envduels.envs import EnvSpec, write_export
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-relay-test"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs"
ATTACKS = ("relay_memfd", "relay_autogroup")
CONTROL = "relay_control"
HINTED_S, UNHINTED_S = 0.9, 0.3   # the relays call an answer after 0.5 s "hinted"


def solver(model: str, messages: list[dict]) -> str:
    first = next(m["content"] for m in messages if m["role"] == "user")
    hinted = first.startswith("Hint: ")
    time.sleep(HINTED_S if hinted else UNHINTED_S)   # one call at a time (max_concurrency 1)
    room = re.search(r"CONTROL room (\d+)", first)
    if room and (hinted or int(room.group(1)) % 2 == 0):   # unhinted, it sees even rooms
        return f"\\boxed{{{sum(int(d) for d in room.group(1))}}}"
    return "\\boxed{0}" if room else "I say \\boxed{word}"


def _control_seeds() -> tuple[int, ...]:
    """Two seeds of even rooms and two of odd ones: the control's lift is 0.5, and it wins
    half its unhinted plays (so no flag for a hint that is the only way in)."""
    even = [s for s in range(100) if random.Random(s).randint(10**5, 10**6 - 1) % 2 == 0]
    odd = [s for s in range(100) if s not in even]
    return (*even[:2], *odd[:2])


def _lift(pairs, env_id: str) -> float:
    mine = pairs[pairs.env_id == env_id]
    assert len(mine) == 4, mine
    return float((mine.yh - mine.y0).mean())


@pytest.mark.slow
def test_a_timing_verdict_relayed_through_a_kernel_counter_is_caught_and_the_control_keeps_its_lift(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    hints = {"relay_control": "Add up the digits of the room number.",
             "relay_memfd": "Take your time.", "relay_autogroup": "Take your time."}
    write_export(tmp_path / "pool", [
        EnvSpec(id=name, source=(FIXTURES / f"{name}.py").read_text(), max_turns=4,
                domain="logic", author="library", title=name, hints={"hint": hints[name]},
                benchmark_seeds=_control_seeds() if name == CONTROL else (0, 1, 2, 3))
        for name in (*ATTACKS, CONTROL)])
    with ScriptedServer(solver, api_key=KEY) as server:
        cfg = {
            "name": "relay", "seed": 5, "output_dir": str(tmp_path / "run"),
            "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                         "base_url": server.base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                         "roles": ["solver"], "max_retries": 1, "timeout_s": 20,
                         "max_concurrency": 1, "temperature": 0.0}],
            "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": 4,
                           "trials_per_seed": 1, "max_turns": 4,
                           # a pool is validated in the run (issue 29); these have no oracle
                           "require_oracle": False,
                           "environments": [str(tmp_path / "pool")]},
            "sandbox": {"warm_workers": 2},
        }
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
        assert run_command(tmp_path / "run.yaml", unsafe_no_sandbox=False, quiet=True) == 0

    store = Store(tmp_path / "run", create=False)
    tables = store.tables()
    flags = environment_flags(tables)
    pairs = matched_pairs(tables.episodes)
    caught = store.nondeterministic_environments()
    store.close()
    for attack in ATTACKS:
        if "nondeterministic" not in flags[attack]:
            assert _lift(pairs, attack) <= 0.25, (attack, flags, caught)
    assert not flags[CONTROL], flags
    assert _lift(pairs, CONTROL) == 0.5
