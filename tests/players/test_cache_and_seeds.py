"""Identical requests are answered once; seeds make reruns ask identical questions."""

from __future__ import annotations

import asyncio

from players_helpers import HELLO, JsonFileCache, answer, player_config

from envduels.config import Price
from envduels.errors import UserError
from envduels.players import MemoryCache, build_player, request_key, request_seed
from envduels.testing import ScriptedServer


async def test_a_repeated_identical_request_is_served_from_the_cache_without_a_server_hit(
        server) -> None:
    cache = MemoryCache()
    price = Price(input_per_mtok=1_000_000, output_per_mtok=2_000_000)  # $1 / $2 per token
    player = build_player(player_config(server.base_url, price=price), cache=cache, run_seed=3)
    first = await player.chat(HELLO, call_id="ep:1:turn:0", role="solver")
    assert server.request_count == 1
    again = await player.chat(HELLO, call_id="ep:1:turn:0", role="solver")
    await player.aclose()
    assert server.request_count == 1
    assert (first.cached, again.cached) == (False, True)
    assert again.text == first.text
    assert again.request_key == first.request_key
    assert (again.input_tokens, again.output_tokens) == (first.input_tokens, first.output_tokens)
    assert first.cost_usd == first.input_tokens * 1 + first.output_tokens * 2
    assert again.cost_usd == 0.0
    usage = player.usage["solver"]
    assert (usage.calls, usage.cached, usage.cost_usd) == (2, 1, first.cost_usd)
    record = cache.get(first.request_key)
    assert record.usage.cost_usd == first.cost_usd
    assert (record.player, record.role, record.call_id) == ("tester", "solver", "ep:1:turn:0")


async def test_a_resumed_run_never_pays_twice_for_the_same_call(server, tmp_path) -> None:
    cache = JsonFileCache(tmp_path / "calls.json")
    cfg = player_config(server.base_url)
    first_run = build_player(cfg, cache=cache, run_seed=9)
    a = await first_run.chat(HELLO, call_id="c1", role="author")
    await first_run.aclose()
    resumed = build_player(cfg, cache=cache, run_seed=9)
    b = await resumed.chat(HELLO, call_id="c1", role="author")
    c = await resumed.chat(HELLO, call_id="c2", role="author")
    await resumed.aclose()
    assert (b.cached, b.text, b.latency_s) == (True, a.text, a.latency_s)
    assert c.cached is False
    assert server.request_count == 2


async def test_any_change_to_the_request_misses_the_cache(server) -> None:
    cache = MemoryCache()
    base = build_player(player_config(server.base_url), cache=cache)
    await base.chat(HELLO, call_id="c1", role="solver")
    await base.chat(HELLO, call_id="c2", role="solver")            # other seed
    await base.chat(HELLO[:1], call_id="c1", role="solver")        # other messages
    await base.chat(HELLO, call_id="c1", role="solver", max_tokens=7)  # other parameter
    hotter = build_player(player_config(server.base_url, temperature=1.3), cache=cache)
    await hotter.chat(HELLO, call_id="c1", role="solver")
    other_model = build_player(player_config(server.base_url, model="scripted-2"), cache=cache)
    await other_model.chat(HELLO, call_id="c1", role="solver")
    for p in (base, hotter, other_model):
        await p.aclose()
    assert server.request_count == 6
    assert len(cache) == 6


async def test_without_a_cache_every_call_reaches_the_server(server) -> None:
    player = build_player(player_config(server.base_url), cache=None)
    await player.chat(HELLO, call_id="c1", role="solver")
    await player.chat(HELLO, call_id="c1", role="solver")
    await player.aclose()
    assert server.request_count == 2


def test_request_seed_depends_on_run_seed_player_and_call_only() -> None:
    s = request_seed(0, "gpt", "ep:a:turn:1")
    assert s == request_seed(0, "gpt", "ep:a:turn:1")
    assert len({s, request_seed(1, "gpt", "ep:a:turn:1"), request_seed(0, "small", "ep:a:turn:1"),
                request_seed(0, "gpt", "ep:a:turn:2")}) == 4
    assert 0 <= s < 2**31


async def test_identical_reruns_send_byte_identical_requests() -> None:
    sent = []
    for _ in range(2):
        with ScriptedServer(answer) as srv:
            player = build_player(player_config(srv.base_url, top_p=0.9), run_seed=42)
            await player.chat(HELLO, call_id="a", role="author")
            await player.chat(HELLO, call_id="b", role="solver")
            await player.aclose()
        sent.append([(r["model"], r["messages"], r["params"]) for r in srv.requests])
    assert sent[0] == sent[1]
    params = dict(sent[0][0][2])
    assert params.pop("prompt_cache_key").startswith("envduels-")   # docs/players.md
    assert params == {"seed": request_seed(42, "tester", "a"), "temperature": 0.7,
                      "max_tokens": 1024, "top_p": 0.9}
    assert sent[0][1][2]["seed"] == request_seed(42, "tester", "b")


async def test_reasoning_effort_is_sent_with_max_completion_tokens(server) -> None:
    player = build_player(player_config(server.base_url, reasoning_effort="low", max_tokens=64))
    await player.chat(HELLO, call_id="a", role="author")
    await player.aclose()
    params = server.requests[0]["params"]
    assert params["reasoning_effort"] == "low"
    assert params["max_completion_tokens"] == 64
    assert "temperature" not in params and "max_tokens" not in params


def test_request_key_is_independent_of_dict_order() -> None:
    assert request_key({"a": 1, "b": [1, {"x": 2, "y": 3}]}) == request_key(
        {"b": [1, {"y": 3, "x": 2}], "a": 1})


async def test_the_same_request_made_twice_at_once_reaches_the_server_once() -> None:
    with ScriptedServer(answer, latency_s=0.2) as srv:
        player = build_player(player_config(srv.base_url), cache=None)
        a, b = await asyncio.gather(player.chat(HELLO, call_id="x", role="solver"),
                                    player.chat(HELLO, call_id="x", role="solver"))
        await player.aclose()
    assert srv.request_count == 1
    assert a.text == b.text and sorted([a.cached, b.cached]) == [False, True]
    assert player.usage["solver"].calls == 2 and player.usage["solver"].cached == 1


async def test_a_shared_failure_reaches_every_caller_and_is_not_cached() -> None:
    with ScriptedServer(answer, latency_s=0.1, faults=["400"]) as srv:
        player = build_player(player_config(srv.base_url), cache=MemoryCache())
        results = await asyncio.gather(player.chat(HELLO, call_id="x", role="solver"),
                                       player.chat(HELLO, call_id="x", role="solver"),
                                       return_exceptions=True)
        assert all(isinstance(r, UserError) for r in results)
        ok = await player.chat(HELLO, call_id="x", role="solver")
        await player.aclose()
    assert not ok.cached and srv.request_count == 2


async def test_cancelling_the_first_caller_lets_the_second_ask_itself() -> None:
    with ScriptedServer(answer, latency_s=0.3) as srv:
        player = build_player(player_config(srv.base_url), cache=None)
        first = asyncio.create_task(player.chat(HELLO, call_id="x", role="solver"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(player.chat(HELLO, call_id="x", role="solver"))
        await asyncio.sleep(0.05)
        first.cancel()
        result = await second
        await player.aclose()
    assert result.text == "scripted-1 heard: Say hello" and not result.cached
    assert first.cancelled()
