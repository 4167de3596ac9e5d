"""A server frees what it reaps (serve/_connection.py, serve/_session.py): a session idle past
`--idle-timeout` has its sandbox killed and its WebSocket closed with code 4408 and the reason,
so OpenEnv's slot returns at once; a connection that never reset is reaped the same way; an HTTP
episode reaped answers its next `/step` with 410 and the reason. Through OpenEnv's own client,
on the shared `short_server` (`--max-sessions 3 --idle-timeout 2`)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

GenericEnvClient = pytest.importorskip(
    "openenv.core.generic_client", reason="the serve extra is not installed: pip install 'envduels[serve]'"
).GenericEnvClient
import json  # noqa: E402

import websockets  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402  (after the extra's check)

IDLE_REASON = ("session expired: it was idle for more than 2 s; reconnect and reset to start "
               "another")


async def _session_when_free(url: str, seed: int, deadline_s: float) -> object:
    """A fresh client that got a session and won an episode in it, trying until `deadline_s`;
    the last refusal fails the test."""
    refused = ""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        env = GenericEnvClient(base_url=url)
        try:
            first = await env.reset(env_id="marker", seed=seed)
        except (RuntimeError, ConnectionClosed) as err:
            refused = str(err)
            await env.close()
            await asyncio.sleep(0.3)
            continue
        assert first.observation["text"].startswith(
            f"Observation: seed {seed}; markers before mine: []\n")
        won = await env.step({"message": "\\boxed{win}"})
        assert (won.reward, won.done) == (1.0, True)
        return env
    raise AssertionError(f"no session within {deadline_s} s: {refused}")


async def _idle_socket(url: str, seed: int | None) -> websockets.ClientConnection:
    """A WebSocket on `url`'s /ws that reset once (when `seed` is given) and then stays silent.
    A raw socket, not OpenEnv's client: that one reconnects by itself once the server closes
    its socket, so the close frame and its reason are read here."""
    ws = await websockets.connect(url.replace("http://", "ws://").rstrip("/") + "/ws")
    if seed is not None:
        await ws.send(json.dumps({"type": "reset", "data": {"env_id": "marker", "seed": seed}}))
        assert json.loads(await ws.recv())["type"] == "observation"
    return ws


async def _told(ws: websockets.ClientConnection) -> tuple[int, str]:
    """The close code and reason the server sent a reaped socket."""
    await asyncio.wait_for(ws.wait_closed(), 30)
    assert ws.close_code is not None
    return ws.close_code, ws.close_reason


@pytest.mark.slow
def test_after_three_idle_sessions_are_reaped_a_fourth_client_gets_a_session(short_server):
    url = short_server.url

    async def main() -> None:
        # two reset, then silent but connected; the third connected and never sent a thing
        idle = [await _idle_socket(url, seed) for seed in (1, 2, None)]   # --max-sessions 3
        refused = GenericEnvClient(base_url=url)
        try:
            await refused.reset(env_id="marker", seed=3)
        except RuntimeError as err:
            assert "CAPACITY_REACHED" in str(err)
        except ConnectionClosed:
            pass   # OpenEnv sent its refusal and closed before the reset went out
        else:
            raise AssertionError("a fourth session while three clients hold theirs")
        await refused.close()

        # every slot comes back: a fourth, fifth and sixth client each get a session
        fresh = [await _session_when_free(url, seed, deadline_s=30) for seed in (4, 5, 6)]
        for ws in idle:
            assert await _told(ws) == (4408, IDLE_REASON)
        for env in fresh:
            await env.close()

    asyncio.run(main())
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"


@pytest.mark.slow
def test_a_reaped_http_episode_says_it_expired(short_server):
    url = short_server.url
    started = httpx.post(f"{url}/reset", json={"env_id": "marker", "seed": 5, "episode_id": "e5"})
    assert started.status_code == 200, started.text
    time.sleep(4)                       # --idle-timeout 2, checked every 0.5 s
    late = httpx.post(f"{url}/step", json={"action": {"message": "\\boxed{look}"},
                                           "episode_id": "e5"})
    assert (late.status_code, late.json()) == (410, {"detail": (
        "episode 'e5' expired: it was idle for more than 2 s; /reset to start another")})
    again = httpx.post(f"{url}/reset", json={"env_id": "marker", "seed": 5, "episode_id": "e5"})
    assert again.status_code == 200
    won = httpx.post(f"{url}/step", json={"action": {"message": "\\boxed{win}"},
                                          "episode_id": "e5"})
    assert (won.status_code, won.json()["done"]) == (200, True)


@pytest.mark.slow
def test_duel_client_reports_a_reaped_step_and_resets_on_a_new_session(short_server):
    from envduels.serve.client import DuelClient

    with DuelClient(short_server.url) as env:
        env.reset(env_id="marker", seed=6)
        time.sleep(4)                   # a trainer busy elsewhere past --idle-timeout 2
        with pytest.raises(RuntimeError) as caught:
            env.play("\\boxed{look}")
        # OpenEnv's client reconnected by itself: the fresh session says why it may be there
        assert str(caught.value) == (
            "the server closed the session: no episode is running: reset first (a session idle "
            "for more than 2 s is ended and its WebSocket closed; OpenEnv's client then connects "
            "afresh) (code: EXECUTION_ERROR)")
        assert env.done and env.get_reward() == 0.0
        assert env.reset(env_id="marker", seed=6).startswith("Observation: seed 6;")
        assert env.play("\\boxed{win}") == "you win" and env.get_reward() == 1.0
