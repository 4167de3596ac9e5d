"""What the viewer reads: the cheap analysis tables agree with the full ones, and the
incremental caches agree with the database after every kind of write."""

from __future__ import annotations

from dataclasses import replace

import pytest
from run_records import call

from envduels.analysis import compute_ratings, environment_flags, matched_pairs, simulate_tournament
from envduels.envs import EnvSpec
from envduels.store import EnvRecord, EpisodeRow
from envduels.store.writer import RunWriter
from envduels.view._reader import ViewedRun


def engine_transcript(outcome: str, hinted: bool, action: str) -> list[dict]:
    """Shaped as the engine logs an episode (see engine/solving.py)."""
    t = [{"role": "system", "content": "rules"},
         {"role": "user", "content": ("Hint: go north\n\n" if hinted else "") + "Observation: a maze"},
         {"role": "assistant", "content": f"I go \\boxed{{{action}}}", "turn": 1}]
    if outcome in ("success", "failure"):
        t.append({"role": "env", "action": f"\\boxed{{{action}}}", "reward": float(outcome == "success"),
                  "terminated": True, "truncated": False, "content": "done"})
    t.append({"role": "outcome", "content": outcome, "outcome": outcome})
    return t


@pytest.fixture()
def run(tmp_path):
    sim = simulate_tournament(players=4, envs_per_author=2, rounds=1, seeds=3, seed=3,
                              p_incomplete=0.05, p_error=0.05, transcripts=False)
    t = sim.tables
    store = RunWriter(tmp_path)
    store.set_meta("config", {"name": "r", "players": [
        {"name": p, "provider": "openai", "model": p, "roles": ["author", "solver"]}
        for p in t.players["name"]]})
    first = t.environments["env_id"].iloc[0]
    for i, e in enumerate(t.environments.to_dict("records")):
        store.put_environment(EnvRecord(EnvSpec(
            e["env_id"], "x", class_name="E", max_turns=4, domain=e["domain"], author=e["author"],
            title=e["title"], hints={"hint": "go north" if e["env_id"] == first else e["hint"]},
            benchmark_seeds=tuple(e["benchmark_seeds"])),
            round=1, slot=i, valid=bool(e["valid"]), invalid_reason=e["invalid_reason"]))
    # written in no particular order, as a concurrent tournament finishes them
    for ep in t.episodes.sample(frac=1.0, random_state=5).to_dict("records"):
        action = "north" if ep["env_id"] == first else f"move {ep['seed'] % 3}"
        store.put_episode(EpisodeRow(
            episode_key=ep["episode_key"], env_id=ep["env_id"], author=ep["author"],
            solver=ep["solver"], round=1, domain=ep["domain"], seed=int(ep["seed"]),
            trial=int(ep["trial"]), hinted=bool(ep["hinted"]), outcome=ep["outcome"],
            reason=ep["reason"] or "", turns=1, self_play=bool(ep["self_play"]),
            transcript=engine_transcript(ep["outcome"], bool(ep["hinted"]), action)))
    yield store, first
    store.close()


def test_summary_tables_give_the_same_flags_pairs_and_ratings_as_the_full_tables(run):
    store, leaky = run
    full, summary = store.reader.tables(), store.reader.tables(transcripts="hinted wins")
    flags = environment_flags(full)
    assert "hint_leak" in flags[leaky]          # the comparison below is not vacuous
    assert environment_flags(summary) == flags
    assert matched_pairs(summary.episodes).equals(matched_pairs(full.episodes))
    pairs = matched_pairs(full.episodes)
    a = compute_ratings(full, pairs, bootstrap=20)
    b = compute_ratings(summary, pairs, bootstrap=20)
    assert {k: a[k].rows for k in a} == {k: b[k].rows for k in b}
    assert summary.players.equals(full.players) and summary.environments.equals(full.environments)
    cols = [c for c in full.episodes.columns if c != "transcript"]
    assert summary.episodes[cols].equals(full.episodes[cols])   # the same rows in the same order


def test_the_index_follows_a_retried_error_and_new_episodes(run):
    store, _ = run
    reader = ViewedRun(store.run_dir)
    before = reader.progress()
    ep = store.reader.episode(store.reader.episode_index()[0]["episode_key"])
    store.put_episode(replace(ep, episode_key="new", outcome="error", reason="provider error"))
    mid = reader.progress()
    assert mid["outcomes"]["error"] == before["outcomes"]["error"] + 1
    assert reader.snapshot().latest[0]["episode_key"] == "new"
    store.put_episode(replace(ep, episode_key="new", outcome="success", reason="won"))
    after = reader.progress()
    assert after["outcomes"]["error"] == before["outcomes"]["error"]
    assert after["outcomes"]["success"] == before["outcomes"]["success"] + 1
    assert after["episodes_done"] == before["episodes_done"] + 1
    mine = [e for e in reader.episodes_of(env_id=ep.env_id) if e["episode_key"] == "new"]
    assert [e["outcome"] for e in mine] == ["success"]
    assert [e["episode_key"] for e in reader.episodes_of()] == [e["episode_key"] for e in store.reader.episode_index()]
    reader.close()


def test_usage_added_up_in_windows_equals_the_whole(run):
    store, _ = run
    reader = ViewedRun(store.run_dir)
    store.put("a", call("m00", "solver", input_tokens=10, output_tokens=2, cost_usd=0.5,
                        retries=2))
    assert reader.usage()[0]["calls"] == 1
    store.put("b", call("m00", "solver", input_tokens=5, output_tokens=1, cost_usd=0.25,
                        retries=1))
    store.put("c", call("m01", "author", input_tokens=7, output_tokens=3, cost_usd=0.125))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "last_rowid"} for r in rows]  # noqa: E731
    assert strip(reader.usage()) == strip(store.reader.usage_by_player_role()) == [
        {"player": "m00", "role": "solver", "calls": 2, "input_tokens": 15, "output_tokens": 3,
         "cost_usd": 0.75, "retries": 3},
        {"player": "m01", "role": "author", "calls": 1, "input_tokens": 7, "output_tokens": 3,
         "cost_usd": 0.125, "retries": 0}]
    assert reader.progress()["calls"] == 3 and reader.progress()["tokens"] == 28
    reader.close()


def test_the_analysis_goes_on_in_process_when_its_worker_dies(run):
    import os
    import signal

    from envduels.view._reader import analysis_pool

    store, leaky = run
    pool = analysis_pool()
    worker = pool.submit(os.getpid).result()
    os.kill(worker, signal.SIGKILL)   # as the OOM killer would
    reader = ViewedRun(store.run_dir, bootstrap=20, pool=pool)
    a = reader.analysis()
    assert not a.pending and "hint_leak" in a.envs[leaky]["flags"] and reader.pool is None
    reader.close()
    pool.shutdown(wait=False)


def test_an_environment_the_audit_caught_reads_alike_in_the_summary_and_the_full_tables(run):
    store, _ = run
    eps = store.reader.episodes()
    caught = next(e for e in eps if e.outcome in ("success", "failure"))
    store.put_audit(caught.episode_key, caught.env_id, passed=False, detail="turn 1 differs")
    full, summary = store.reader.tables(), store.reader.tables(transcripts="hinted wins")
    mine = full.episodes[full.episodes.env_id == caught.env_id]
    assert set(mine.outcome) <= {"incomplete", "error"}     # every episode: the author's fault
    cols = [c for c in full.episodes.columns if c != "transcript"]
    assert summary.episodes[cols].equals(full.episodes[cols])


def test_a_failed_first_analysis_is_kept_and_not_recomputed_for_every_page(run, monkeypatch):
    """Every page asking for a failed first analysis started it again (seconds of CPU each, a
    traceback each, and a page waiting forever); it now reads as a one-line error until the
    run changes."""
    import envduels.view._reader as reader_module

    store, _ = run
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr(reader_module, "analyse", broken)
    reader = ViewedRun(store.run_dir, bootstrap=20)
    try:
        first = reader.analysis()
        assert (first.pending, first.error, first.ratings["solver"]) == (
            False, "ValueError: boom second line", [])
        for _ in range(5):
            assert reader.analysis(wait=False) is first and reader.analysis() is first
        assert len(calls) == 1
    finally:
        reader.close()
