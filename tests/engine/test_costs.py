"""The bill of a run: status, report --json costs and the budget stop use the exact figure, and
run databases written before the prompt-cache split keep working."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml
from duel_script import config, respond
from run_records import call

from envduels.config import PlayerConfig
from envduels.engine.commands import run_command, status_command
from envduels.players import build_player
from envduels.report.commands import report_command
from envduels.store import RunReader
from envduels.store.writer import RunWriter
from envduels.testing import ScriptedServer

KEY = "sk-test-secret-123"
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello"}]


def answer(model: str, messages: list[dict]) -> str:
    return f"{model} heard: {messages[-1]['content']}"


def player_config(base_url: str) -> PlayerConfig:
    return PlayerConfig(name="tester", provider="openai", model="scripted-1", base_url=base_url,
                        timeout_s=5.0)
PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3,
         "cache_write_per_mtok": 3.75}


def _hand_bill(requests: list[dict]) -> dict[str, float]:
    """Dollars per model from the usage the server itself billed, at PRICE, read from either
    wire format's own fields."""
    bill: dict[str, float] = {}
    for r in requests:
        usage = r.get("usage")
        if usage is None:
            continue
        if "prompt_tokens" in usage:      # OpenAI: cached tokens are within prompt_tokens
            read = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            uncached, written, out = usage["prompt_tokens"] - read, 0, usage["completion_tokens"]
        else:                             # Anthropic: input_tokens is the uncached rest
            read = usage["cache_read_input_tokens"]
            uncached, written = usage["input_tokens"], usage["cache_creation_input_tokens"]
            out = usage["output_tokens"]
        dollars = (uncached * PRICE["input_per_mtok"] + read * PRICE["cached_input_per_mtok"]
                   + written * PRICE["cache_write_per_mtok"]
                   + out * PRICE["output_per_mtok"]) / 1e6
        bill[r["model"]] = bill.get(r["model"], 0.0) + dollars
    return bill


@pytest.mark.slow   # the report loads the MiniLM embedding (about 30 s on 2 shared cores)
def test_status_and_report_costs_equal_a_hand_computation_to_the_cent(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY, prompt_cache=True, reasoning_words=40) as server:
        run_dir = tmp_path / "run"
        cfg = config(server.base_url, str(run_dir))
        for p in cfg["players"]:
            p["price"] = PRICE
            if p["name"] == "dave":   # the author whose repair turn reads its task prompt back
                p["provider"] = "anthropic"
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        requests = list(server.requests)
    hand = _hand_bill(requests)
    assert sum(1 for r in requests if r.get("usage", {}).get("prompt_tokens_details", {})
               .get("cached_tokens")) > 10          # caching happened, so the split matters
    capsys.readouterr()
    assert status_command(run_dir) == 0
    shown = capsys.readouterr().out
    assert f"${sum(hand.values()):.4f}" in shown
    for name in ("alice", "bob", "carol", "dave"):
        assert f"${hand['m-' + name]:.4f}" in shown
    out = tmp_path / "report.json"
    html = tmp_path / "r.html"
    assert report_command([run_dir], json_path=out, html_path=html, bootstrap=10) == 0
    assert "what prompt caching saved" in html.read_text()
    costs = {c["model"]: c for c in json.loads(out.read_text())["costs"]}
    for name in ("alice", "bob", "carol", "dave"):
        assert round(costs[name]["cost_usd"], 2) == round(hand["m-" + name], 2)
        assert costs[name]["cost_usd"] == pytest.approx(hand["m-" + name], abs=1e-9)
    read = sum(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
               for r in requests if r.get("usage") and r["model"] == "m-alice")
    assert costs["alice"]["cache_read_tokens"] == read
    assert costs["alice"]["saved_usd"] == pytest.approx(read * (3.0 - 0.3) / 1e6, abs=1e-9)
    assert costs["alice"]["reasoning_tokens"] == 40 * sum(
        1 for r in requests if r.get("usage") and r["model"] == "m-alice")
    assert "saved" in shown
    dave = [r["usage"] for r in requests if r.get("usage") and r["model"] == "m-dave"]
    assert [u["cache_read_input_tokens"] > 0 for u in dave] == [False, True]
    assert dave[0]["cache_creation_input_tokens"] > 0
    assert costs["dave"]["cache_write_tokens"] == sum(u["cache_creation_input_tokens"]
                                                      for u in dave)


def test_the_budget_stop_counts_cache_reads_at_their_price(tmp_path):
    store = RunWriter(tmp_path)
    store.put("k1", call("p", "solver", "c", input_tokens=1000, output_tokens=0,
                         cache_read_tokens=900, cost_usd=0.00057, saved_usd=0.00243))
    t = store.totals()
    assert (t.input_tokens, t.cache_read_tokens, t.uncached_input_tokens) == (1000, 900, 100)
    assert (t.cost_usd, t.saved_usd) == (0.00057, 0.00243)
    store.close()
    again = RunReader(tmp_path).totals()     # read back from the columns, not memory
    assert (again.cost_usd, again.cache_read_tokens, again.saved_usd) == (0.00057, 900, 0.00243)


# The calls table exactly as envduels wrote it before the prompt-cache split.
OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE calls (
    key TEXT PRIMARY KEY, player TEXT, role TEXT, call_id TEXT,
    record TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER,
    cost_usd REAL, latency_s REAL, created REAL);
"""


async def test_a_run_database_from_before_the_split_is_migrated_and_its_calls_still_answer(
        tmp_path):
    srv = ScriptedServer(answer)
    srv.start()
    fresh = build_player(player_config(srv.base_url))
    first = await fresh.chat(HELLO, call_id="a", role="solver")
    await fresh.aclose()
    old = sqlite3.connect(tmp_path / "run.db")
    old.executescript(OLD_SCHEMA)
    record = {"request": {}, "reply": {"text": first.text, "finish_reason": "stop"},
              "usage": {"input_tokens": 5, "output_tokens": 4}, "cost_usd": 0.25,
              "latency_s": 0.1, "retries": 0, "player": "tester", "role": "solver", "call_id": "a"}
    old.execute("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?)",
                (first.request_key, "tester", "solver", "a", json.dumps(record), 5, 4, 0.25, 0.1,
                 0.0))
    old.commit()
    old.close()

    store = RunWriter(tmp_path, create=False)
    t = store.totals()
    assert (t.calls, t.input_tokens, t.cache_read_tokens, t.cost_usd, t.saved_usd) == (
        1, 5, 0, 0.25, 0.0)
    assert store.reader.usage_by_player()["tester"].cost_usd == 0.25
    player = build_player(player_config(srv.base_url), cache=store)
    again = await player.chat(HELLO, call_id="a", role="solver")
    await player.aclose()
    srv.stop()
    assert again.cached and again.text == first.text and srv.request_count == 1
    store.put("new", call("tester", "solver", "b", input_tokens=10, output_tokens=1,
                          cache_read_tokens=8, cost_usd=0.5))
    assert store.totals().cache_read_tokens == 8
    store.close()
    columns = {r[1] for r in sqlite3.connect(tmp_path / "run.db").execute(
        "PRAGMA table_info(calls)")}
    assert {"cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "saved_usd"} <= columns


def test_turning_prompt_caching_off_or_repricing_it_never_blocks_a_resume():
    from envduels.config import parse_config
    from envduels.engine._keys import changed_setting, result_settings

    base = config("http://127.0.0.1:9/v1", "/tmp/unused")
    changed = json.loads(json.dumps(base))
    for p in changed["players"]:
        p["cache"] = False
        p["price"] = PRICE
    assert changed_setting(result_settings(parse_config(base)),
                           result_settings(parse_config(changed))) is None


def test_each_episode_of_a_run_keeps_one_prompt_cache_key_for_all_its_turns(tmp_path,
                                                                          monkeypatch):
    from envduels.engine.solving import SYSTEM_PROMPT

    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        run_dir = tmp_path / "run"
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config(server.base_url, str(run_dir))))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        requests = [r for r in server.requests if r["messages"][0]["content"] == SYSTEM_PROMPT]
    store = RunWriter(run_dir, create=False)
    episodes = store.reader.episodes()
    store.close()
    by_key: dict[str, set] = {}
    for r in requests:
        conversation = (r["model"], r["messages"][1]["content"])   # solver and first turn
        by_key.setdefault(r["body"]["prompt_cache_key"], set()).add(conversation)
    # one key per episode played (an episode that failed to start sent nothing), every turn
    # of it under that key, and one conversation under each key
    played = [e for e in episodes if e.turns > 0]
    assert len(by_key) == len(played) == 24
    assert all(len(conversations) == 1 for conversations in by_key.values())
    multi_turn = sum(1 for e in played if e.turns > 1)
    assert sum(1 for r in requests) == sum(e.turns for e in played) and multi_turn >= 4


def test_a_read_only_open_of_a_database_from_before_the_split_reads_its_bill_and_writes_nothing(
        tmp_path):
    old = sqlite3.connect(tmp_path / "run.db")
    old.executescript(OLD_SCHEMA)
    old.execute("INSERT INTO calls VALUES ('k','p','solver','c','{}',5,4,0.25,0.1,0.0)")
    old.commit()
    old.close()
    before = (tmp_path / "run.db").read_bytes()
    store = RunReader(tmp_path, live=True)
    t = store.totals()
    assert (t.calls, t.input_tokens, t.cost_usd, t.cache_read_tokens, t.saved_usd) == (
        1, 5, 0.25, 0, 0.0)
    assert store.usage_by_player()["p"].cost_usd == 0.25
    store.close()
    assert (tmp_path / "run.db").read_bytes() == before
