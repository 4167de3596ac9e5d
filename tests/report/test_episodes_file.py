"""`envduels report --episodes FILE.jsonl`: episodes recorded elsewhere, rated as a run's are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envduels.errors import UserError
from envduels.report.episodes import analyze_episodes, load_episodes


def ep(env_id: str, author: str, solver: str, seed: int, hinted: bool, outcome: str, **more) -> dict:
    domain = {"ea": "logic", "eb": "math", "ec": "planning"}[env_id]
    return {"env_id": env_id, "author": author, "domain": domain, "solver": solver, "seed": seed,
            "hinted": hinted, "outcome": outcome} | more


# Three players, one environment each. Per solver, (no hint, hint) on each matched pair:
#   b: ea s0 (0,1) rescue, ea s1 (1,1)                  gain 1/2, rescue 1/1, harm 0/1
#   c: ea s0 (0,0), ea s1 (1,0) harm, eb s0 (0,1) rescue gain 0,  rescue 1/2, harm 1/1
#   a: eb s0 (0,1) rescue, ec s0 (0,0)                  gain 1/2, rescue 1/2, harm none
# b on ec: no-hint incomplete (the pair drops; an author fault of c); c on ea seed 2: a lone
# hinted error; a on its own ea: self-play. eb: every solver fails without and passes with the
# hint (hint_gated); ec: nobody passes with the hint (unsolved_with_hint).
ROWS = [
    ep("ea", "a", "b", 0, False, "failure", title="Corners", hint="start in a corner", round=1, trial=0),
    ep("ea", "a", "b", 0, True, "success", title="Corners", hint="start in a corner"),
    ep("ea", "a", "b", 1, False, "success", title="Corners", hint="start in a corner"),
    ep("ea", "a", "b", 1, True, "success", title="Corners", hint="start in a corner"),
    ep("ea", "a", "c", 0, False, "failure", title="Corners", hint="start in a corner"),
    ep("ea", "a", "c", 0, True, "failure", title="Corners", hint="start in a corner"),
    ep("ea", "a", "c", 1, False, "success", title="Corners", hint="start in a corner"),
    ep("ea", "a", "c", 1, True, "failure", title="Corners", hint="start in a corner"),
    ep("ea", "a", "c", 2, True, "error", title="Corners", hint="start in a corner"),
    ep("ea", "a", "a", 0, False, "success", title="Corners", hint="start in a corner"),
    ep("ea", "a", "a", 0, True, "success", title="Corners", hint="start in a corner"),
    ep("eb", "b", "a", 0, False, "failure", harness_version="7"),
    ep("eb", "b", "a", 0, True, "success"),
    ep("eb", "b", "c", 0, False, "failure"),
    ep("eb", "b", "c", 0, True, "success"),
    ep("ec", "c", "a", 0, False, "failure", round=1),
    ep("ec", "c", "a", 0, True, "failure", round=1),
    ep("ec", "c", "b", 0, False, "incomplete", round=1),
    ep("ec", "c", "b", 0, True, "failure", round=1),
]


def write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def episodes_file(tmp_path):
    return write(tmp_path / "elsewhere.jsonl", ROWS)


def test_episodes_file_gives_the_hand_computed_solver_metrics(episodes_file):
    j = analyze_episodes(episodes_file, bootstrap=20).json
    s = {r["model"]: r for r in j["solvers"]}
    assert (s["b"]["hint_gain"], s["b"]["hint_rescue"], s["b"]["hint_harm"]) == (0.5, 1.0, 0.0)
    assert (s["b"]["without_hint_accuracy"], s["b"]["with_hint_accuracy"]) == (0.5, 1.0)
    assert (s["b"]["episodes"], s["b"]["incomplete"], s["b"]["errors"], s["b"]["pairs"]) == (6, 1, 0, 2)
    assert (s["c"]["hint_gain"], s["c"]["hint_rescue"], s["c"]["hint_harm"]) == (0.0, 0.5, 1.0)
    assert s["c"]["without_hint_accuracy"] == pytest.approx(1 / 3) == s["c"]["with_hint_accuracy"]
    assert (s["c"]["episodes"], s["c"]["incomplete"], s["c"]["errors"], s["c"]["pairs"]) == (7, 0, 1, 3)
    assert (s["a"]["hint_gain"], s["a"]["hint_rescue"], s["a"]["hint_harm"]) == (0.5, 0.5, None)
    assert (s["a"]["without_hint_accuracy"], s["a"]["with_hint_accuracy"]) == (0.0, 0.5)
    assert (s["a"]["episodes"], s["a"]["self_play_episodes"], s["a"]["pairs"]) == (4, 2, 2)
    assert (s["c"]["rescues"], s["c"]["harms"], s["c"]["mcnemar_p"]) == (1, 1, 1.0)


def test_episodes_file_gives_the_hand_computed_author_metrics_and_flags(episodes_file):
    j = analyze_episodes(episodes_file, bootstrap=20).json
    a = {r["model"]: r for r in j["authors"]}
    assert [a[m]["hint_authoring"] for m in "abc"] == [0.0, 1.0, 0.0]
    assert [a[m]["author_faults"] for m in "abc"] == [0, 0, 1]
    assert [a[m]["environments"] for m in "abc"] == [1, 1, 1]
    envs = {e["id"]: e for e in j["environments"]}
    assert {k: e["flags"] for k, e in envs.items()} == {"ea": [], "eb": ["hint_gated"], "ec": ["unsolved_with_hint"]}
    assert (envs["ea"]["title"], envs["ea"]["hint"], envs["ea"]["domain"]) == ("Corners", "start in a corner", "logic")
    assert (envs["eb"]["lift"], envs["ea"]["lift"], envs["ea"]["pairs"]) == (1.0, 0.0, 4)
    assert (j["run"]["episodes"], j["run"]["matched_pairs"], j["run"]["players"]) == (19, 7, ["a", "b", "c"])


def test_what_a_file_of_episodes_cannot_say_is_null(episodes_file):
    j = analyze_episodes(episodes_file, bootstrap=20).json
    assert j["convergence"] is None and j["costs"] is None and j["run"]["cost_usd"] is None
    assert len(j["ratings"]["solver"]) == 3 and j["divergence"]["models"] == 3


def test_episodes_are_rated_exactly_as_the_same_tables_from_a_run(episodes_file):
    """The loader builds the tables a run gives; `analyze` on them is the report's numbers."""
    from envduels.analysis import analyze

    tables = load_episodes(episodes_file)
    direct = analyze(tables, bootstrap=30, name="elsewhere", convergence=False).json
    via = analyze_episodes(episodes_file, bootstrap=30).json
    for key in ("solvers", "authors", "ratings", "transitivity", "divergence", "environments", "learning"):
        assert via[key] == direct[key]
    assert list(tables.players["roles"]) == [["author", "solver"]] * 3


@pytest.fixture
def cli(monkeypatch, capsys):
    """`envduels report ARGS` through the console entry point, in this process: (exit code, out, err)."""
    from envduels.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["envduels", "report", *args])
        with pytest.raises(SystemExit) as ex:
            main()
        out = capsys.readouterr()
        return ex.value.code, out.out, out.err

    return run


def test_report_episodes_writes_json_and_html_through_the_cli(episodes_file, tmp_path, cli):
    code, _out, err = cli("--episodes", str(episodes_file), "--json", str(tmp_path / "r.json"), "--html",
                          str(tmp_path / "r.html"), "--bootstrap", "20")
    assert code == 0, err
    j = json.loads((tmp_path / "r.json").read_text())
    assert j["run"]["name"] == "elsewhere" and j["convergence"] is None
    assert {r["model"]: r["hint_gain"] for r in j["solvers"]} == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert "ignored field(s) harness_version" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.jsonl", "r.html", "r.json"]


BAD = [
    ({"drop": "solver"}, "line 2: missing field 'solver'; every line needs env_id, author, domain, solver, seed, "
     "hinted, outcome (round, trial, title, hint are optional)"),
    ({"outcome": "won"}, "line 2: field 'outcome' is \"won\"; use one of success, failure, incomplete, error"),
    ({"hinted": 1}, "line 2: field 'hinted' must be true or false (got 1)"),
    ({"seed": "0"}, "line 2: field 'seed' must be an integer (got \"0\")"),
    ({"trial": -1}, "line 2: field 'trial' must be an integer ≥ 0 (got -1)"),
    ({"round": 0}, "line 2: field 'round' must be an integer ≥ 1 (got 0)"),
    ({"author": ""}, "line 2: field 'author' must be a non-empty string (got \"\")"),
    ({"hinted": False}, "line 2: duplicate episode (env_id 'ea', solver 'b', seed 0, trial 0, hinted false) "
     "already on line 1; keep one line per episode, or number repeats with 'trial'"),
    ({"domain": "math"}, "line 2: field 'domain' of environment 'ea' is \"math\" but line 1 has \"logic\"; "
     "every line of an environment must agree"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m.split(";")[0][8:] for _c, m in BAD])
def test_a_bad_row_is_one_line_naming_its_line_and_field_with_exit_2(tmp_path, cli, change, message):
    second = dict(ROWS[1])
    for k, v in change.items():
        if k == "drop":
            del second[v]
        else:
            second[k] = v
    path = write(tmp_path / "bad.jsonl", [ROWS[0], second, ROWS[2]])
    with pytest.raises(UserError) as err:
        load_episodes(path)
    assert err.value.message == f"{path} {message}"
    assert cli("--episodes", str(path), "--json", str(tmp_path / "r.json")) == (2, "", f"error: {path} {message}\n")
    assert not (tmp_path / "r.json").exists()


def test_a_line_that_is_not_a_json_object_and_an_empty_file_are_one_line_errors(tmp_path):
    path = write(tmp_path / "x.jsonl", [ROWS[0], "", "{not json"])
    with pytest.raises(UserError, match=r"x.jsonl line 3: not valid JSON \(.*\); write one JSON object per line$"):
        load_episodes(path)
    path = write(tmp_path / "y.jsonl", ["[1, 2]"])
    with pytest.raises(UserError, match=r"y.jsonl line 1: expected a JSON object with fields env_id, .*; got a JSON list$"):
        load_episodes(path)
    path = write(tmp_path / "z.jsonl", ["", "  "])
    with pytest.raises(UserError, match="z.jsonl holds no episodes; write one JSON object per line"):
        load_episodes(path)
    # the installed console script, as a user runs it
    out = subprocess.run([sys.executable, "-m", "envduels.cli", "report", "--episodes", str(tmp_path / "missing.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (f"error: episodes file {str(tmp_path / 'missing.jsonl')!r} not found; pass a JSON Lines "
                          "file with one episode per line\n")


def test_episodes_and_run_folders_together_are_one_line_error(episodes_file, tmp_path, cli):
    assert cli(str(tmp_path), "--episodes", str(episodes_file)) == (
        2, "", "error: give either run folders or --episodes FILE, not both\n")


def test_a_simulated_run_written_as_episodes_gets_the_runs_own_numbers(tmp_path):
    """A run's episodes exported line by line and read back give the same metrics and ratings
    as the run's tables (everything but what needs more than episodes)."""
    from envduels.analysis import analyze, simulate_tournament

    run = simulate_tournament(players=4, envs_per_author=2, seeds=2, seed=7, transcripts=False,
                              p_incomplete=0.05, p_error=0.05)
    envs = run.tables.environments.set_index("env_id")
    rows = [{"env_id": e.env_id, "author": e.author, "domain": e.domain, "round": int(e.round),
             "solver": e.solver, "seed": int(e.seed), "trial": int(e.trial), "hinted": bool(e.hinted),
             "outcome": e.outcome, "title": envs.loc[e.env_id, "title"], "hint": envs.loc[e.env_id, "hint"]}
            for e in run.tables.episodes.itertuples(index=False)]
    path = write(tmp_path / "sim.jsonl", rows)
    via = analyze_episodes(path, bootstrap=50).json
    direct = analyze(run.tables, bootstrap=50, convergence=False).json
    for key in ("solvers", "authors", "ratings", "transitivity", "divergence", "irt", "learning", "learnability"):
        assert via[key] == direct[key], key
    assert [e["flags"] for e in via["environments"]] == [e["flags"] for e in direct["environments"]]
