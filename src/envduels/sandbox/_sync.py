"""Blocking access to one sandboxed instance (validation CLI, Gymnasium adapter).

All sync instances share one background thread that runs an event loop, so they work the same
whether or not the caller's thread already runs a loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import TypeVar

from ._harness import HarnessPool
from ._instance import EnvInstance, StepResult
from ._limits import DEFAULT_LIMITS, SandboxLimits
from ._pool import EnvPool
from ._remote import RemoteEnvInstance

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="envduels-sandbox",
                                      daemon=True)
            thread.start()
            _LOOP = loop
        return _LOOP


def _run(coro: Coroutine[object, None, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, _loop()).result()


class SyncEnvInstance:
    """EnvInstance with blocking methods; a context manager that closes it."""

    def __init__(self, pool: EnvPool | HarnessPool, instance: EnvInstance | RemoteEnvInstance, *,
                 owns_pool: bool = True) -> None:
        self._pool = pool
        self._owns_pool = owns_pool
        self._instance = instance
        self.class_name = instance.class_name
        self.max_turns = instance.max_turns
        self.has_oracle = instance.has_oracle

    @property
    def output(self) -> str:
        return self._instance.output

    @property
    def pid(self) -> int:
        return self._instance.pid

    @property
    def alive(self) -> bool:
        return self._instance.alive

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        return _run(self._instance.reset(seed))

    def step(self, action: str) -> StepResult:
        return _run(self._instance.step(action))

    def oracle_action(self) -> str:
        return _run(self._instance.oracle_action())

    def close(self) -> None:
        async def _close() -> None:
            # In the shared pool the instance is killed now and collected in the background
            # (the pool waits for that at exit), so a gym reset does not wait for teardown.
            await self._instance.close(wait=self._owns_pool)
            if self._owns_pool:
                await self._pool.aclose()
        _run(_close())

    def __enter__(self) -> SyncEnvInstance:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_SHARED: dict[tuple[SandboxLimits, bool], HarnessPool] = {}


async def _shared_pool(limits: SandboxLimits, unsafe_no_sandbox: bool) -> HarnessPool:
    """One pool per (limits, unsafe) for this process, on the background loop, in harness
    workers (one per core: instances opened from several threads spread over them): its
    templates outlive each instance, so the next `open` forks instead of starting a sandbox."""
    key = (limits, unsafe_no_sandbox)
    if key not in _SHARED:
        if not _SHARED:
            atexit.register(_close_shared)
        _SHARED[key] = HarnessPool(limits, unsafe_no_sandbox=unsafe_no_sandbox, warm=0)
    return _SHARED[key]


def _close_shared() -> None:
    """At exit: the shared pools' workers close their sandboxes and stop (they would anyway,
    when this process's end closes their sockets; this ends their readers here cleanly)."""
    pools = list(_SHARED.values())
    _SHARED.clear()
    for pool in pools:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(pool.aclose(), _loop()).result(timeout=15)


def open_env_sync(source: str, *, class_name: str | None = None, max_turns: int | None = None,
                  limits: SandboxLimits = DEFAULT_LIMITS, unsafe_no_sandbox: bool = False,
                  shared: bool = False) -> SyncEnvInstance:
    """Load `source` in a new sandboxed instance; blocking.

    By default in a pool of its own, closed with the instance (a cold start each time). With
    `shared`, in this process's pool for these limits, which stays (with its templates: each
    instance then costs a fork, docs/sandbox.md) until the process exits.
    Raises SandboxUnavailable without bubblewrap, EnvFault when the source does not load.
    """
    if shared:
        async def _open_shared() -> RemoteEnvInstance:
            pool = await _shared_pool(limits, unsafe_no_sandbox)
            return await pool.open(source, class_name=class_name, max_turns=max_turns)
        instance = _run(_open_shared())
        return SyncEnvInstance(_SHARED[(limits, unsafe_no_sandbox)], instance, owns_pool=False)
    pool = EnvPool(limits, unsafe_no_sandbox=unsafe_no_sandbox, warm=0)

    async def _open() -> EnvInstance:
        try:
            return await pool.open(source, class_name=class_name, max_turns=max_turns)
        except BaseException:
            await pool.aclose()
            raise

    return SyncEnvInstance(pool, _run(_open()))
