"""Each session is its own sandbox: 32 concurrent sessions through OpenEnv's client never see
one another's files, killing one session's worker ends only that session, and the server goes
on answering."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import httpx
import pytest

SESSIONS = 32

GenericEnvClient = pytest.importorskip(
    "openenv.core.generic_client", reason="the serve extra is not installed: pip install 'envduels[serve]'"
).GenericEnvClient



def _processes_holding(server, marker: str) -> list[int]:
    """The host pids of the sandboxed processes whose private /tmp holds `marker`: one session's
    instance (with templates, its worker, its init and the fork that set its namespaces up)."""
    found = []
    for pid in server.descendants():
        try:
            if os.path.exists(f"/proc/{pid}/root/tmp/{marker}"):
                found.append(pid)
        except OSError:
            continue
    assert found, f"no process under the server holds /tmp/{marker}"
    return found


async def _session(url: str, seed: int, started: asyncio.Barrier, looked: asyncio.Event,
                   killed: asyncio.Event, victim: int) -> list[str]:
    seen = []
    async with GenericEnvClient(base_url=url) as env:
        first = await env.reset(env_id="marker", seed=seed)
        seen.append(first.observation["text"])
        await started.wait()            # every session has reset: all 32 markers exist now
        look = await env.step({"message": "\\boxed{look}"})
        seen.append(look.observation["text"])
        if seed == 0:
            looked.set()
        await killed.wait()
        try:
            again = await env.step({"message": "\\boxed{look}"})
            seen.append(again.observation["text"])
        except RuntimeError as err:
            seen.append(f"ERROR {err}")
        if seed != victim:
            won = await env.step({"message": "\\boxed{win}"})
            seen.append(f"reward {won.reward} done {won.done}")
    return seen


def test_32_concurrent_sessions_are_separate_sandboxes_and_a_killed_one_ends_alone(server):
    victim = 7

    async def main() -> list[list[str]]:
        started, looked, killed = asyncio.Barrier(SESSIONS), asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(_session(server.url, s, started, looked, killed, victim))
                 for s in range(SESSIONS)]
        await asyncio.wait_for(looked.wait(), 240)
        await asyncio.sleep(0.5)
        for pid in _processes_holding(server, f"marker-{victim}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        health = await asyncio.to_thread(httpx.get, f"{server.url}/health", timeout=10)
        assert health.json()["status"] == "healthy"
        killed.set()
        return await asyncio.wait_for(asyncio.gather(*tasks), 240)

    results = asyncio.run(main())
    for seed, seen in enumerate(results):
        assert seen[0].startswith(f"Observation: seed {seed}; markers before mine: []\n")
        assert seen[1].startswith(f"Observation: markers: ['marker-{seed}']\n"), seen[1]
        if seed == victim:
            assert seen[2].startswith("ERROR Server error: environment fault:"), seen[2]
            assert "the episode ended (incomplete)" in seen[2]
        else:
            assert seen[2].startswith(f"Observation: markers: ['marker-{seed}']\n"), seen[2]
            assert seen[3] == "reward 1.0 done True"
    assert httpx.get(f"{server.url}/health").json()["status"] == "healthy"


def test_an_idle_session_is_reaped_and_told_so(short_server):
    import json

    import websockets

    ws_url = short_server.url.replace("http://", "ws://").rstrip("/") + "/ws"

    async def raw() -> tuple[int, str]:
        async with websockets.connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"env_id": "marker", "seed": 1}}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await ws.wait_closed()      # --idle-timeout 2: the server closes it, with why
            assert ws.close_code is not None
            return ws.close_code, ws.close_reason

    async def through_openenv() -> str:
        async with GenericEnvClient(base_url=short_server.url) as env:
            await env.reset(env_id="marker", seed=1)
            await asyncio.sleep(4)
            with pytest.raises(RuntimeError) as caught:   # it reconnected to a fresh session
                await env.step({"message": "\\boxed{look}"})
            return str(caught.value)

    assert asyncio.run(asyncio.wait_for(raw(), 30)) == (
        4408, "session expired: it was idle for more than 2 s; reconnect and reset to start "
              "another")
    assert asyncio.run(through_openenv()) == (
        "Server error: no episode is running: reset first (a session idle for more than 2 s is "
        "ended and its WebSocket closed; OpenEnv's client then connects afresh) "
        "(code: EXECUTION_ERROR)")


def test_max_sessions_caps_the_sandboxes_alive_at_once(short_server):
    url = short_server.url
    clients = [GenericEnvClient(base_url=url).sync() for _ in range(3)]   # --max-sessions 3
    try:
        for seed, env in enumerate(clients):
            env.reset(env_id="marker", seed=seed)
        full = httpx.post(f"{url}/reset", json={"env_id": "marker", "seed": 9})
        assert full.status_code == 503
        assert full.json()["detail"].startswith("the server is at --max-sessions 3")
        clients.pop().close()           # its sandbox goes with it (the server closes it soon)
        deadline = time.monotonic() + 20
        while (again := httpx.post(f"{url}/reset", json={"env_id": "marker", "seed": 9})
               ).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert again.status_code == 200, again.text
        eid = again.json()["observation"]["episode_id"]
        won = httpx.post(f"{url}/step", json={"action": {"message": "\\boxed{win}"},
                                              "episode_id": eid}).json()
        assert (won["reward"], won["done"]) == (1.0, True)
    finally:
        for env in clients:
            env.close()
