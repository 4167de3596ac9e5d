"""`envduels plan`: exact costs, and simulated figures that match direct simulation and known truths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envduels.analysis import compute_ratings, matched_pairs, simulate_tournament
from envduels.analysis.plan import ENVIRONMENTS, SimDesign, plan, replicate_seed, truth_parameters
from envduels.config import parse_config
from envduels.report.plan import DesignFlags, design_config, design_cost

ROOT = Path(__file__).resolve().parents[2]


def test_cost_of_the_open_models_example_is_counted_exactly():
    cfg = design_config(ROOT / "examples" / "openai_compatible.yaml", DesignFlags())
    cost = design_cost(cfg, [])
    # 2 authors × 2 environments × 2 rounds; each played by both solvers (self-play is on by
    # default) on 4 seeds × 1 trial × 2 conditions; ≤ 3 authoring attempts each; ≤ 24 turns
    assert cost["environments_authored"] == 8
    assert cost["episodes"] == 8 * 2 * 4 * 2 == 128
    assert (cost["authoring_calls_max"], cost["solving_calls_max"]) == (8 * 3, 128 * 24)
    assert cost["calls_max"] == 24 + 3072


def test_cost_counts_roles_self_play_pools_and_turn_caps_as_the_scheduler_does():
    from envduels.engine.checks import load_fixed_envs
    from envduels.engine.scheduler import Tournament, fixed_env_record

    cfg = parse_config({
        "name": "mixed", "players": [
            {"name": "w", "provider": "openai", "model": "x", "roles": ["author"]},
            {"name": "ws", "provider": "openai", "model": "x"},
            {"name": "s1", "provider": "openai", "model": "x", "roles": ["solver"]},
        ],
        "tournament": {"rounds": 3, "envs_per_author": 2, "seeds_per_env": 3, "trials_per_seed": 2,
                       "max_turns": 5, "self_play": False, "author_repairs": 1,
                       "environments": ["nim", "number_guess"]},
    })
    pools = load_fixed_envs(cfg)
    cost = design_cost(cfg, pools)
    # authored: 2 authors × 2 × 3 rounds = 12 environments; w's are played by ws and s1, ws's by s1
    # only (self-play off): (6·2 + 6·1) × 3 seeds × 2 trials × 2 conditions = 216 episodes
    pool_eps = sum(2 * len(fixed_env_record(s, run_seed=0, seeds_per_env=3).benchmark_seeds) * 2 * 2 for s in pools)
    assert cost["environments_authored"] == 12 and cost["pool_environments"] == 2
    assert cost["episodes"] == 216 + pool_eps
    assert cost["authoring_calls_max"] == 12 * 2
    assert cost["players"]["w"]["episodes"] == 0 and cost["players"]["s1"]["environments"] == 0
    # the scheduler's own task list for the same environments gives the same episodes and turn caps
    sched = Tournament.__new__(Tournament)
    sched.cfg, sched.fingerprint, sched._draw_salt = cfg, "f", "f|secret"
    authored = [fixed_env_record(s, run_seed=0, seeds_per_env=3) for s in pools]
    from dataclasses import replace

    template = authored[0]
    for author in ("w", "ws"):
        for k in range(6):
            spec = replace(template.spec, id=f"{author}-{k}", author=author, max_turns=1000,
                           benchmark_seeds=(1, 2, 3))
            authored.append(replace(template, spec=spec, fixed_pool=False))
    tasks = sched._tasks(authored)
    assert len(tasks) == cost["episodes"]
    assert sum(t.max_turns for t in tasks) == cost["solving_calls_max"]


def test_plan_flags_override_the_config_and_bad_values_get_the_config_error():
    from envduels.errors import UserError

    cfg = design_config(ROOT / "examples" / "openai_compatible.yaml", DesignFlags(seeds=7, rounds=1))
    assert (cfg.tournament.seeds_per_env, cfg.tournament.rounds, cfg.tournament.envs_per_author) == (7, 1, 2)
    cfg = design_config(None, DesignFlags(players=5, envs_per_author=3))
    assert [p.name for p in cfg.players] == ["m00", "m01", "m02", "m03", "m04"]
    with pytest.raises(UserError, match="plan flags: 'tournament.rounds': Input should be less than or equal to 100"):
        design_config(None, DesignFlags(players=3, rounds=500))
    with pytest.raises(UserError, match="--players works only without a CONFIG"):
        design_config(ROOT / "examples" / "openai_compatible.yaml", DesignFlags(players=3))


SMALL = SimDesign(players=4, envs_per_author=3, rounds=1, seeds=2)


def test_plan_is_reproducible_and_matches_direct_simulation():
    a = plan(SMALL, [0.4], replicates=3, bootstrap=30, truth_replicates=6, seed=5)
    b = plan(SMALL, [0.4], replicates=3, bootstrap=30, truth_replicates=6, seed=5, jobs=2)
    assert a.json() == b.json()  # worker processes change nothing
    truth = a.spreads[0]["truth_elo"]["solver"]
    covered, widths = [], []
    for r in range(3):  # the same tournaments, simulated and rated directly
        seed = replicate_seed(5, 0, "same", r)
        run = simulate_tournament(players=4, envs_per_author=3, rounds=1, seeds=2, seed=seed, spread=0.5,
                                  transcripts=False, environments=ENVIRONMENTS,
                                  **truth_parameters(SMALL, 0.4, "same", 1.0))
        rows = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=30, seed=seed)["solver"].rows
        for row in rows:
            covered.append(row["ci_low"] <= truth[row["model"]] <= row["ci_high"])
            widths.append(row["ci_high"] - row["ci_low"])
    figures = a.spreads[0]["ratings"]["solver"]
    assert figures["coverage"] == pytest.approx(sum(covered) / len(covered))
    assert figures["width_elo"] == pytest.approx(sum(widths) / len(widths))


def test_a_huge_spread_orders_the_top_two_almost_always():
    # alike environments: the machinery at a size where the answer is known (uneven ones make
    # the 3-environment author rating too noisy for 8 replicates to show it)
    result = plan(SMALL, [4.0], replicates=8, bootstrap=20, truth_replicates=8, seed=1, environments="alike")
    r = result.spreads[0]["ratings"]
    assert r["solver"]["top_two_ordered"] == 1.0 and r["author"]["top_two_ordered"] >= 0.85
    truth = result.spreads[0]["truth_elo"]["solver"]
    assert truth["m03"] > truth["m02"] > truth["m01"] > truth["m00"]


def test_reversed_authoring_skill_is_detected_far_more_often_than_a_false_alarm():
    # 4 environments per author: fewer give no author interval, hence no divergence interval; a
    # spread of 4 logits, since at 3 more than half the runs miss the 0.90 reliability gate at
    # this size once the author bootstrap's shift counts as noise (power 0.25 there, 0.625 at 4)
    # (alike environments, as above)
    result = plan(SimDesign(players=5, envs_per_author=4, rounds=1, seeds=2), [4.0], replicates=8, bootstrap=50,
                  truth_replicates=4, seed=1, environments="alike")
    d = result.spreads[0]["divergence"]
    assert d["power"] >= 0.5 and d["false_alarm"] <= 0.125 and d["no_interval"] <= 0.5


def test_identical_players_have_no_true_order_and_a_centred_truth():
    result = plan(SMALL, [0.0], replicates=4, bootstrap=20, truth_replicates=10, seed=2)
    entry = result.spreads[0]
    assert all(entry["ratings"][k]["top_two_ordered"] is None for k in ("duel", "author", "solver"))
    assert entry["divergence"]["power"] is None and entry["divergence"]["false_alarm"] is None
    assert max(abs(v - 1000) for v in entry["truth_elo"]["solver"].values()) < 40


def test_two_players_cannot_plan_divergence_or_cycles():
    result = plan(SimDesign(players=2, envs_per_author=2, rounds=1, seeds=2), [1.0], replicates=2, bootstrap=10,
                  truth_replicates=4)
    assert result.spreads[0]["divergence"]["power"] is None and result.spreads[0]["cycle"]["power"] is None


@pytest.mark.slow
def test_identical_players_get_near_nominal_coverage_and_few_false_cycles():
    result = plan(SimDesign(players=6, envs_per_author=4, rounds=2, seeds=4), [0.0], replicates=30, bootstrap=200,
                  truth_replicates=40, seed=3)
    entry = result.spreads[0]
    assert all(entry["ratings"][k]["coverage"] >= 0.88 for k in ("duel", "author", "solver"))
    # identical players, nothing planted: any significant cycle is a false alarm
    assert entry["cycle"]["false_alarm"] <= 0.15


@pytest.fixture
def cli(monkeypatch, capsys):
    """`envduels plan ARGS` through the console entry point, in this process: (exit code, out, err)."""
    from envduels.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # no wrapping of the printed lines

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["envduels", "plan", *args])
        with pytest.raises(SystemExit) as ex:
            main()
        out = capsys.readouterr()
        return ex.value.code, out.out, out.err

    return run


@pytest.mark.slow
def test_plan_cli_prints_one_json_object_and_bad_flags_are_one_line(cli):
    code, out, err = cli("--players", "3", "--envs-per-author", "2", "--seeds", "2", "--spread", "1.0",
                         "--replicates", "2", "--bootstrap", "10", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cost"]["episodes"] == 3 * 2 * 3 * 2 * 2  # 3 authors × 2 envs × 3 solvers (self-play on) × 2 seeds × 2
    assert [s["spread"] for s in doc["spreads"]] == [1.0] and doc["simulation"]["replicates"] == 2
    assert set(doc["spreads"][0]["ratings"]) == {"duel", "author", "solver"}
    assert cli("--players", "1") == (2, "", "error: --players must be 2 or more (got 1); ratings compare players\n")
    assert cli("--players", "3", "--replicates", "0")[2].startswith("error: --replicates must be 1 or more")


def test_plan_prints_a_table_per_spread_that_names_the_spread(cli):
    code, out, _err = cli(str(ROOT / "examples" / "openai_compatible.yaml"), "--replicates", "2", "--bootstrap", "10",
                          "--spread", "0.4")
    assert code == 0
    assert "128 episodes; model calls at most 3,096" in out
    assert "Abilities spread ±0.4 logits" in out and "±1.5" not in out
    assert "author and solver: no comparisons at this design (needs 3 or more players)" in out


def test_plan_of_a_pool_only_config_gives_the_cost_and_says_why_it_does_not_simulate(cli):
    code, out, err = cli(str(ROOT / "examples" / "solver_eval.yaml"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["simulation"] is None and "fewer than 2 players author" in doc["no_simulation"]
    assert doc["cost"]["environments_authored"] == 0 and doc["cost"]["pool_environments"] == 5
