"""A whole tournament against the real scripted HTTP server, every outcome worked out by hand
(see duel_script.py for the script and the reasoning)."""

from __future__ import annotations

import yaml
from duel_script import CRASHY_HINT, EXPECTED, LOCK_HINT, config, respond

from envduels.engine.commands import run_command
from envduels.engine.solving import SYSTEM_PROMPT
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-test-secret-123"


def _write(tmp_path, cfg: dict):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_scripted_tournament_outcomes_match_the_hand_computed_table(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, faults=["429:0.05", "500", "429:0.05"], api_key=KEY) as server:
        run_dir = tmp_path / "run"
        path = _write(tmp_path, config(server.base_url, str(run_dir)))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        requests = list(server.requests)

    store = RunReader(run_dir)
    t = store.tables()
    envs = t.environments.set_index("env_id")
    assert sorted(envs.index) == ["r1-alice-0", "r1-bob-0", "r1-dave-0"]
    assert envs.loc["r1-alice-0"].valid and envs.loc["r1-bob-0"].valid
    assert not envs.loc["r1-dave-0"].valid
    assert "no ```python code block" in envs.loc["r1-dave-0"].invalid_reason
    assert (envs.loc["r1-alice-0"].domain, envs.loc["r1-alice-0"].title) == ("language", "The lock")
    assert envs.loc["r1-bob-0"].hint == CRASHY_HINT

    # every attempt recorded; bob's repair turn showed him the validator's reason
    attempts = {(v.env_id, v.attempt): v.valid for v in store.validations()}
    assert attempts == {("r1-alice-0", 0): True, ("r1-bob-0", 0): False, ("r1-bob-0", 1): True,
                        ("r1-dave-0", 0): False, ("r1-dave-0", 1): False}
    bob_reason = store.validations("r1-bob-0")[0].reasons[0]
    repair = [r for r in requests if r["model"] == "m-bob" and len(r["messages"]) == 4
              and r["messages"][0]["content"] != SYSTEM_PROMPT]
    assert len(repair) == 1 and bob_reason in repair[0]["messages"][-1]["content"]

    eps = t.episodes
    assert len(eps) == 24 and set(eps.seed.groupby(eps.env_id).nunique()) == {2}
    got = {}
    for r in eps.itertuples():
        got.setdefault((r.env_id, r.solver, r.hinted), set()).add((r.outcome, r.turns))
    assert got == {k: {v} for k, v in EXPECTED.items()}
    assert set(eps[eps.outcome == "incomplete"].author) == {"bob"}
    assert set(eps[eps.self_play].solver + "@" + eps[eps.self_play].author) == {
        "alice@alice", "bob@bob"}
    assert "r1-dave-0" not in set(eps.env_id)
    lost = eps[(eps.env_id == "r1-bob-0") & (eps.solver == "alice") & ~eps.hinted].iloc[0]
    assert any(e.get("format_error") for e in lost.transcript)

    # the hint is in exactly the hinted prompts, verbatim, and nowhere else
    for r in eps.itertuples():
        hint = LOCK_HINT if r.env_id == "r1-alice-0" else CRASHY_HINT
        first_user = r.transcript[1]["content"]
        assert first_user.startswith(f"Hint: {hint}\n\nObservation: ") == r.hinted
        assert (hint in str(r.transcript)) == r.hinted
    solver_requests = [r for r in requests if r["messages"][0]["content"] == SYSTEM_PROMPT]
    for r in solver_requests:
        first_user = r["messages"][1]["content"]
        has_hint = LOCK_HINT in str(r["messages"]) or CRASHY_HINT in str(r["messages"])
        assert has_hint == first_user.startswith("Hint: ")

    # injected faults were retried, never failures; the key reached neither the DB nor a record
    assert sum(1 for r in requests if r.get("fault")) == 3
    assert KEY not in (run_dir / "run.db").read_bytes().decode("utf-8", "replace")
    assert t.players.set_index("name").loc["alice"].cost_usd > 0
