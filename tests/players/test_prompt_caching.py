"""Prompt caching: what each provider is asked to cache, and a bill that matches its usage fields.

Every test talks to the scripted server billing like a provider with a prompt cache, in the
provider's own wire format, and checks the request bodies it recorded.
"""

from __future__ import annotations

import pytest
from players_helpers import FAST, answer, player_config

from envduels.config import Price
from envduels.players import CallRecord, MemoryCache, build_player
from envduels.players._anthropic import MIN_CACHEABLE_TOKENS, cache_breakpoints
from envduels.testing import ScriptedServer

LONG = " ".join(["word"] * 1000)   # 5,000 characters: over the minimum cacheable prefix
SYSTEM = "You solve puzzles. " + LONG


def _anthropic(url: str, **kw: object):
    return player_config(url, provider="anthropic", model="claude-test",
                         api_key_env="ENVDUELS_ANTHROPIC", **kw)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("ENVDUELS_ANTHROPIC", "ak-test")


def _episode(turns: int) -> list[list[dict]]:
    """The message lists an episode of `turns` turns sends, turn by turn (replies by `answer`)."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Hint: go north. Observation: " + LONG}]
    out = []
    for t in range(1, turns + 1):
        out.append([dict(m) for m in messages])
        messages += [{"role": "assistant", "content": answer("claude-test", messages)},
                     {"role": "user", "content": f"Observation {t}: a wall."}]
    return out


def _marked(body: dict) -> list[str]:
    """Where a Messages API body carries cache_control: 'system' or 'messages[i]'."""
    where = []
    if isinstance(body.get("system"), list):
        where += ["system" for b in body["system"] if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            where += [f"messages[{i}]" for b in m["content"] if "cache_control" in b]
    return where


async def test_anthropic_breakpoints_are_on_the_system_prompt_first_turn_and_latest_turn() -> None:
    with ScriptedServer(answer) as srv:
        player = build_player(_anthropic(srv.base_url))
        for t, messages in enumerate(_episode(3), start=1):
            await player.chat(messages, call_id=f"ep:k:turn:{t}", role="solver")
        await player.aclose()
    bodies = [r["body"] for r in srv.requests]
    assert _marked(bodies[0]) == ["system", "messages[0]"]        # the first turn is the latest
    assert _marked(bodies[1]) == ["system", "messages[0]", "messages[2]"]
    assert _marked(bodies[2]) == ["system", "messages[0]", "messages[4]"]
    assert all(len(_marked(b)) <= 4 for b in bodies)                # the API's limit
    assert bodies[2]["messages"][4]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert bodies[2]["messages"][1]["content"] == answer("claude-test", _episode(1)[0])


async def test_anthropic_prefixes_under_the_minimum_get_no_breakpoint() -> None:
    short = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    system, turns = cache_breakpoints("Be brief.", [{"role": "user", "content": "Hi"}])
    assert (system, turns) == ("Be brief.", [{"role": "user", "content": "Hi"}])
    # the system prompt alone is short, the first turn brings the prefix over the minimum
    system, turns = cache_breakpoints("Be brief.", [{"role": "user", "content": LONG}])
    assert system == "Be brief." and "cache_control" in turns[0]["content"][0]
    assert MIN_CACHEABLE_TOKENS == 1024
    with ScriptedServer(answer) as srv:
        player = build_player(_anthropic(srv.base_url))
        await player.chat(short, call_id="c", role="solver")
        await player.aclose()
    assert srv.requests[0]["body"]["system"] == "Be brief."
    assert srv.requests[0]["body"]["messages"] == [{"role": "user", "content": "Hi"}]


async def test_cache_false_sends_no_breakpoint_and_no_prompt_cache_key() -> None:
    with ScriptedServer(answer) as srv:
        claude = build_player(_anthropic(srv.base_url, cache=False))
        gpt = build_player(player_config(srv.base_url, cache=False))
        messages = _episode(2)[1]
        await claude.chat(messages, call_id="ep:k:turn:2", role="solver")
        await gpt.chat(messages, call_id="ep:k:turn:2", role="solver")
        await claude.aclose()
        await gpt.aclose()
    assert _marked(srv.requests[0]["body"]) == [] and srv.requests[0]["body"]["system"] == SYSTEM
    assert "prompt_cache_key" not in srv.requests[1]["body"]


async def test_every_anthropic_turn_reads_the_previous_turns_from_cache_and_is_billed_so() -> None:
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3,
                  cache_write_per_mtok=3.75)
    with ScriptedServer(answer, prompt_cache=True, cache_min_tokens=1024) as srv:
        player = build_player(_anthropic(srv.base_url, price=price))
        results = [await player.chat(m, call_id=f"ep:k:turn:{t}", role="solver")
                   for t, m in enumerate(_episode(3), start=1)]
        await player.aclose()
    # words are tokens: system 1003, first turn 1004, each reply 4 + the previous message's
    # words, each later observation 4
    first = results[0]
    assert (first.input_tokens, first.cache_read_tokens, first.cache_write_tokens) == (
        2007, 0, 2007)
    second = results[1]
    reply1 = len(answer("claude-test", _episode(1)[0]).split())
    assert second.input_tokens == 2007 + reply1 + 4
    assert (second.cache_read_tokens, second.cache_write_tokens) == (2007, reply1 + 4)
    third = results[2]
    assert third.cache_read_tokens == second.input_tokens
    for r in results:
        uncached = r.input_tokens - r.cache_read_tokens - r.cache_write_tokens
        hand = (uncached * 3.0 + r.cache_read_tokens * 0.3 + r.cache_write_tokens * 3.75
                + r.output_tokens * 15.0) / 1e6
        assert r.cost_usd == pytest.approx(hand, abs=1e-12)
    usage = player.usage["solver"]
    assert usage.cache_read_tokens == 2007 + second.input_tokens
    assert usage.saved_usd == pytest.approx(
        sum(r.cache_read_tokens * (3.0 - 0.3) - r.cache_write_tokens * (3.75 - 3.0)
            for r in results) / 1e6)


async def test_prompt_cache_key_is_stable_across_an_episodes_turns_and_differs_between_episodes(
        server) -> None:
    player = build_player(player_config(server.base_url))
    for episode in ("ep-a", "ep-b"):
        for t, messages in enumerate(_episode(3), start=1):
            await player.chat(messages, call_id=f"ep:{episode}:turn:{t}", role="solver")
    await player.aclose()
    keys = [r["body"]["prompt_cache_key"] for r in server.requests]
    assert len(set(keys[:3])) == 1 and len(set(keys[3:])) == 1
    assert keys[0] != keys[3]
    assert all(k.startswith("envduels-") and len(k) <= 64 for k in keys)


async def test_an_authors_jobs_share_one_prompt_cache_key_for_their_shared_task_prompt(server) -> None:
    player = build_player(player_config(server.base_url))
    task = [{"role": "system", "content": "Write environments."},
            {"role": "user", "content": "The task prompt with worked examples."}]
    await player.chat(task, call_id="author:r1-tester-0:attempt:0", role="author")
    await player.chat(task + [{"role": "assistant", "content": "x"},
                              {"role": "user", "content": "repair"}],
                      call_id="author:r1-tester-0:attempt:1", role="author")
    await player.chat(task, call_id="author:r1-tester-1:attempt:0", role="author")
    await player.aclose()
    keys = {r["body"]["prompt_cache_key"] for r in server.requests}
    assert len(keys) == 1


async def test_a_server_refusing_prompt_cache_key_is_asked_once_without_it_and_never_again() -> None:
    with ScriptedServer(answer, refuse_params=["prompt_cache_key"]) as srv:
        player = build_player(player_config(srv.base_url), retry_policy=FAST)
        first = await player.chat(_episode(1)[0], call_id="ep:a:turn:1", role="solver")
        second = await player.chat(_episode(2)[1], call_id="ep:a:turn:2", role="solver")
        await player.aclose()
    sent = ["prompt_cache_key" in r["body"] for r in srv.requests]
    assert sent == [True, False, False]          # refused once, remembered for the session
    assert first.text.startswith("scripted-1 heard") and second.retries == 0
    assert first.retries == 0                     # not a retry: the run never counts it as one


async def test_a_bad_request_not_about_the_cache_key_still_fails_at_once() -> None:
    from envduels.players import BadRequest

    with ScriptedServer(answer, faults=["400"]) as srv:
        player = build_player(player_config(srv.base_url), retry_policy=FAST)
        with pytest.raises(BadRequest, match="temperature"):
            await player.chat(_episode(1)[0], call_id="ep:a:turn:1", role="solver")
        await player.aclose()
    assert srv.request_count == 1


async def test_openai_usage_splits_cached_and_reasoning_tokens_and_bills_them_at_their_prices() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    with ScriptedServer(answer, prompt_cache=True, reasoning_words=30) as srv:
        player = build_player(player_config(srv.base_url, price=price))
        turns = _episode(2)
        a = await player.chat(turns[0], call_id="ep:a:turn:1", role="solver")
        b = await player.chat(turns[1], call_id="ep:a:turn:2", role="solver")
        await player.aclose()
    assert (a.cache_read_tokens, a.cache_write_tokens) == (0, 0)
    assert b.cache_read_tokens == a.input_tokens       # the whole first prompt, read back
    assert b.reasoning_tokens == 30 and b.output_tokens == 30 + len(
        answer("scripted-1", turns[1]).split())
    hand = ((b.input_tokens - b.cache_read_tokens) * 2.0 + b.cache_read_tokens * 0.5
            + b.output_tokens * 8.0) / 1e6
    assert b.cost_usd == pytest.approx(hand, abs=1e-12)
    assert player.usage["solver"].reasoning_tokens == 60


async def test_anthropic_thinking_is_billed_as_output_and_kept_out_of_the_text() -> None:
    with ScriptedServer(answer, reasoning_words=25) as srv:
        player = build_player(_anthropic(srv.base_url))
        r = await player.chat(_episode(1)[0], call_id="ep:a:turn:1", role="solver")
        await player.aclose()
    assert r.text == answer("claude-test", _episode(1)[0])
    assert r.output_tokens == 25 + len(r.text.split())


async def test_cache_hints_leave_the_request_key_and_earlier_records_valid() -> None:
    cache = MemoryCache()
    messages = _episode(2)[1]
    with ScriptedServer(answer) as srv:
        off = build_player(player_config(srv.base_url, cache=False), cache=cache)
        first = await off.chat(messages, call_id="ep:a:turn:2", role="solver")
        await off.aclose()
        on = build_player(player_config(srv.base_url), cache=cache)
        again = await on.chat(messages, call_id="ep:a:turn:2", role="solver")
        await on.aclose()
        assert again.cached and again.request_key == first.request_key
        # a record written before the split (no cache fields) still answers, as all uncached
        record = cache.get(first.request_key).to_json()
        record["usage"] = {"input_tokens": 7, "output_tokens": 3}
        cache.put(first.request_key, CallRecord.from_json(record))
        player = build_player(player_config(srv.base_url), cache=cache)
        old = await player.chat(messages, call_id="ep:a:turn:2", role="solver")
        await player.aclose()
    assert srv.request_count == 1
    assert old.cached and (old.input_tokens, old.cache_read_tokens, old.reasoning_tokens) == (7, 0, 0)


async def test_a_cached_count_larger_than_the_prompt_is_billed_as_uncached_without_a_paid_retry() -> None:
    # billed as given it would be negative uncached input, a refund; retried, the call is paid
    # again (and with max_retries 0 the answer was lost). The answer is kept, its whole prompt
    # billed at the input price.
    with ScriptedServer(answer, faults=["usage_cached_over"]) as srv:
        cfg = player_config(srv.base_url, max_retries=0)
        cfg = cfg.model_copy(update={"price": Price(input_per_mtok=2.0, output_per_mtok=8.0,
                                                    cached_input_per_mtok=0.5)})
        player = build_player(cfg, retry_policy=FAST)
        r = await player.chat(_episode(1)[0], call_id="ep:a:turn:1", role="solver")
        await player.aclose()
    assert (r.retries, srv.request_count, r.cache_read_tokens) == (0, 1, 0)
    assert r.input_tokens > 0
    assert r.cost_usd == pytest.approx((2.0 * r.input_tokens + 8.0 * r.output_tokens) / 1e6)


async def test_a_negative_cache_count_is_a_malformed_answer_and_retried() -> None:
    with ScriptedServer(answer, faults=["usage_cached_over"]) as srv:   # Anthropic: -5 read
        player = build_player(_anthropic(srv.base_url), retry_policy=FAST)
        r = await player.chat(_episode(1)[0], call_id="ep:a:turn:1", role="solver")
        await player.aclose()
    assert r.retries == 1 and r.cache_read_tokens == 0 and srv.request_count == 2
