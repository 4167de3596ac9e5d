"""A wrong key, model or request fails at once with one actionable line, never with retries."""

from __future__ import annotations

import pytest
from players_helpers import FAST, HELLO, answer, player_config

from envduels.errors import UserError
from envduels.players import ContextOverflow, build_player
from envduels.testing import ScriptedServer


def test_missing_key_variable_says_which_variable_to_set(monkeypatch) -> None:
    monkeypatch.delenv("ENVDUELS_TEST_KEY", raising=False)
    with pytest.raises(UserError) as err:
        build_player(player_config("http://127.0.0.1:9/v1", api_key_env="ENVDUELS_TEST_KEY"))
    assert "set ENVDUELS_TEST_KEY" in str(err.value)
    assert "\n" not in str(err.value)


def test_hosted_openai_without_a_key_asks_for_openai_api_key(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="set OPENAI_API_KEY"):
        build_player(player_config(None))


def test_anthropic_without_a_key_asks_for_anthropic_api_key(monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UserError, match="set ANTHROPIC_API_KEY"):
        build_player(player_config(None, provider="anthropic"))


@pytest.mark.parametrize(
    ("fault", "expected"),
    [("401", "rejected the API key (401)"), ("404", "unknown model or wrong base_url (404)"),
     ("400", "bad request (400)")])
async def test_rejections_fail_immediately_with_one_line_and_zero_retries(fault, expected) -> None:
    with ScriptedServer(answer, faults=[fault]) as srv:
        player = build_player(player_config(srv.base_url, max_retries=6), retry_policy=FAST)
        with pytest.raises(UserError) as err:
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert expected in str(err.value)
    assert "\n" not in str(err.value)
    assert srv.request_count == 1


async def test_unknown_model_names_the_model() -> None:
    with ScriptedServer(answer, models=["real-model"]) as srv:
        player = build_player(player_config(srv.base_url, model="typo-model"), retry_policy=FAST)
        with pytest.raises(UserError, match="model 'typo-model'"):
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert srv.request_count == 1


async def test_context_overflow_is_its_own_error_and_not_retried() -> None:
    with ScriptedServer(answer, faults=["overflow"]) as srv:
        player = build_player(player_config(srv.base_url), retry_policy=FAST)
        with pytest.raises(ContextOverflow, match="does not fit the context"):
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert srv.request_count == 1


async def test_unknown_role_is_a_programming_error() -> None:
    player = build_player(player_config("http://127.0.0.1:9/v1"))
    with pytest.raises(ValueError, match="role"):
        await player.chat(HELLO, call_id="c1", role="judge")
    await player.aclose()
