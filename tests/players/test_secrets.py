"""No API key ever reaches logs, exception messages, cache records or reprs."""

from __future__ import annotations

import json
import logging

import pytest
from players_helpers import FAST, HELLO, answer, player_config

from envduels.errors import UserError
from envduels.players import MemoryCache, ProviderError, build_player
from envduels.testing import ScriptedServer
from envduels.testing._server import _json

FAKE_KEY = "sk-envduels-FAKE-7d1c9e3a52b4f8"


class EchoingServer(ScriptedServer):
    """A hostile server that quotes the caller's credentials back in its error messages."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    async def _dispatch(self, method, path, headers, body):
        self.request_count += 1
        return _json(self.status, {"error": {"message": f"denied for {headers.get('authorization')}",
                                             "type": "invalid_request_error", "code": None}})


@pytest.fixture
def debug_logs(caplog):
    for name in ("", "openai", "httpx", "httpcore", "envduels"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def _exception_chain_text(exc: BaseException | None) -> str:
    """str and repr of an exception and everything chained to it, request headers included."""
    parts = []
    while exc is not None:
        parts += [str(exc), repr(exc), repr(getattr(getattr(exc, "request", None), "headers", ""))]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def _everything_logged(caplog) -> str:
    return "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)


async def test_the_key_is_used_but_never_logged_cached_or_shown(monkeypatch, debug_logs) -> None:
    monkeypatch.setenv("ENVDUELS_SECRET", FAKE_KEY)
    cache = MemoryCache()
    with ScriptedServer(answer, api_key=FAKE_KEY, faults=["500"]) as srv:
        player = build_player(player_config(srv.base_url, api_key_env="ENVDUELS_SECRET"),
                              cache=cache, retry_policy=FAST)
        result = await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert result.text == "scripted-1 heard: Say hello"  # the server accepted the key
    assert any(r.name.startswith("openai") for r in debug_logs.records), "SDK debug logs captured"
    assert FAKE_KEY not in _everything_logged(debug_logs)
    assert FAKE_KEY not in json.dumps(cache.get(result.request_key).to_json())
    assert FAKE_KEY not in repr(player) + repr(result) + repr(player.usage)
    assert FAKE_KEY not in json.dumps(srv.requests)


async def test_a_rejected_key_error_does_not_contain_the_key(monkeypatch, debug_logs) -> None:
    monkeypatch.setenv("ENVDUELS_SECRET", FAKE_KEY)
    with ScriptedServer(answer, api_key="sk-the-right-one") as srv:
        player = build_player(player_config(srv.base_url, api_key_env="ENVDUELS_SECRET"))
        with pytest.raises(UserError) as err:
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert "check the key in ENVDUELS_SECRET" in str(err.value)
    assert FAKE_KEY not in _exception_chain_text(err.value)
    assert err.value.__cause__ is None and err.value.__context__ is None
    assert FAKE_KEY not in _everything_logged(debug_logs)


@pytest.mark.parametrize(("status", "error"), [(400, UserError), (500, ProviderError)])
async def test_a_server_quoting_the_key_back_is_scrubbed(monkeypatch, debug_logs, status,
                                                         error) -> None:
    monkeypatch.setenv("ENVDUELS_SECRET", FAKE_KEY)
    with EchoingServer(status) as srv:
        player = build_player(player_config(srv.base_url, api_key_env="ENVDUELS_SECRET",
                                            max_retries=1), retry_policy=FAST)
        with pytest.raises(error) as err:
            await player.chat(HELLO, call_id="c1", role="solver")
        await player.aclose()
    assert "denied for Bearer ***" in str(err.value)
    assert FAKE_KEY not in _exception_chain_text(err.value)
    assert FAKE_KEY not in _everything_logged(debug_logs)
