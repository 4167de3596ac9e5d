"""`envduels serve --workers 2`: two whole server processes at one address. An HTTP episode lives
in the process its id names, whichever process a request reaches; `--max-sessions` counts the
sandboxes and connections of both; a server process killed ends only the sessions it held,
each client told it was not the environment, and another takes its place; both go when the
supervisor does. Through OpenEnv's own client, `DuelClient` and plain HTTP, on a real server
(`marker` sessions: the sandbox of the reset with seed S holds /tmp/marker-S)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import httpx
import pytest

from envduels.serve._shared import owner

from .conftest import MARKER

GenericEnvClient = pytest.importorskip(
    "openenv.core.generic_client", reason="the serve extra is not installed: pip install 'envduels[serve]'"
).GenericEnvClient
from envduels.serve.client import DuelClient  # noqa: E402  (needs the serve extra)

pytestmark = pytest.mark.slow   # a server of its own: seconds of CPU to start

CAP = 6
LOST = ("the connection ended without a word from the server (the server process that held "
        "the session stopped, or the network failed: not the environment's fault); reset to "
        "start another")


@pytest.fixture(scope="module")
def pair(serve):
    return serve(MARKER, "--workers", "2", "--max-sessions", str(CAP))


def ids_of(process: int, count: int, prefix: str) -> list[str]:
    """`count` HTTP episode ids that server process `process` of 2 holds."""
    found, k = [], 0
    while len(found) < count:
        if owner(f"{prefix}-{k}", 2) == process:
            found.append(f"{prefix}-{k}")
        k += 1
    return found


def reset(url: str, episode_id: str | None, seed: int) -> httpx.Response:
    body: dict[str, object] = {"env_id": "marker", "seed": seed}
    if episode_id is not None:
        body["episode_id"] = episode_id
    with httpx.Client() as client:   # a new connection each time: either process may take it
        return client.post(f"{url}/reset", json=body, timeout=60)


def step(url: str, episode_id: str, move: str) -> httpx.Response:
    with httpx.Client() as client:
        return client.post(f"{url}/step", json={"action": {"message": f"\\boxed{{{move}}}"},
                                                "episode_id": episode_id}, timeout=60)


def test_an_http_episode_lives_in_the_process_its_id_names_whichever_takes_the_request(pair):
    chosen = dict(zip((10, 11, 12, 20, 21, 22), ids_of(0, 3, "route") + ids_of(1, 3, "route"),
                      strict=True))
    for seed, eid in chosen.items():
        started = reset(pair.url, eid, seed)
        assert started.status_code == 200, started.text
        assert started.json()["observation"]["episode_id"] == eid
        assert pair.holder(f"marker-{seed}") == f"envduels-srv{owner(eid, 2)}"
    for seed, eid in chosen.items():   # every request finds its episode, from any connection
        for _ in range(2):
            looked = step(pair.url, eid, "look")
            assert looked.status_code == 200, looked.text
            assert looked.json()["observation"]["text"].startswith(
                f"Observation: markers: ['marker-{seed}']\n")
        won = step(pair.url, eid, "win").json()
        assert (won["reward"], won["done"]) == (1.0, True)
        assert step(pair.url, eid, "look").status_code == 404   # over: forgotten everywhere
    # a reset without an id gets one of the process that took it, and lives there
    for seed in (30, 31, 32, 33):
        started = reset(pair.url, None, seed).json()["observation"]
        assert pair.holder(f"marker-{seed}") == f"envduels-srv{owner(started['episode_id'], 2)}"
        assert step(pair.url, started["episode_id"], "win").json()["done"] is True


def test_max_sessions_counts_the_sandboxes_of_both_processes(pair):
    held = ids_of(0, CAP // 2, "cap") + ids_of(1, CAP // 2, "cap")   # 3 in each process
    for seed, eid in enumerate(held):
        assert reset(pair.url, eid, 40 + seed).status_code == 200
    for extra in (ids_of(0, 1, "more") + ids_of(1, 1, "more")):
        refused = reset(pair.url, extra, 49)
        assert (refused.status_code, refused.json()) == (503, {"detail": (
            f"the server is at --max-sessions {CAP} sandboxes (its 2 processes together): end "
            "another episode or session, or try again later")})
    assert step(pair.url, held[0], "win").json()["done"] is True   # its place is free again
    assert reset(pair.url, "more-after", 50).status_code == 200
    for eid in held[1:] + ["more-after"]:
        assert step(pair.url, eid, "lose").json()["done"] is True


def test_max_sessions_counts_the_connections_of_both_processes(pair):
    async def main() -> str:
        clients = [GenericEnvClient(base_url=pair.url) for _ in range(CAP)]
        for env in clients:
            await env.connect()
        late = GenericEnvClient(base_url=pair.url)
        try:
            await late.reset(env_id="marker", seed=1)
        except RuntimeError as err:
            return str(err)
        finally:
            await late.close()
            for env in clients:
                await env.close()
        return "a session past --max-sessions"

    assert asyncio.run(main()) == (
        f"Server error: the server is at --max-sessions {CAP} connections, its 2 processes "
        "together: close another session or try again later (code: CAPACITY_REACHED)")


def test_a_killed_server_process_ends_only_its_sessions_and_another_takes_its_place(pair):
    before = pair.processes()
    assert sorted(before) == ["envduels-srv0", "envduels-srv1"]
    # two WebSocket sessions in each process (each connection goes where the kernel sends it)
    sessions: dict[str, list[tuple[DuelClient, int]]] = {"envduels-srv0": [], "envduels-srv1": []}
    spare = []
    seed = 100
    while min(len(held) for held in sessions.values()) < 2:
        assert seed < 140, f"the kernel gave no connection to one process: {sessions}"
        client = DuelClient(pair.url)
        client.reset(env_id="marker", seed=seed)
        name = pair.holder(f"marker-{seed}")
        if len(sessions[name]) < 2:
            sessions[name].append((client, seed))
        else:
            spare.append(client)
        seed += 1
        while spare:   # keep under --max-sessions
            spare.pop().close()
    lost, kept = ids_of(0, 1, "kill")[0], ids_of(1, 1, "kill")[0]
    assert reset(pair.url, lost, 150).status_code == 200     # HTTP episodes, one in each
    assert reset(pair.url, kept, 151).status_code == 200

    os.kill(before["envduels-srv0"], signal.SIGKILL)
    while not _zombie(before["envduels-srv0"]):   # (a connect while it dies may be reset)
        time.sleep(0.05)
    assert httpx.get(f"{pair.url}/health", timeout=10).json()["status"] == "healthy"
    for client, _ in sessions["envduels-srv0"]:
        with pytest.raises(RuntimeError) as caught:
            client.play("\\boxed{look}")
        assert str(caught.value) == f"the server closed the session: {LOST}"
    for client, seed in sessions["envduels-srv1"]:
        assert client.play("\\boxed{look}").startswith(f"Observation: markers: ['marker-{seed}']")
        assert client.play("\\boxed{win}") == "you win" and client.get_reward() == 1.0

    deadline = time.monotonic() + 120   # the new process 0 starts (an interpreter, imports)
    while (now := pair.processes()).get("envduels-srv0") in (None, before["envduels-srv0"]):
        assert time.monotonic() < deadline, pair.log()
        time.sleep(0.5)
    assert now["envduels-srv1"] == before["envduels-srv1"]
    assert (f"envduels serve: server process 0 (pid {before['envduels-srv0']}) killed by "
            "SIGKILL; the sessions it held ended; starting another in its place") in pair.log()
    while (gone := step(pair.url, lost, "look")).status_code == 503:   # until it listens
        assert time.monotonic() < deadline, gone.text
        time.sleep(0.5)
    assert gone.status_code == 404
    assert re.fullmatch(r"no running episode 'kill-\d+': it ended, never began, or was lost when "
                        r"server process 0 killed by SIGKILL at \d\d:\d\d:\d\d \(the server's "
                        r"fault, not the environment's\); /reset it", gone.json()["detail"])
    assert step(pair.url, kept, "win").json()["done"] is True
    # what the dead process held is free: every place can be taken again, in either process
    for client, seed in sessions["envduels-srv0"]:
        assert client.reset(env_id="marker", seed=seed).startswith(f"Observation: seed {seed};")
    fresh = ids_of(0, 2, "after") + ids_of(1, 2, "after")
    for k, eid in enumerate(fresh):
        assert reset(pair.url, eid, 160 + k).status_code == 200, eid
    for k, eid in enumerate(fresh):
        assert pair.holder(f"marker-{160 + k}") == f"envduels-srv{owner(eid, 2)}"
        assert step(pair.url, eid, "win").json()["done"] is True
    for held in sessions.values():
        for client, _ in held:
            client.close()


def test_the_server_processes_and_their_sandboxes_go_when_the_supervisor_is_killed(pair):
    eid = ids_of(1, 1, "orphan")[0]
    assert reset(pair.url, eid, 170).status_code == 200
    tree = pair.descendants()
    assert len(tree) > 3
    pair.proc.kill()
    pair.proc.wait()
    deadline = time.monotonic() + 60
    while left := [pid for pid in tree if os.path.exists(f"/proc/{pid}")
                   and not _zombie(pid)]:
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.2)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
