"""EnvPool: pre-started idle workers, so that opening an environment costs one round trip."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from types import TracebackType

from ._channel import WorkerChannel
from ._instance import EnvInstance
from ._launcher import Launched, discard, launch, launcher_threads, require_bwrap
from ._limits import DEFAULT_LIMITS, EnvFault, SandboxLimits, SandboxUnavailable

log = logging.getLogger("envduels.sandbox")

_STARTUP_TIMEOUT_S = 20.0


def _discard_when_started(started: asyncio.Future[Launched]) -> None:
    if not started.cancelled() and started.exception() is None:
        launcher_threads().submit(discard, started.result())


class EnvPool:
    """Opens environment instances, each in its own sandboxed worker, from `warm` idle workers.

    A warm worker is a started, sandboxed interpreter waiting for a "load" frame with the
    source text; the pool refills in the background. Bound to the event loop of its first
    `open()`. Raises SandboxUnavailable at construction when bubblewrap is missing (unless
    `unsafe_no_sandbox`, which runs environment code with rlimits only: trusted code only).
    """

    def __init__(self, limits: SandboxLimits = DEFAULT_LIMITS, *,
                 unsafe_no_sandbox: bool = False, warm: int = 2) -> None:
        if warm < 0:
            raise ValueError(f"warm must be >= 0, got {warm}")
        self.limits = limits
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.warm = warm
        if unsafe_no_sandbox:
            log.warning("UNSAFE: environment code runs WITHOUT a sandbox (--unsafe-no-sandbox): "
                        "it can read your files and secrets and use the network; use this only "
                        "for code you trust")
        else:
            require_bwrap()
        self._ready: deque[WorkerChannel] = deque()
        self._live: set[WorkerChannel] = set()
        self._starting = 0
        self._refill: asyncio.Task[None] | None = None
        self._start_error: BaseException | None = None
        self._closed = False

    async def __aenter__(self) -> EnvPool:
        self._schedule_refill()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def _spawn(self) -> WorkerChannel:
        loop = asyncio.get_running_loop()
        starting = loop.run_in_executor(
            launcher_threads(),
            functools.partial(launch, self.limits, unsafe_no_sandbox=self.unsafe_no_sandbox))
        try:
            launched = await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(_discard_when_started)
            raise
        channel = WorkerChannel(launched, self.limits, loop)
        self._live.add(channel)
        try:
            await channel.wait_ready(max(_STARTUP_TIMEOUT_S, self.limits.step_timeout_s))
        except EnvFault as fault:
            self._live.discard(channel)
            lines = channel.output_tail().strip().splitlines()
            if lines and lines[-1].startswith("bwrap:"):
                raise SandboxUnavailable(
                    f"bubblewrap cannot create a sandbox here ({lines[-1]})") from None
            raise EnvFault(f"the sandbox failed to start: {fault.reason}",
                           channel.output_tail()) from None
        return channel

    def _schedule_refill(self) -> None:
        if self._closed or self.warm == 0 or (self._refill and not self._refill.done()):
            return
        if len(self._ready) + self._starting >= self.warm:
            return
        self._refill = asyncio.get_running_loop().create_task(self._refill_loop())

    async def _refill_loop(self) -> None:
        while not self._closed and len(self._ready) < self.warm:
            self._starting += 1
            try:
                channel = await self._spawn()
            except Exception as exc:  # surfaces at the next open()
                self._start_error = exc
                return
            finally:
                self._starting -= 1
            if self._closed:
                await channel.close()
                return
            self._ready.append(channel)

    async def _take_ready(self) -> WorkerChannel | None:
        """A warm worker, skipping any that died while idle (that is no environment's fault)."""
        while self._ready:
            channel = self._ready.popleft()
            if channel.usable:
                return channel
            await channel.close()
        return None

    async def open(self, source: str, *, class_name: str | None = None,
                   max_turns: int | None = None) -> EnvInstance:
        """Load `source` in a worker, find its one environment class (or `class_name`) and
        construct it, with `max_turns` when given and accepted by its __init__.

        EnvFault when it does not compile, raises while loading, has no or several
        environment classes, or its constructor raises. SandboxUnavailable when bubblewrap is
        installed but cannot create namespaces here.
        """
        if self._closed:
            raise RuntimeError("EnvPool is closed")
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                      or max_turns <= 0):
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        self._live = {c for c in self._live if c.dead is None}
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            if isinstance(error, SandboxUnavailable):
                raise error
        channel = await self._take_ready()
        try:
            if channel is None:
                channel = await self._spawn()
            reply = await channel.call({"op": "load", "source": source,
                                        "class_name": class_name, "max_turns": max_turns},
                                       "load", self.limits.step_timeout_s)
        finally:
            # after the load: a start in the background competes for the CPUs
            self._schedule_refill()
        if reply.get("ok") is not True:
            error = reply.get("error")
            reason = error.splitlines()[0][:500] if isinstance(error, str) and error else "load failed"
            fault = await channel.fail(reason)
            if isinstance(reply.get("detail"), str):
                fault.detail = reply["detail"]
            raise fault
        name, turns, oracle = reply.get("class_name"), reply.get("max_turns"), reply.get("has_oracle")
        if not isinstance(name, str) or type(turns) is not int or turns <= 0 \
                or type(oracle) is not bool:
            raise await channel.fail("protocol violation: malformed load reply")
        return EnvInstance(channel, self.limits, class_name=name, max_turns=turns,
                           has_oracle=oracle)

    async def aclose(self) -> None:
        """Stop refilling and kill every worker this pool started, open instances included."""
        self._closed = True
        if self._refill is not None and not self._refill.done():
            # let a start in flight finish: the loop then closes what it started
            with contextlib.suppress(Exception):
                await self._refill
        channels = list(self._live) + list(self._ready)
        self._ready.clear()
        self._live.clear()
        for channel in channels:
            await channel.close()
