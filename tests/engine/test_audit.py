"""The replay audit in whole runs against the real scripted server and real sandboxes.

A solver that answers in about half a second plays a fixed pool of attack environments (see
tests/fixtures/envs/deceive_*.py) beside an honest control: every attack is caught, none of
them contributes a matched pair, and the control is untouched. A fixed pool is validated in the
run (issue 29), so the attacks validation can see (deterministic only for the public probes,
state kept across instances) are caught there, before any play; the one that needs a model's
answer time to deceive (fast-only) reaches play and is caught by replaying its episodes."""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path

import pytest
import yaml

from envduels.analysis.metrics import environment_flags
from envduels.analysis.pairs import matched_pairs
from envduels.config import load_config
from envduels.duel.faults import AUDIT_REASON
from envduels.engine.commands import run_command, status_command
from envduels.engine.progress import Progress
from envduels.engine.scheduler import Tournament, condition_order
from envduels.envs import EnvSpec, write_export
from envduels.envs._validate import probe_actions
from envduels.store.writer import RunWriter
from envduels.testing import ScriptedServer

KEY = "sk-audit-test"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
AUDITED = ("deceive_timing",)
"""Attacks only play shows: caught by the replay audit."""
VALIDATED = ("deceive_probe", "deceive_state")
"""Attacks validation shows: invalid in the run, never played."""
ATTACKS = (*AUDITED, *VALIDATED)
CONTROL = "deceive_control"
_ROOM = re.compile(r"room (\d+)")


def _pool(folder: Path, names: tuple[str, ...], seeds: int) -> Path:
    """An export of the named fixtures. Fresh random seeds per test run: the page-cache attack
    keys its state on the seed, and an earlier run on this host must not have seen it."""
    rng = random.Random()
    specs = [EnvSpec(id=name, source=(FIXTURES / f"{name}.py").read_text(), max_turns=4,
                     domain="logic", author="library", title=name,
                     hints={"hint": "The word is open, a hyphen and the room's last digit."},
                     benchmark_seeds=tuple(rng.randrange(2**62) for _ in range(seeds)))
             for name in names]
    write_export(folder, specs)
    return folder


def solver(model: str, messages: list[dict]) -> str:
    """Says the control's word only with the hint, the timing room's word always (too slowly:
    the server answers in half a second), anything to the rest."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    room = _ROOM.search(first)
    if "CONTROL" in first:
        return f"\\boxed{{open-{int(room.group(1)) % 10}}}" if first.startswith("Hint: ") else "\\boxed{closed}"
    if "TIMING" in first:
        return f"\\boxed{{go-{int(room.group(1)) % 10}}}"
    return "I say \\boxed{maybe}"


def _config(tmp_path: Path, base_url: str, pool: Path) -> Path:
    cfg = {
        "name": "audit", "seed": 3, "output_dir": str(tmp_path / "run"),
        "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                     "base_url": base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                     "roles": ["solver"], "max_retries": 1, "timeout_s": 20,
                     "max_concurrency": 8, "temperature": 0.0}],
        "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": 1,
                       "trials_per_seed": 1, "max_turns": 4, "environments": [str(pool)]},
        "sandbox": {"warm_workers": 2},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_fast_only_probe_only_and_stateful_environments_are_caught_and_give_no_pairs_the_control_is_not(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    pool = _pool(tmp_path / "pool", (*ATTACKS, CONTROL), seeds=1)
    with ScriptedServer(solver, api_key=KEY, latency_s=0.5) as server:
        assert run_command(_config(tmp_path, server.base_url, pool), unsafe_no_sandbox=False,
                           quiet=True) == 0
        calls = len(server.requests)
        asked = " ".join(str(r["messages"]) for r in server.requests)

    store = RunWriter(tmp_path / "run", create=False)
    # validation in the run: the probe-only and stateful ones are invalid, never played
    for name in VALIDATED:
        env = store.reader.environment(name)
        assert env is not None and not env.valid and "not deterministic" in env.invalid_reason
    assert "PROBE room" not in asked and "STATE room" not in asked
    caught = store.reader.nondeterministic_environments()
    assert set(caught) == set(AUDITED)
    assert all(detail.startswith("turn 1: ") for detail in caught.values()), caught
    # the audit made no model call: one call per played turn, every episode one turn long
    assert calls == sum(e.turns for e in store.reader.episodes())
    assert store.reader.audit_counts().pending == 0   # every played episode has its audit

    tables = store.reader.tables()
    eps = tables.episodes
    assert set(eps.env_id) == {*AUDITED, CONTROL}
    attacks = eps[eps.env_id.isin(AUDITED)]
    assert set(attacks.outcome) == {"incomplete"}
    assert all(r.startswith(f"{AUDIT_REASON}: ") for r in attacks.reason)
    # the episode that did not replay says which turn and field differed
    raw = {e.episode_key: e for e in store.reader.episodes()}
    assert any(raw[k].reason.startswith(f"{AUDIT_REASON}: turn 1: the ")
               for k in attacks.episode_key)
    pairs = matched_pairs(eps)
    assert set(pairs.env_id) == {CONTROL}
    assert list(zip(pairs.y0, pairs.yh, strict=True)) == [(0, 1)]

    # the flags `report --json` shows in environments[].flags (and the HTML report with them)
    flags = environment_flags(tables)
    assert {e: "nondeterministic" in f for e, f in flags.items() if e not in VALIDATED} == {
        **{a: True for a in AUDITED}, CONTROL: False}

    assert status_command(tmp_path / "run") == 0
    shown = capsys.readouterr().out
    for attack in AUDITED:
        assert attack in shown
    assert shown.count("nondeterministic:") == len(AUDITED)
    store.close()


def test_a_resumed_run_audits_episodes_a_database_from_before_audits_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    pool = _pool(tmp_path / "pool", ("deceive_timing", CONTROL), seeds=1)
    with ScriptedServer(solver, api_key=KEY, latency_s=0.5) as server:
        path = _config(tmp_path, server.base_url, pool)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        # a run database written before audits existed: no audits table, the episodes as played
        db = sqlite3.connect(tmp_path / "run" / "run.db")
        for key, outcome in db.execute("SELECT episode_key, played_outcome FROM audits "
                                       "WHERE state = 'mismatch'").fetchall():
            db.execute("UPDATE episodes SET outcome = ?, reason = 'as played' "
                       "WHERE episode_key = ?", (outcome, key))
        db.execute("DROP TABLE audits")
        db.commit()
        db.close()
        before = len(server.requests)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        assert len(server.requests) == before   # auditing costs no model call

    store = RunWriter(tmp_path / "run", create=False)
    assert store.reader.audit_counts().pending == 0
    assert set(store.reader.nondeterministic_environments()) == {"deceive_timing"}
    assert set(matched_pairs(store.reader.tables().episodes).env_id) == {CONTROL}
    store.close()


def test_the_condition_order_of_a_pair_is_drawn_per_pair_and_stable_for_a_run():
    orders = [condition_order("fp-1", "env", "carol", seed, 0) for seed in range(40)]
    assert set(orders) == {(False, True), (True, False)}
    assert orders == [condition_order("fp-1", "env", "carol", seed, 0) for seed in range(40)]
    assert orders != [condition_order("fp-2", "env", "carol", seed, 0) for seed in range(40)]


@pytest.mark.parametrize("crash", ["deceive_crash_reward", "deceive_crash_frame"])
def test_a_run_with_an_environment_that_crashes_the_parent_finishes_and_so_does_its_resume(
        tmp_path, monkeypatch, crash):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    pool = _pool(tmp_path / "pool", (crash, CONTROL), seeds=1)
    with ScriptedServer(solver, api_key=KEY) as server:
        path = _config(tmp_path, server.base_url, pool)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    store = RunWriter(tmp_path / "run", create=False)
    # validated in the run: the crash is a one-line reason, and the environment is not played
    env = store.reader.environment(crash)
    assert env is not None and not env.valid and "\n" not in env.invalid_reason
    assert "probe episode: in step (turn 1): " in env.invalid_reason
    outcomes = {(e.env_id, e.hinted): e.outcome for e in store.reader.episodes()}
    assert outcomes == {(CONTROL, False): "failure", (CONTROL, True): "success"}
    store.close()


def test_an_authored_environment_whose_reward_the_parent_cannot_take_is_invalid_and_the_run_ends(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    source = (FIXTURES / "deceive_crash_reward.py").read_text()

    def respond(model: str, messages: list[dict]) -> str:
        if model == "m-alice":
            return (f"```python\n{source}```\n<hint>Say anything.</hint>\n"
                    "<domain>logic</domain>\n<title>Crash</title>")
        return solver(model, messages)

    pool = _pool(tmp_path / "pool", (CONTROL,), seeds=1)
    with ScriptedServer(respond, api_key=KEY) as server:
        path = _config(tmp_path, server.base_url, pool)
        cfg = yaml.safe_load(path.read_text())
        cfg["players"].append({**cfg["players"][0], "name": "alice", "model": "m-alice",
                               "roles": ["author"]})
        cfg["tournament"]["author_repairs"] = 0
        path.write_text(yaml.safe_dump(cfg))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    store = RunWriter(tmp_path / "run", create=False)
    env = store.reader.environment("r1-alice-0")
    assert env is not None and not env.valid
    assert env.invalid_reason.startswith("seed ") and "probe episode: in step (turn 1): " in (
        env.invalid_reason)
    assert {e.env_id for e in store.reader.episodes()} == {CONTROL}
    store.close()


def _session(tmp_path: Path, run: str) -> Tournament:
    """A run's session as `run` builds it: its config, its store (created or reopened)."""
    cfg = load_config(_config(tmp_path, "http://127.0.0.1:9/v1", tmp_path))
    store = RunWriter(tmp_path / run)
    return Tournament(cfg, writer=store, players={}, sandboxes=None, fingerprint="fp-same-config",
                      fixed_envs=[], progress=Progress(rounds=1))


def _draws(session: Tournament) -> tuple[list[tuple[bool, bool]], list[str]]:
    orders = [session._condition_order("env", "carol", seed, 0) for seed in range(40)]
    probes = probe_actions(session._draw_salt, "sha")
    return orders, probes


def test_two_runs_of_one_config_draw_different_orders_and_probes_and_a_resume_the_same(
        tmp_path):
    """The fingerprint is a plain hash of the config, which an author can compute: salted by it
    alone, an environment could know its probes and which condition it meets first."""
    first, second = _session(tmp_path, "run-a"), _session(tmp_path, "run-b")
    drawn_a, drawn_b = _draws(first), _draws(second)
    assert drawn_a[0] != drawn_b[0] and drawn_a[1] != drawn_b[1]
    first.writer.close()
    resumed = _session(tmp_path, "run-a")
    assert _draws(resumed) == drawn_a
    secret = resumed.reader.meta("draw_secret")
    assert isinstance(secret, str) and len(secret) == 32
    assert secret not in "".join(p for p in drawn_a[1])   # the probes do not carry it
    resumed.writer.close()
    second.writer.close()


def test_a_damaged_stored_transcript_leaves_its_episode_unaudited_and_blames_no_environment(
        tmp_path, monkeypatch, caplog):
    # The resume audits what the database holds; a transcript there that is not a list of turns
    # (a damaged or edited file) once raised out of the replay and ended the session with a
    # traceback (and before issue 31 it flagged the environment nondeterministic)
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    pool = _pool(tmp_path / "pool", (CONTROL,), seeds=2)
    with ScriptedServer(solver, api_key=KEY) as server:
        path = _config(tmp_path, server.base_url, pool)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        db = sqlite3.connect(tmp_path / "run" / "run.db")
        keys = [k for (k,) in db.execute("SELECT episode_key FROM episodes ORDER BY episode_key")]
        db.execute("DELETE FROM audits")
        db.execute("UPDATE episodes SET transcript = ? WHERE episode_key = ?", ('[1, "junk"]', keys[0]))
        db.commit()
        db.close()
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 4   # errors: run again
    store = RunWriter(tmp_path / "run", create=False)
    counts = store.reader.audit_counts()
    assert (counts.passed, counts.mismatch, counts.pending) == (len(keys) - 1, 0, 1)
    assert store.reader.nondeterministic_environments() == {}
    store.close()
    assert [r.getMessage() for r in caplog.records if "not audited" in r.getMessage()] == [
        f"episode {keys[0]} not audited: its stored transcript is not a list of turns (the run "
        "database may be damaged; `envduels status` counts the pending audits)"]
