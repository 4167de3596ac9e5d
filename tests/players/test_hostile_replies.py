"""A hostile or broken server's 200 is a malformed answer (retried), never a crash, never a
negative or infinite token count, and never recorded as the model's answer."""

from __future__ import annotations

import pytest
from players_helpers import FAST, HELLO, answer, player_config

from envduels.players import MemoryCache, ProviderError, build_player
from envduels.testing import ScriptedServer

EXPECTED = "scripted-1 heard: Say hello"
HOSTILE = ["usage_inf", "usage_negative", "usage_fraction", "deep", "finish_error",
           "usage_cached_over"]


async def chat_through(faults: list[str], provider: str, monkeypatch, **overrides):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    cache = MemoryCache()
    with ScriptedServer(answer, faults=faults) as srv:
        player = build_player(player_config(srv.base_url, provider=provider, **overrides),
                              cache=cache, retry_policy=FAST)
        try:
            result = await player.chat(HELLO, call_id="c1", role="solver")
        finally:
            await player.aclose()
    return result, player, cache, srv


# An OpenAI-style answer claiming more cached tokens than its prompt is sound apart from its
# bill: it is kept and billed as uncached (tests/players/test_prompt_caching.py), not retried.
@pytest.mark.parametrize(("fault", "provider"), [
    (fault, provider) for fault in HOSTILE for provider in ("openai", "anthropic")
    if (fault, provider) != ("usage_cached_over", "openai")])
async def test_a_hostile_200_is_retried_and_the_real_answer_is_recorded(fault, provider,
                                                                        monkeypatch) -> None:
    result, player, cache, srv = await chat_through([fault], provider, monkeypatch)
    assert (result.text, result.retries, result.finish_reason) == (
        EXPECTED, 1, "stop" if provider == "openai" else "end_turn")
    assert (result.input_tokens, result.output_tokens) == (5, 4)
    assert [r["fault"] for r in srv.requests] == [fault, None]
    usage = player.usage["solver"]
    assert (usage.calls, usage.retries, usage.input_tokens, usage.output_tokens) == (1, 1, 5, 4)
    assert cache.get(result.request_key).to_json()["usage"] == {
        "input_tokens": 5, "output_tokens": 4, "cache_read_tokens": 0, "cache_write_tokens": 0,
        "reasoning_tokens": 0}


@pytest.mark.parametrize(("fault", "reason"), [
    ("usage_inf", "malformed response (usage prompt_tokens is inf, not a token count)"),
    ("usage_negative", "malformed response (usage prompt_tokens is -1600000000, not a token count)"),
    ("usage_fraction", "malformed response (usage prompt_tokens is 2.5, not a token count)"),
    ("deep", "malformed response (RecursionError)"),
    ("finish_error", "malformed response (finish_reason 'error')"),
])
async def test_a_server_that_only_sends_hostile_200s_ends_in_provider_error_with_the_reason(
        fault, reason, monkeypatch) -> None:
    with pytest.raises(ProviderError) as caught:
        await chat_through([fault] * 3, "openai", monkeypatch, max_retries=2)
    assert str(caught.value) == f"player 'tester': {reason}; still failing after 2 retries"


async def test_anthropic_names_its_own_usage_field(monkeypatch) -> None:
    with pytest.raises(ProviderError) as caught:
        await chat_through(["usage_negative"] * 2, "anthropic", monkeypatch, max_retries=1)
    assert str(caught.value) == (
        "player 'tester': malformed response (usage input_tokens is -1600000000, not a token "
        "count); still failing after 1 retry")
