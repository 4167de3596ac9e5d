"""A server whose harness runs out of something refuses sessions as its own capacity, never as an
environment's fault: under a descriptor limit of 200, sessions are opened until one cannot
get a sandbox; that client is told the harness is out of capacity and why (OpenEnv's error
message over the WebSocket, 503 over HTTP), the episode records the harness's fault (`error`,
not the environment's `incomplete`), the sessions already open go on, and a place freed is a
session again. The server keeps descriptors to accept with, so no client is left waiting on
a connection it never accepts."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from .conftest import MARKER, SCRIPT, SRC

GenericEnvClient = pytest.importorskip(
    "openenv.core.generic_client", reason="the serve extra is not installed: pip install 'envduels[serve]'"
).GenericEnvClient

OPEN_FILES = 200
OUT = re.compile(r"no sandbox could start \(the harness is out of capacity and started no "
                 r"sandbox: \d+ of this server process's 200 descriptors are in use and 64 are "
                 r"kept to accept connections \(raise `ulimit -n`, or run more --workers\)\); "
                 r"try again")


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@pytest.mark.slow
def test_a_harness_out_of_descriptors_refuses_a_session_as_its_own_capacity():
    log = Path(tempfile.mkstemp(prefix="envduels-serve-", suffix=".log")[1])
    proc = subprocess.Popen(
        [str(SCRIPT), "serve", MARKER, "--workers", "1", "--max-sessions", "200", "--port", "0"],
        env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE, stderr=log.open("wb"),
        text=True, preexec_fn=_few_descriptors)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("envduels serve: http://127.0.0.1:"), log.read_text()
        url = first.split(": ", 1)[1].strip().rstrip("/")

        async def main() -> None:
            held = []
            for seed in range(60):
                env = GenericEnvClient(base_url=url, message_timeout_s=60)
                try:
                    await env.reset(env_id="marker", seed=seed)
                except RuntimeError as err:
                    refused, state = str(err), dict(await env.state())
                    await env.close()
                    break
                held.append(env)
            else:
                raise AssertionError(f"{len(held)} sessions under {OPEN_FILES} descriptors")
            assert len(held) >= 1
            assert refused.startswith("Server error: ")
            assert refused.endswith(" (code: EXECUTION_ERROR)")
            assert OUT.fullmatch(refused[len("Server error: "):-len(" (code: EXECUTION_ERROR)")])
            assert state["outcome"] == "error"             # the harness's, not `incomplete`
            assert state["reason"].startswith("sandbox error: the harness is out of capacity")
            async with httpx.AsyncClient() as client:   # over HTTP: a 503 (the closed
                for seed in range(100, 110):               # socket above freed a place)
                    over_http = await client.post(f"{url}/reset", json={"env_id": "marker",
                                                                        "seed": seed})
                    if over_http.status_code != 200:
                        break
                assert over_http.status_code == 503
                assert OUT.fullmatch(over_http.json()["detail"]), over_http.text
                assert (await client.get(f"{url}/health")).json()["status"] == "healthy"
            for k, env in enumerate(held):   # the sessions already open are untouched
                looked = await env.step({"message": "\\boxed{look}"})
                assert looked.observation["text"].startswith(
                    f"Observation: markers: ['marker-{k}']")
            for env in held[: len(held) // 2]:
                await env.close()
            deadline = time.monotonic() + 30   # a place freed is a session again, once the
            while True:                        # closed sandboxes are reaped
                again = GenericEnvClient(base_url=url)
                try:
                    first = await again.reset(env_id="marker", seed=99)
                    break
                except RuntimeError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.5)
                finally:
                    await again.close()
            assert first.observation["text"].startswith("Observation: seed 99;")
            for env in held[len(held) // 2:]:
                await env.close()

        asyncio.run(main())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        text = log.read_text(errors="replace")
        log.unlink(missing_ok=True)
    assert "Traceback" not in text, text
