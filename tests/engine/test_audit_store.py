"""How a replay mismatch is recorded and scored: the store, the flags and the duel."""

from __future__ import annotations

import numpy as np

from envduels.analysis.metrics import environment_flags
from envduels.analysis.pairs import matched_pairs
from envduels.analysis.ratings import duel_builder, make_design
from envduels.envs import EnvSpec
from envduels.store import AUDIT_REASON, EnvRecord, EpisodeRow, Store


def _env(env_id: str, author: str) -> EnvRecord:
    return EnvRecord(EnvSpec(env_id, "class E: pass\n", class_name="E", max_turns=4,
                             domain="logic", author=author, title=env_id, hints={"hint": "h"},
                             benchmark_seeds=(1, 2)), round=1)


def _ep(env_id: str, author: str, solver: str, seed: int, hinted: bool, outcome: str) -> EpisodeRow:
    return EpisodeRow(episode_key=f"{env_id}|{solver}|{seed}|{hinted}", env_id=env_id,
                      author=author, solver=solver, round=1, domain="logic", seed=seed, trial=0,
                      hinted=hinted, outcome=outcome, reason="as played", turns=1,
                      self_play=False, transcript=[])


def _run(tmp_path) -> Store:
    store = Store(tmp_path)
    store.set_meta("config", {"name": "audit", "players": [
        {"name": p, "provider": "openai", "model": p, "roles": ["author", "solver"]} for p in "ab"]})
    for env_id, author, solver in (("cheat", "a", "b"), ("honest", "b", "a")):
        store.put_environment(_env(env_id, author))
        for seed in (1, 2):
            # the cheat fakes lift: fails without the hint, succeeds with it
            store.put_episode(_ep(env_id, author, solver, seed, False, "failure"))
            store.put_episode(_ep(env_id, author, solver, seed, True, "success"))
    return store


def test_a_mismatch_turns_the_episode_incomplete_and_every_episode_of_its_environment_with_it(tmp_path):
    store = _run(tmp_path)
    assert store.unaudited_count() == 8
    store.put_audit("cheat|b|1|True", "cheat", passed=False,
                    detail="turn 1: the reward differs (played 1.0, replayed 0.0)")
    store.put_audit("cheat|b|1|False", "cheat", passed=True, detail="1 step(s) reproduced")
    assert store.unaudited_count() == 6
    assert store.audit_counts() == {"mismatch": 1, "passed": 1}
    raw = {e.episode_key: e for e in store.episodes()}
    assert (raw["cheat|b|1|True"].outcome, raw["cheat|b|1|True"].reason) == (
        "incomplete", f"{AUDIT_REASON}: turn 1: the reward differs (played 1.0, replayed 0.0)")
    assert raw["cheat|b|2|True"].outcome == "success"   # stored as played ...

    tables = store.tables()
    eps = tables.episodes.set_index("episode_key")
    cheat = eps[eps.env_id == "cheat"]
    assert set(cheat.outcome) == {"incomplete"}           # ... read as the author's fault
    assert all(r.startswith(AUDIT_REASON) for r in cheat.reason)
    assert set(eps[eps.env_id == "honest"].outcome) == {"success", "failure"}
    assert environment_flags(tables) == {"cheat": ["nondeterministic"], "honest": ["hint_gated"]}
    pairs = matched_pairs(tables.episodes)
    assert set(pairs.env_id) == {"honest"}

    # in the duel, each slot of the caught environment is its solver's win
    duel = duel_builder(tables, pairs, make_design(tables))
    row = duel.net[make_design(tables).env_ids.index("cheat")]
    assert row.sum() == -2 and np.count_nonzero(row) == 1
    store.close()


def test_a_store_reopened_keeps_the_audits(tmp_path):
    store = _run(tmp_path)
    store.put_audit("cheat|b|2|False", "cheat", passed=False, detail="turn 1: x")
    store.close()
    again = Store(tmp_path, create=False)
    assert again.nondeterministic_environments() == {"cheat": "turn 1: x"}
    again.close()
