"""How a replay mismatch is recorded and scored: the store, the flags and the duel."""

from __future__ import annotations

import sqlite3

import numpy as np

from envduels.analysis import analyze
from envduels.analysis.metrics import environment_flags
from envduels.analysis.pairs import matched_pairs
from envduels.analysis.ratings import duel_builder, make_strata
from envduels.duel.faults import AUDIT_REASON
from envduels.duel.outcomes import AuditState, Flag
from envduels.envs import EnvSpec
from envduels.store import AUDIT_COLUMNS, AuditCounts, EnvRecord, EpisodeRow, RunReader
from envduels.store.writer import RunWriter


def _env(env_id: str, author: str) -> EnvRecord:
    return EnvRecord(EnvSpec(env_id, "class E: pass\n", class_name="E", max_turns=4,
                             domain="logic", author=author, title=env_id, hints={"hint": "h"},
                             benchmark_seeds=(1, 2)), round=1)


def _ep(env_id: str, author: str, solver: str, seed: int, hinted: bool, outcome: str) -> EpisodeRow:
    return EpisodeRow(episode_key=f"{env_id}|{solver}|{seed}|{hinted}", env_id=env_id,
                      author=author, solver=solver, round=1, domain="logic", seed=seed, trial=0,
                      hinted=hinted, outcome=outcome, reason="as played", turns=1,
                      self_play=False, transcript=[])


def _run(tmp_path) -> RunWriter:
    store = RunWriter(tmp_path)
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
    assert store.reader.audit_counts().pending == 8
    store.put_audit("cheat|b|1|True", "cheat", passed=False,
                    detail="turn 1: the reward differs (played 1.0, replayed 0.0)")
    store.put_audit("cheat|b|1|False", "cheat", passed=True, detail="1 step(s) reproduced")
    assert store.reader.audit_counts() == AuditCounts(passed=1, mismatch=1, pending=6)
    raw = {e.episode_key: e for e in store.reader.episodes()}
    assert (raw["cheat|b|1|True"].outcome, raw["cheat|b|1|True"].reason) == (
        "incomplete", f"{AUDIT_REASON}: turn 1: the reward differs (played 1.0, replayed 0.0)")
    assert raw["cheat|b|2|True"].outcome == "success"   # stored as played ...

    tables = store.reader.tables()
    eps = tables.episodes.set_index("episode_key")
    cheat = eps[eps.env_id == "cheat"]
    assert set(cheat.outcome) == {"incomplete"}           # ... read as the author's fault
    assert all(r.startswith(AUDIT_REASON) for r in cheat.reason)
    assert set(eps[eps.env_id == "honest"].outcome) == {"success", "failure"}
    assert environment_flags(tables) == {"cheat": ["nondeterministic"], "honest": ["hint_gated"]}
    pairs = matched_pairs(tables.episodes)
    assert set(pairs.env_id) == {"honest"}

    # in the duel, each slot of the caught environment is its solver's win
    duel = duel_builder(tables, pairs, make_strata(tables))
    row = duel.net[make_strata(tables).env_ids.index("cheat")]
    assert row.sum() == -2 and np.count_nonzero(row) == 1
    store.close()


def test_a_store_reopened_keeps_the_audits(tmp_path):
    store = _run(tmp_path)
    store.put_audit("cheat|b|2|False", "cheat", passed=False, detail="turn 1: x")
    store.close()
    again = RunReader(tmp_path)
    assert again.nondeterministic_environments() == {"cheat": "turn 1: x"}
    again.close()


def test_the_flag_is_read_from_the_audits_table_never_from_a_reason_prefix(tmp_path):
    store = _run(tmp_path)
    # an episode whose reason merely starts like the audit's, with no audit row: no flag
    store.put_episode(EpisodeRow(**{**_ep("honest", "b", "a", 1, False, "failure").__dict__,
                                    "outcome": "incomplete",
                                    "reason": f"{AUDIT_REASON}: written by hand"}))
    tables = store.reader.tables()
    assert list(tables.audits.columns) == AUDIT_COLUMNS and tables.audits.empty
    assert environment_flags(tables) == {"cheat": [Flag.HINT_GATED], "honest": [Flag.HINT_GATED]}
    # the audit row alone (its state a typed fact) flags the environment, whatever the reasons say
    store.put_audit("cheat|b|1|True", "cheat", passed=False, detail="turn 1: x")
    tables = store.reader.tables()
    assert list(tables.audits.state) == [AuditState.MISMATCH]
    flags = environment_flags(tables.__class__(tables.players, tables.environments,
                                               tables.episodes.assign(reason="as played"),
                                               tables.audits))
    assert flags["cheat"] == [Flag.NONDETERMINISTIC]
    store.close()


def test_a_database_written_by_the_main_of_before_the_typed_audit_reads_the_same(tmp_path):
    """Main before issue 21 wrote the same audits table and rewrote the mismatching episode in
    the same transaction; written here by SQL, exactly as it did, it reads as one written now."""
    now = _run(tmp_path / "now")
    now.put_audit("cheat|b|1|True", "cheat", passed=False, detail="turn 1: x")
    now.put_audit("honest|a|1|True", "honest", passed=True, detail="1 step(s) reproduced")
    old = _run(tmp_path / "old")
    old.close()
    db = sqlite3.connect(tmp_path / "old" / "run.db")
    with db:
        db.execute("UPDATE episodes SET outcome = 'incomplete', reason = 'replay audit: turn 1: x'"
                   " WHERE episode_key = 'cheat|b|1|True'")
        db.executemany("INSERT INTO audits VALUES (?, ?, ?, ?, ?, ?)", [
            ("cheat|b|1|True", "cheat", "mismatch", "turn 1: x", "success", 1.0),
            ("honest|a|1|True", "honest", "passed", "1 step(s) reproduced", "success", 2.0)])
    db.close()
    old = RunReader(tmp_path / "old")
    a, b = now.reader.tables(), old.tables()
    for frame in ("players", "environments", "episodes", "audits"):
        assert getattr(a, frame).equals(getattr(b, frame)), frame
    report = [analyze(t, bootstrap=0, convergence=False).json for t in (a, b)]
    assert report[0] == report[1]
    assert report[1]["environments"] and environment_flags(b)["cheat"] == [Flag.NONDETERMINISTIC]
    now.close()
    old.close()
