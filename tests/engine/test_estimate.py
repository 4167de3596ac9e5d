"""`envduels estimate`: the design counted exactly, the unknowns from history or library play."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from duel_script import config, respond

from envduels.config import Price, parse_config
from envduels.engine.commands import run_command
from envduels.engine.estimate import bill_conversation, estimate_for
from envduels.errors import UserError
from envduels.store import RunReader
from envduels.testing import ScriptedServer

KEY = "sk-test-secret-123"
NAMES = ("alice", "bob", "carol", "dave")


def _write(tmp_path, cfg: dict, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _actual(run_dir) -> dict[str, dict[str, float]]:
    store = RunReader(run_dir)
    usage = store.usage_by_player()
    store.close()
    return {n: {"calls": usage[n].calls, "input_tokens": usage[n].input_tokens,
                "output_tokens": usage[n].output_tokens, "usd": usage[n].cost_usd}
            for n in NAMES}


def test_the_estimate_has_the_spec_shape_and_says_where_its_unknowns_came_from(tmp_path):
    cfg = parse_config(config("http://127.0.0.1:9/v1", str(tmp_path / "run")))
    out = estimate_for(cfg, []).to_json()
    assert set(out) == {"players", "total"}
    assert set(out["players"]) == set(NAMES)
    for entry in [*out["players"].values(), out["total"]]:
        for key in ("calls", "input_tokens", "output_tokens", "usd", "cached_input_tokens"):
            assert set(entry[key]) == {"low", "high"} and entry[key]["low"] <= entry[key]["high"]
    assert out["players"]["dave"]["calls"] == {"low": 1, "high": 2}     # 1 job, 1 repair
    assert set(out["players"]["alice"]["roles"]) == {"author", "solver"}
    assert out["players"]["alice"]["roles"]["solver"]["source"] == "library"
    assert out["total"]["wall_s"]["high"] > 0


def test_a_fresh_estimate_brackets_what_the_scripted_tournament_then_spends(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        run_dir = tmp_path / "run"
        cfg = config(server.base_url, str(run_dir))
        before = estimate_for(parse_config(cfg), []).to_json()
        assert run_command(_write(tmp_path, cfg), unsafe_no_sandbox=False, quiet=True) == 0
    actual = _actual(run_dir)
    for n in NAMES:
        calls = before["players"][n]["calls"]
        assert calls["low"] <= actual[n]["calls"] <= calls["high"], n

    # the same config, estimated once it has finished: its own history, calls exact
    after = estimate_for(parse_config(cfg), []).to_json()
    for n in NAMES:
        got = after["players"][n]
        assert got["calls"]["low"] == got["calls"]["high"] == actual[n]["calls"], n
        for key in ("input_tokens", "output_tokens"):
            for end in ("low", "high"):
                assert got[key][end] == pytest.approx(actual[n][key], rel=0.25), (n, key)
        assert got["roles"].get("solver", got["roles"].get("author"))["source"].startswith(
            "history (")


def test_an_estimate_from_round_one_predicts_the_second_round(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        run_dir = tmp_path / "run"
        one = config(server.base_url, str(run_dir), rounds=1)
        assert run_command(_write(tmp_path, one), unsafe_no_sandbox=False, quiet=True) == 0
        two = config(server.base_url, str(run_dir), rounds=2)
        predicted = estimate_for(parse_config(two), []).to_json()
        assert run_command(_write(tmp_path, two), unsafe_no_sandbox=False, quiet=True) == 0
    actual = _actual(run_dir)
    for n in NAMES:
        got = predicted["players"][n]
        for key in ("calls", "input_tokens", "output_tokens"):
            assert got[key]["low"] <= actual[n][key] <= got[key]["high"], (n, key)
    # the solvers' many recorded episodes predict the second round closely: the calls exactly
    # (it plays the first round's episodes again), the tokens within 25%
    for n in ("carol",):
        got = predicted["players"][n]
        middle = (got["calls"]["low"] + got["calls"]["high"]) / 2
        assert middle == pytest.approx(actual[n]["calls"], abs=0.5)
        for key in ("input_tokens", "output_tokens"):
            middle = (got[key]["low"] + got[key]["high"]) / 2
            assert middle == pytest.approx(actual[n][key], rel=0.25), key
    # one recorded job per author says little about the next: the design bounds its calls
    assert predicted["players"]["dave"]["calls"] == {"low": 3, "high": 4}


def test_run_prints_the_estimate_first_and_refuses_a_budget_below_its_low_end(tmp_path,
                                                                          monkeypatch, capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        run_dir = tmp_path / "run"
        cfg = config(server.base_url, str(run_dir), extra={"budget": {"max_usd": 1e-9}})
        low = estimate_for(parse_config(cfg), []).total("cost_usd").low
        assert low > 1e-9
        path = _write(tmp_path, cfg)
        with pytest.raises(UserError) as err:
            run_command(path, unsafe_no_sandbox=False, quiet=True)
        message = str(err.value)
        assert f"at least ${low:.4f}" in message and "budget.max_usd $0.0000" in message
        assert "raise budget.max_usd" in message and "\n" not in message
        assert capsys.readouterr().out.startswith("estimated cost $")

        from envduels import cli

        monkeypatch.setattr(sys, "argv", ["envduels", "run", str(path)])
        with pytest.raises(SystemExit) as code:
            cli.main()
        assert server.request_count == 0
    assert not (run_dir / "run.db").exists()
    assert code.value.code == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("error: the estimated cost")


def test_estimate_json_prints_one_object(tmp_path, monkeypatch, capsys):
    from envduels import cli

    path = _write(tmp_path, config("http://127.0.0.1:9/v1", str(tmp_path / "run")))
    monkeypatch.setattr(sys, "argv", ["envduels", "estimate", str(path), "--json"])
    with pytest.raises(SystemExit) as code:
        cli.main()
    assert code.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"]["calls"]["low"] >= 3       # three authoring jobs at least


def test_a_conversation_is_billed_as_the_provider_caches_it():
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3,
                  cache_write_per_mtok=3.75)
    # prompts 2000, 2100, 2200 tokens; replies 50
    f = bill_conversation(2000, 100, 50, 3, provider="anthropic", cache=True, price=price)
    assert (f.calls, f.input_tokens, f.output_tokens) == (3, 6300, 150)
    assert (f.cache_read_tokens, f.cache_write_tokens) == (2000 + 2100, 2000 + 100 + 100)
    hand = (4100 * 0.3 + 2200 * 3.75 + 150 * 15.0) / 1e6
    assert f.cost_usd == pytest.approx(hand)
    o = bill_conversation(2000, 100, 50, 3, provider="openai", cache=True, price=price)
    assert (o.cache_read_tokens, o.cache_write_tokens) == (1920 + 2048, 0)   # 128-token steps
    off = bill_conversation(2000, 100, 50, 3, provider="anthropic", cache=False, price=price)
    assert (off.cache_read_tokens, off.cost_usd) == (0, pytest.approx((6300 * 3 + 150 * 15) / 1e6))


def test_the_history_range_covers_the_rest_of_a_run_about_95_percent_of_the_time():
    """Seeded simulation with known truth: a resumed run of 1,000 episodes whose first 50 are
    recorded; turns per episode are a realistic mix (a third won in 1-6 turns, the rest at the
    24-turn cap, or a format-error streak in between). The range for the calls still to come
    must hold the true total about 95% of the time, and not be vacuous."""
    import random

    from envduels.duel.usage import Usage
    from envduels.engine.estimate import _spread

    def turns(rng: random.Random) -> int:
        u = rng.random()
        return rng.randint(1, 6) if u < 0.33 else 24 if u < 0.9 else rng.randint(7, 23)

    rng = random.Random(20261130)
    covered, widths = 0, []
    for _ in range(400):
        history = [Usage(calls=turns(rng)) for _ in range(50)]
        future = sum(turns(rng) for _ in range(950))
        low, high = _spread(history, 950)
        covered += low.calls <= future <= high.calls
        widths.append((high.calls - low.calls) / future)
    assert 0.90 <= covered / 400 <= 0.99
    assert sum(widths) / len(widths) < 0.5


def test_the_most_calls_agree_with_the_design_count_of_envduels_plan(tmp_path):
    from envduels.report.plan import design_cost

    for rounds, seeds in ((1, 2), (3, 4)):
        cfg = parse_config(config("http://127.0.0.1:9/v1", str(tmp_path / "run"), rounds=rounds,
                                  seeds=seeds))
        est = estimate_for(cfg, [])
        cost = design_cost(cfg, [])
        assert est.total("calls").high == cost["calls_max"]
        for name, p in cost["players"].items():
            assert est.player(name, "calls").high == (p["authoring_calls_max"]
                                                      + p["solving_calls_max"])
