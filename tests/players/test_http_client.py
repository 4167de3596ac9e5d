"""The SDKs' HTTP clients carry the player's timeouts and connection limits, in the SDK's own
HTTP library's types (openai and anthropic build on httpx2 in recent releases; given httpx's
`Timeout`, httpx2's client made every timeout phase that object)."""

from __future__ import annotations

import asyncio

import pytest
from players_helpers import player_config

from envduels.players._base import sdk_http_client


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdk_http_client_gets_the_players_timeouts_and_connection_limits(sdk) -> None:
    module = pytest.importorskip(sdk)
    cfg = player_config("http://127.0.0.1:9", timeout_s=30.0, max_concurrency=3)
    client = sdk_http_client(module.DefaultAsyncHttpxClient, cfg)
    try:
        timeout = client.timeout
        assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (10.0, 30.0, 30.0, 30.0)
        assert client._transport._pool._max_connections == cfg.concurrency.http_connections
    finally:
        asyncio.run(client.aclose())
