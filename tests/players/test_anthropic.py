"""The anthropic provider, through the official SDK, against the scripted /v1/messages route."""

from __future__ import annotations

import pytest
from players_helpers import FAST, HELLO, answer, player_config

from envduels.errors import UserError
from envduels.players import ContextOverflow, MemoryCache, build_player
from envduels.players._anthropic import split_system
from envduels.testing import ScriptedServer


def _anthropic(base_url: str, **kw):
    return player_config(base_url, provider="anthropic", model="claude-test",
                         api_key_env="ENVDUELS_ANTHROPIC", **kw)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("ENVDUELS_ANTHROPIC", "ak-test")


async def test_system_prompt_is_sent_apart_and_the_answer_counted(server) -> None:
    player = build_player(_anthropic(server.base_url, max_tokens=50), cache=MemoryCache())
    result = await player.chat(HELLO, call_id="c1", role="author")
    again = await player.chat(HELLO, call_id="c1", role="author")
    await player.aclose()
    assert result.text == "claude-test heard: Say hello"
    assert (result.input_tokens, result.output_tokens, result.finish_reason) == (5, 4, "end_turn")
    assert again.cached and server.request_count == 1
    sent = server.requests[0]
    assert sent["path"] == "/v1/messages"
    assert sent["params"] == {"max_tokens": 50}
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}


async def test_anthropic_faults_are_retried_and_rejections_are_immediate() -> None:
    with ScriptedServer(answer, faults=["429:0", "500", "drop"]) as srv:
        player = build_player(_anthropic(srv.base_url), retry_policy=FAST)
        ok = await player.chat(HELLO, call_id="c1", role="solver")
        srv.add_faults("401")
        with pytest.raises(UserError, match="check the key in ENVDUELS_ANTHROPIC"):
            await player.chat(HELLO, call_id="c2", role="solver")
        await player.aclose()
    assert ok.retries == 3 and ok.text == "claude-test heard: Say hello"
    assert srv.request_count == 5


async def test_anthropic_context_overflow() -> None:
    with ScriptedServer(answer, faults=["overflow"]) as srv:
        player = build_player(_anthropic(srv.base_url), retry_policy=FAST)
        with pytest.raises(ContextOverflow):
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()


def test_split_system_merges_consecutive_turns_of_one_role() -> None:
    system, turns = split_system([
        {"role": "system", "content": "S"}, {"role": "user", "content": "a"},
        {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}])
    assert system == "S"
    assert turns == [{"role": "user", "content": "a\n\nb"}, {"role": "assistant", "content": "c"}]
