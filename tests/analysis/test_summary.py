"""The SPEC §8 JSON: exact shape, nulls for missing data, never NaN."""

from __future__ import annotations

import json

from envduels.analysis import analyze, simulate_tournament

from .tables import env, hand_run, pair, tables

SOLVER_KEYS = {"model", "hint_gain", "hint_rescue", "hint_harm", "without_hint_accuracy", "with_hint_accuracy",
               "canonical_autonomous_solve", "episodes", "incomplete", "errors"}
AUTHOR_KEYS = {"model", "environments", "valid_environments", "invalid_environments", "author_faults",
               "hint_authoring", "design_score"}
RATING_KEYS = {"model", "rating", "ci_low", "ci_high", "rank"}
ENV_KEYS = {"id", "author", "round", "domain", "valid", "invalid_reason", "hint", "flags"}


def test_json_has_every_spec_key_and_serialises_without_nan():
    run = simulate_tournament(players=5, envs_per_author=3, rounds=2, seed=3, p_invalid=0.2, p_incomplete=0.05)
    j = analyze(run.tables, bootstrap=100, permutations=50).json
    text = json.dumps(j, allow_nan=False)
    assert "NaN" not in text
    assert {"name", "players", "rounds", "episodes", "cost_usd"} <= set(j["run"])
    assert j["run"]["rounds"] == 2 and j["run"]["episodes"] == len(run.tables.episodes)
    assert all(set(r) >= SOLVER_KEYS for r in j["solvers"]) and len(j["solvers"]) == 5
    assert all(set(r) >= AUTHOR_KEYS for r in j["authors"]) and len(j["authors"]) == 5
    for kind in ("duel", "author", "solver"):
        assert all(set(r) >= RATING_KEYS for r in j["ratings"][kind]) and len(j["ratings"][kind]) == 5
        ranks = [r["rank"] for r in j["ratings"][kind]]
        if j["rating_methods"][kind]["note"] or j["rating_methods"][kind]["rank_note"]:
            assert ranks == [None] * 5  # withheld, and the JSON says why
            continue
        assert ranks == sorted(ranks) and ranks[0] == 1
    assert {"triads", "cycles", "significant_cycles", "wst_violations", "sst_violations"} <= set(j["transitivity"])
    assert {"spearman", "ci_low", "ci_high"} <= set(j["divergence"])
    assert all(set(e) >= ENV_KEYS for e in j["environments"]) and len(j["environments"]) == 30
    assert {"irt", "learning", "convergence", "scale", "costs"} <= set(j)


def test_metrics_without_data_are_null_not_zero():
    t = tables(["A", "B"], [env("eA", "A"), env("eB", "B", valid=False)], [pair("eA", "A", "B", 0, "e", "i")])
    j = analyze(t, bootstrap=20, permutations=10).json
    solver_b = next(r for r in j["solvers"] if r["model"] == "B")
    assert solver_b["hint_gain"] is None and solver_b["canonical_autonomous_solve"] is None
    assert (solver_b["episodes"], solver_b["incomplete"], solver_b["errors"]) == (2, 1, 1)
    author_a = next(r for r in j["authors"] if r["model"] == "A")
    assert author_a["hint_authoring"] is None and author_a["design_score"] is None
    assert j["divergence"]["spearman"] is None
    assert j["transitivity"]["wst_violations"] is None
    json.dumps(j, allow_nan=False)


def test_hand_run_summary_matches_the_metric_functions():
    j = analyze(hand_run(), bootstrap=20, permutations=10).json
    a = next(r for r in j["authors"] if r["model"] == "A")
    assert abs(a["hint_authoring"] - 1 / 6) < 1e-12
    invalid = next(e for e in j["environments"] if e["id"] == "eC1")
    assert invalid["valid"] is False and invalid["invalid_reason"] == "oracle failed"
