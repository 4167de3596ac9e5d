"""A run's life: budget stop and resume, status from the database, history in round 2, the
reference solver evaluation over a fixed pool, and `envduels play`."""

from __future__ import annotations

import io
import sys

import yaml
from duel_script import EXPECTED, LOCK_HINT, LOCK_SOURCE, config, lock_code, respond

from envduels.engine.play import play_command
from envduels.engine.run import EXIT_BUDGET, run_command
from envduels.engine.status import status_command
from envduels.envs import library_env
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-lifecycle"


def _write(tmp_path, cfg: dict, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _outcomes(run_dir) -> dict:
    got: dict = {}
    for e in Store(run_dir, create=False).episodes():
        got.setdefault((e.env_id, e.solver, e.hinted), set()).add((e.outcome, e.turns))
    return got


def test_budget_stops_with_exit_3_and_a_larger_budget_resumes_to_the_full_result(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        run_dir = tmp_path / "run"
        # over the estimate's low end ($0.0047: `run` would refuse to start below it) and under
        # what the authors spend ($0.0064), so the run stops after authoring
        cfg = config(server.base_url, str(run_dir), extra={"budget": {"max_usd": 0.005}})
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == EXIT_BUDGET
        assert Store(run_dir, create=False).episodes() == []
        paid = server.request_count
        cfg["budget"] = {"max_usd": None}
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == 0
        author_calls_again = [r for r in server.requests[paid:]
                              if r["messages"][0]["content"].startswith("You are an expert")]
    assert author_calls_again == []  # authoring was finished and paid before the stop
    assert _outcomes(run_dir) == {k: {v} for k, v in EXPECTED.items()}
    capsys.readouterr()
    assert status_command(run_dir) == 0
    out = capsys.readouterr().out
    assert "24 done, 0 left, 0 to retry" in out
    assert "2 valid, 1 invalid" in out


def test_round_two_authors_see_the_history_of_round_one(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        cfg = config(server.base_url, str(tmp_path / "run"), rounds=2)
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == 0
        first_prompts = [r["messages"][1]["content"] for r in server.requests
                         if r["messages"][0]["content"].startswith("You are an expert")
                         and len(r["messages"]) == 2]
    round1 = [p for p in first_prompts if "earlier rounds" not in p]
    round2 = [p for p in first_prompts if "earlier rounds" in p]
    assert len(round1) == 3 and len(round2) == 3
    history = round2[0].split("## What happened in earlier rounds")[1]
    assert '"The lock" by alice (round 1, domain language)' in history
    assert f"hint: {LOCK_HINT}" in history
    assert "  bob: 0% -> 100%" in history  # bob failed without the hint, won with it
    assert "INVALID: no ```python code block" in history
    assert len({e.env_id for e in Store(tmp_path / "run", create=False).environments()}) == 6


def test_without_authors_a_fixed_pool_is_the_reference_solver_evaluation(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))
        cfg["players"] = [p for p in cfg["players"] if p["name"] == "carol"]
        cfg["tournament"]["environments"] = ["subtraction_game"]
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == 0
    t = Store(tmp_path / "run", create=False).tables()
    assert list(t.environments.env_id) == ["subtraction_game"]
    assert bool(t.environments.fixed_pool.iloc[0]) and t.environments.author.iloc[0] == "library"
    eps = t.episodes
    seeds = library_env("subtraction_game").benchmark_seeds  # a pool keeps its own seeds
    assert sorted(t.environments.benchmark_seeds.iloc[0]) == sorted(seeds)
    assert len(eps) == len(seeds) * 2 and eps.hinted.sum() == len(seeds)
    assert set(eps.solver) == {"carol"} and not eps.self_play.any()
    assert set(eps.outcome) <= {"success", "failure"}


def test_play_human_wraps_the_typed_action_and_prints_the_transcript(tmp_path, monkeypatch,
                                                                     capsys):
    env = tmp_path / "lock.py"
    env.write_text(LOCK_SOURCE)
    (tmp_path / "lock.hint.txt").write_text(LOCK_HINT)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"closed\n{lock_code(3)}\n"))
    code = play_command(str(env), config=None, player=None, human=True, hint=True, seed=3,
                        unsafe_no_sandbox=False)
    out = capsys.readouterr().out
    assert code == 0
    assert f"Hint: {LOCK_HINT}" in out and "Observation: LOCK: lock #" in out
    assert "step \\boxed{closed}: reward 0" in out and "success: terminated with reward 1" in out


def test_play_a_library_environment_by_name_until_input_ends(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code = play_command("subtraction_game", config=None, player=None, human=True, hint=False,
                        seed=0, unsafe_no_sandbox=False)
    assert code == 1
    captured = capsys.readouterr()
    assert "you closed standard input; episode stopped" in captured.err
    assert "provider error" not in captured.out + captured.err


def test_play_with_a_configured_player(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    env = tmp_path / "lock.py"
    env.write_text(LOCK_SOURCE)
    with ScriptedServer(respond, api_key=KEY) as server:
        path = _write(tmp_path, config(server.base_url, str(tmp_path / "run")))
        code = play_command(str(env), config=path, player="bob", human=False, hint=False,
                            seed=1, unsafe_no_sandbox=False)
        assert server.request_count == 4  # bob never finds the word without the hint
    out = capsys.readouterr().out
    assert code == 1 and "failure: turn cap 4 reached" in out
    assert not (tmp_path / "run").exists()  # playing writes no run


def test_live_view_only_on_a_terminal():
    from rich.console import Console

    from envduels.engine.progress import LiveView, Progress

    progress = Progress(rounds=2, round=1, phase="solving", episodes_planned=10)
    progress.episode_finished("success")
    assert not LiveView(progress, quiet=False, console=Console(file=io.StringIO())).enabled
    assert not LiveView(progress, quiet=True, console=Console(force_terminal=True)).enabled
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    console.print(progress.render())
    text = buf.getvalue()
    assert "1/2 (solving)" in text and "1 done / 9 left" in text and "success 1" in text


def test_provider_failures_exit_4_and_the_next_run_retries_them(tmp_path, monkeypatch):
    from envduels.engine.run import EXIT_ERRORS

    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY, faults=["500"]) as server:
        cfg = config(server.base_url, str(tmp_path / "run"))
        cfg["players"] = [dict(p, max_retries=0) for p in cfg["players"]]
        path = _write(tmp_path, cfg)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == EXIT_ERRORS
        store = Store(tmp_path / "run", create=False)
        assert len(store.environments()) == 2  # the failed author's environment is not final
        store.close()
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    assert _outcomes(tmp_path / "run") == {k: {v} for k, v in EXPECTED.items()}


def test_play_an_environment_of_an_export_folder_by_id(tmp_path, monkeypatch, capsys):
    import pytest

    from envduels.envs import EnvSpec, write_export
    from envduels.errors import UserError

    specs = [EnvSpec(id=i, source=LOCK_SOURCE, hints={"hint": LOCK_HINT}, author="x")
             for i in ("lock-a", "lock-b")]
    write_export(tmp_path / "export", specs)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{lock_code(0)}\n"))
    assert play_command(str(tmp_path / "export" / "lock-b"), config=None, player=None,
                        human=True, hint=False, seed=0, unsafe_no_sandbox=False) == 0
    assert "success" in capsys.readouterr().out
    with pytest.raises(UserError, match="holds 2 environments; name one as"):
        play_command(str(tmp_path / "export"), config=None, player=None, human=True,
                     hint=False, seed=0, unsafe_no_sandbox=False)
    with pytest.raises(UserError, match="is not an environment file, an EnvDuels export folder or a library name"):
        play_command("no_such_env", config=None, player=None, human=True, hint=False, seed=0,
                     unsafe_no_sandbox=False)


ESCAPES_SOURCE = '''
class Escapes:
    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "start \\x1b]52;c;SGVsbG8=\\x07 clip \\x1b[2J here\\x9b2J", {}
    def step(self, action):
        raise ValueError("bad \\x1b[31mred\\x1b[0m \\x00action")
'''


def test_play_prints_no_control_characters_from_the_environment_or_the_model(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    env = tmp_path / "escapes.py"
    env.write_text(ESCAPES_SOURCE)
    reply = "\x1b]0;pwned\x07title\tand \x9d8;;x\x9c \\boxed{go}\n"
    with ScriptedServer(lambda m, msgs: reply, api_key=KEY) as server:
        path = _write(tmp_path, config(server.base_url, str(tmp_path / "run")))
        code = play_command(str(env), config=path, player="bob", human=False, hint=False,
                            seed=1, unsafe_no_sandbox=False)
    out = capsys.readouterr().out
    assert code == 1
    assert [c for c in out if ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f] == []
    text = " ".join(out.split())   # rich wraps lines and expands tabs
    assert "environment -> Observation: start ]52;c;SGVsbG8= clip [2J here2J" in text
    assert "solver -> ]0;pwnedtitle and 8;;x \\boxed{go}" in text
    assert "environment fault: step raised ValueError: bad [31mred[0m action" in text
