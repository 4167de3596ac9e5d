"""The report on a real tournament: the engine's scripted duel (tests/engine/duel_script.py) run
through the sandbox, the scripted HTTP server and the run database, every number worked out by
hand from the outcome table in that script."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from envduels.report.commands import report_command

KEY = "sk-test-secret-123"
SCRIPT = Path(__file__).parents[1] / "engine" / "duel_script.py"


def _duel_script():
    spec = importlib.util.spec_from_file_location("report_duel_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not SCRIPT.exists():
        pytest.skip("the engine's scripted duel is not in this checkout")
    from envduels.engine.commands import run_command
    from envduels.testing import ScriptedServer

    script = _duel_script()
    tmp = tmp_path_factory.mktemp("real")
    mp = pytest.MonkeyPatch()
    mp.setenv("ENVDUELS_TEST_KEY", KEY)
    try:
        with ScriptedServer(script.respond, api_key=KEY) as server:
            cfg = tmp / "run.yaml"
            cfg.write_text(yaml.safe_dump(script.config(server.base_url, str(tmp / "run"))))
            assert run_command(cfg, unsafe_no_sandbox=False, quiet=True) == 0
    finally:
        mp.undo()
    assert report_command([tmp / "run"], json_path=tmp / "r.json", html_path=tmp / "r.html", bootstrap=200) == 0
    return json.loads((tmp / "r.json").read_text()), (tmp / "r.html").read_text()


def test_solver_and_author_metrics_match_the_scripted_outcomes(report):
    j, _ = report
    s = {r["model"]: r for r in j["solvers"]}
    assert set(s) == {"alice", "bob", "carol"}  # dave only authors
    # alice fails bob's CRASHY without the hint and wins with it, on both seeds
    assert (s["alice"]["hint_gain"], s["alice"]["hint_rescue"], s["alice"]["hint_harm"]) == (1.0, 1.0, None)
    assert (s["bob"]["without_hint_accuracy"], s["bob"]["with_hint_accuracy"]) == (0.0, 1.0)
    # carol solves LOCK either way; her CRASHY episodes are incomplete and drop out
    assert (s["carol"]["hint_gain"], s["carol"]["hint_rescue"], s["carol"]["hint_harm"]) == (0.0, None, 0.0)
    assert (s["carol"]["episodes"], s["carol"]["incomplete"], s["carol"]["errors"]) == (8, 4, 0)
    a = {r["model"]: r for r in j["authors"]}
    # LOCK: bob +1 on both seeds, carol 0 on both -> 0.5; per seed rates bob 0, carol 1 -> D = 1
    assert (a["alice"]["hint_authoring"], a["alice"]["design_score"]) == (0.5, 1.0)
    # CRASHY: only alice's pairs count (+1); one panel solver per seed -> no design score
    assert (a["bob"]["hint_authoring"], a["bob"]["design_score"], a["bob"]["author_faults"]) == (1.0, None, 4)
    assert (a["dave"]["environments"], a["dave"]["invalid_environments"], a["dave"]["hint_authoring"]) == (1, 1, None)


def test_duel_and_solver_ratings_follow_the_hand_scored_matches(report):
    j, _ = report
    duel = {r["model"]: r for r in j["ratings"]["duel"]}
    # alice-bob tie 2:2; carol beats alice 2:0; carol beats bob 2:0 (CRASHY broke on both of her
    # seeds: an incomplete slot is the solver's win); dave's invalid environment forfeits to
    # every solver
    assert {m: r["points"] for m, r in duel.items()} == {"alice": 1.5, "bob": 1.5, "carol": 3.0, "dave": 0.0}
    assert {m: r["games"] for m, r in duel.items()} == {"alice": 3.0, "bob": 3.0, "carol": 3.0, "dave": 3.0}
    assert duel["dave"]["rating"] == min(r["rating"] for r in duel.values())
    # on LOCK, carol (no-hint 1) beats bob (0); nothing else is common ground
    solver = {r["model"]: r for r in j["ratings"]["solver"]}
    assert set(solver) == {"bob", "carol"} and solver["carol"]["rating"] > solver["bob"]["rating"]
    # author rating: the solver axis holds every solver (carol, who only solves, included), but
    # the only solver outside {alice, bob} is carol, whose CRASHY pairs are incomplete (no lift on
    # bob's side), and dave's one environment is invalid (no lift at all): no comparison exists
    assert j["ratings"]["author"] == []


def test_environment_rows_carry_validity_and_flags(report):
    j, html = report
    envs = {e["id"]: e for e in j["environments"]}
    assert envs["r1-dave-0"]["valid"] is False and envs["r1-dave-0"]["invalid_reason"]
    assert envs["r1-alice-0"]["flags"] == []  # carol solves LOCK without the hint
    # CRASHY: the only panel solver with scored pairs (alice) always fails without, wins with
    assert envs["r1-bob-0"]["flags"] == ["hint_gated"]
    assert 'id="gallery"' in html and "r1-bob-0" in html
