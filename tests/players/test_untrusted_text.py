"""Lone surrogates from environments (observations) and servers (replies) never crash a call,
a cache key or a resume; ordinary text keeps its cache key."""

from __future__ import annotations

from dataclasses import replace

from players_helpers import HELLO, JsonFileCache, player_config

from envduels._text import valid_text
from envduels.players import MemoryCache, build_player, request_key
from envduels.testing import ScriptedServer

ORDINARY = {"provider": "openai", "endpoint": "http://127.0.0.1:1/v1", "model": "m",
            "messages": [{"role": "user", "content": "Guess 7 — déjà vu 🎲"}],
            "params": {"seed": 5, "temperature": 0.8, "max_tokens": 16}}


def test_ordinary_text_keeps_the_cache_key_it_always_had():
    assert request_key(ORDINARY) == "2205218b2b740b50c7c1b7479d1c29e571fa184c2a283d74b7011a5a3c61194a"


def test_a_request_with_a_lone_surrogate_has_a_deterministic_key_of_its_own():
    odd = {**ORDINARY, "messages": [{"role": "user", "content": "start \ud800 here"}]}
    assert request_key(odd) == request_key({**odd})
    assert request_key(odd) != request_key(ORDINARY)
    assert len(request_key(odd)) == 64


def test_valid_text_replaces_only_lone_surrogates():
    ordinary = "déjà vu 🎲 \x1b[2J"
    assert valid_text(ordinary) is ordinary
    assert valid_text("a\ud800b\udcffc") == "a\ufffdb\ufffdc"


async def test_an_observation_with_a_lone_surrogate_is_sent_and_keyed_as_the_replacement_char():
    with ScriptedServer(lambda model, messages: "\\boxed{1}") as server:
        cache = MemoryCache()
        player = build_player(player_config(server.base_url), cache=cache)
        odd = [{"role": "user", "content": "start \ud800 here"}]
        result = await player.chat(odd, call_id="c1", role="solver")
        clean = await player.chat([{"role": "user", "content": "start \ufffd here"}],
                                  call_id="c1", role="solver")
        await player.aclose()
    assert result.text == "\\boxed{1}"
    assert server.requests[0]["messages"] == [{"role": "user", "content": "start \ufffd here"}]
    assert (clean.cached, clean.request_key) == (True, result.request_key)
    assert cache.get(result.request_key).request["messages"] == [
        {"role": "user", "content": "start \ufffd here"}]


async def test_a_reply_with_a_lone_surrogate_is_cleaned_and_the_next_turn_and_a_resume_work(
        tmp_path):
    cache = JsonFileCache(tmp_path / "calls.json")  # a resume reads the records back from disk
    with ScriptedServer(lambda model, messages: f"hi \ud800 after {len(messages)}") as server:
        player = build_player(player_config(server.base_url), cache=cache, run_seed=1)
        first = await player.chat(HELLO, call_id="t0", role="solver")
        turn2 = [*HELLO, {"role": "assistant", "content": first.text},
                 {"role": "user", "content": "again"}]
        second = await player.chat(turn2, call_id="t1", role="solver")
        await player.aclose()
        resumed = build_player(player_config(server.base_url), cache=cache, run_seed=1)
        again = await resumed.chat(turn2, call_id="t1", role="solver")
        await resumed.aclose()
    assert (first.text, second.text) == ("hi \ufffd after 2", "hi \ufffd after 4")
    assert (again.cached, again.text) == (True, second.text)
    assert server.request_count == 2
    assert cache.get(first.request_key).text == "hi \ufffd after 2"


async def test_a_record_cached_before_replies_were_cleaned_is_served_clean():
    cache = MemoryCache()
    with ScriptedServer(lambda model, messages: "ok") as server:
        player = build_player(player_config(server.base_url), cache=cache)
        first = await player.chat(HELLO, call_id="c1", role="solver")
        record = cache.get(first.request_key)
        cache.put(first.request_key, replace(record, text="poisoned \ud800"))
        again = await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert (again.cached, again.text) == (True, "poisoned \ufffd")


async def test_an_anthropic_reply_with_a_lone_surrogate_is_cleaned(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with ScriptedServer(lambda model, messages: "hi \udcff") as server:
        player = build_player(player_config(server.base_url, provider="anthropic"))
        result = await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert result.text == "hi \ufffd"
