"""Tokens and cost are accounted per player and per role from the server's usage."""

from __future__ import annotations

import asyncio
import time

from players_helpers import HELLO, answer, player_config

from envduels.config import Price
from envduels.players import MemoryCache, Usage, build_player
from envduels.players._ratelimit import RateLimiter
from envduels.testing import ScriptedServer


async def test_usage_is_split_by_role_and_priced_from_the_config(server) -> None:
    price = Price(input_per_mtok=0.5, output_per_mtok=4.0)
    player = build_player(player_config(server.base_url, price=price))
    a = await player.chat(HELLO, call_id="a", role="author")
    s1 = await player.chat(HELLO, call_id="s1", role="solver")
    s2 = await player.chat([{"role": "user", "content": "one two"}], call_id="s2", role="solver")
    await player.aclose()
    # the scripted server counts words: "You are terse." + "Say hello" = 5 in
    assert (a.input_tokens, a.output_tokens) == (5, 4)
    assert (s2.input_tokens, s2.output_tokens) == (2, 4)
    author, solver = player.usage["author"], player.usage["solver"]
    assert (author.calls, author.input_tokens, author.output_tokens) == (1, 5, 4)
    assert (solver.calls, solver.input_tokens, solver.output_tokens) == (2, 7, 8)
    assert solver.cost_usd == s1.cost_usd + s2.cost_usd
    assert a.cost_usd == (5 * 0.5 + 4 * 4.0) / 1e6
    assert set(player.usage) == {"author", "solver"}
    total = player.total_usage()
    assert (total.calls, total.input_tokens) == (3, 12)
    assert a.finish_reason == "stop" and a.latency_s > 0


async def test_a_role_s_usage_is_the_sum_of_its_answers_usage_and_a_cache_hit_adds_no_cost(
        server) -> None:
    price = Price(input_per_mtok=0.5, output_per_mtok=4.0)
    player = build_player(player_config(server.base_url, price=price), cache=MemoryCache())
    s1 = await player.chat(HELLO, call_id="s1", role="solver")
    s2 = await player.chat([{"role": "user", "content": "one two"}], call_id="s2", role="solver")
    hit = await player.chat(HELLO, call_id="s1", role="solver")
    await player.aclose()
    assert s1.usage == Usage(calls=1, input_tokens=5, output_tokens=4,
                             cost_usd=(5 * 0.5 + 4 * 4.0) / 1e6, call_s=s1.latency_s)
    # the hit reads like the first answer, but nothing new was paid
    assert hit.usage == Usage(calls=1, input_tokens=5, output_tokens=4, cached=1,
                              call_s=s1.latency_s)
    assert (hit.cached, hit.cost_usd, hit.input_tokens) == (True, 0.0, 5)
    assert player.usage["solver"] == s1.usage + s2.usage + Usage(calls=1, cached=1)
    assert player.total_usage() == sum([s1.usage, s2.usage, Usage(calls=1, cached=1)], Usage())


async def test_usage_lists_every_configured_role_before_it_is_used(server) -> None:
    player = build_player(player_config(server.base_url, roles=["solver"]))
    assert player.usage == {"solver": Usage()}
    await player.aclose()


async def test_concurrency_is_limited_per_player() -> None:
    with ScriptedServer(answer, latency_s=0.2) as srv:
        player = build_player(player_config(srv.base_url, max_concurrency=2))
        started = time.monotonic()
        await asyncio.gather(*(player.chat(HELLO, call_id=f"c{i}", role="solver") for i in range(6)))
        elapsed = time.monotonic() - started
        await player.aclose()
    assert elapsed >= 0.6  # three waves of two


async def test_many_concurrent_calls_overlap_up_to_the_limit() -> None:
    with ScriptedServer(answer, latency_s=0.3) as srv:
        player = build_player(player_config(srv.base_url, max_concurrency=16))
        started = time.monotonic()
        await asyncio.gather(*(player.chat(HELLO, call_id=f"c{i}", role="solver") for i in range(16)))
        elapsed = time.monotonic() - started
        await player.aclose()
    assert elapsed < 0.3 * 4  # generous: they ran together, not one after another


async def test_requests_per_minute_limit_makes_the_excess_wait() -> None:
    limiter = RateLimiter(requests_per_minute=240, tokens_per_minute=None)  # 4 per second
    started = time.monotonic()
    for _ in range(241):
        await limiter.acquire(1)
    assert time.monotonic() - started >= 0.2


async def test_tokens_per_minute_limit_counts_the_servers_tokens() -> None:
    limiter = RateLimiter(requests_per_minute=None, tokens_per_minute=600)  # 10 tokens/s
    await limiter.acquire(100)
    limiter.settle(100, 600)  # the call really used 600: the bucket is empty now
    started = time.monotonic()
    await limiter.acquire(3)
    assert time.monotonic() - started >= 0.25


async def test_rate_limited_player_still_answers(server) -> None:
    player = build_player(player_config(server.base_url, requests_per_minute=6000,
                                        tokens_per_minute=100000))
    result = await player.chat(HELLO, call_id="a", role="solver")
    await player.aclose()
    assert result.text == "scripted-1 heard: Say hello"
