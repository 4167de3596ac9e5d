"""EnvPool: pre-started idle workers, so that opening an environment costs one round trip."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import threading
from collections import deque
from collections.abc import Iterable
from types import TracebackType

from ._channel import Frame, WorkerChannel
from ._instance import EnvInstance
from ._launcher import discard_when_started, launch, launcher_threads, require_runtime
from ._limits import (
    DEFAULT_LIMITS,
    EnvFault,
    SandboxLimits,
    SandboxStartError,
    SandboxUnavailable,
    check_open,
    start_error,
)
from ._template import (
    Templates,
    TemplateUnavailable,
    instance_started,
    refused_join,
    template_problem,
)

log = logging.getLogger("envduels.sandbox")
_UNSAFE_WARNED = threading.Event()

_STARTUP_TIMEOUT_S = 20.0
# An author's value: `10**400` would reach the store (SQLite holds 64-bit ints) unclamped.
MAX_TURNS_DECLARED = 2**31 - 1
# Instances forked ahead of time per (source, role), waiting for their `load`: an open then
# costs a round trip instead of a fork, joining the cgroups (RCU waits: milliseconds under
# load) and a greeting. At the end of a run at most this many per template are forked for nothing.
SPARE_INSTANCES = 2
SPARE_SOURCES = 24   # (source, role) pairs that keep spares: the most recently opened


class EnvPool:
    """Opens environment instances, each in its own sandboxed worker, from idle warm workers.

    A warm worker is a started, sandboxed interpreter waiting for a "load" frame with the
    source text. The pool refills in the background, up to `parallel_starts` starts at once,
    and holds as many ready workers as instances are in use (at least `warm`, at most
    `max_warm`, which defaults to `warm`); `expect(n)` prestarts for a batch of n opens. An
    `open()` that finds none ready takes the next worker to finish starting. Bound to the
    event loop of its first `open()`. Raises SandboxUnavailable at construction when
    bubblewrap is missing (unless `unsafe_no_sandbox`, which runs environment code with
    rlimits only: trusted code only).

    With `templates` (the default, where the host allows it: `template_problem`), each
    instance is instead forked from a template sandbox of its source (docs/templates.md):
    no warm workers are kept, and an `open()` costs a fork and a load. The pool
    falls back to fresh sandboxes for good, with one warning, if a template cannot start.
    """

    def __init__(self, limits: SandboxLimits = DEFAULT_LIMITS, *,
                 unsafe_no_sandbox: bool = False, warm: int = 2, max_warm: int | None = None,
                 parallel_starts: int = 8, templates: bool = True) -> None:
        if warm < 0:
            raise ValueError(f"warm must be >= 0, got {warm}")
        if max_warm is not None and max_warm < warm:
            raise ValueError(f"max_warm must be >= warm ({warm}), got {max_warm}")
        if parallel_starts < 1:
            raise ValueError(f"parallel_starts must be >= 1, got {parallel_starts}")
        self.limits = limits
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.warm = warm
        self.max_warm = warm if max_warm is None else max_warm
        self.parallel_starts = parallel_starts
        if unsafe_no_sandbox and not _UNSAFE_WARNED.is_set():
            _UNSAFE_WARNED.set()  # once per process: every pool of it is equally unsafe
            log.warning("UNSAFE: environment code runs WITHOUT a sandbox (--unsafe-no-sandbox): "
                        "it can read your files and secrets and use the network; use this only "
                        "for code you trust")
        elif not unsafe_no_sandbox:
            require_runtime(limits.runtime)
        self._ready: deque[WorkerChannel] = deque()
        self._live: set[WorkerChannel] = set()
        self._in_use: set[WorkerChannel] = set()
        self._waiters: deque[asyncio.Future[WorkerChannel]] = deque()
        self._starts: set[asyncio.Task[None]] = set()
        self._starting = 0
        self._expected: int | None = None
        self._start_error: BaseException | None = None
        self._closed = False
        self._templates: Templates | None = None
        self._spares: dict[tuple[str, bool], deque[WorkerChannel]] = {}
        self._forking: dict[tuple[str, bool], int] = {}
        if templates and not unsafe_no_sandbox and template_problem(limits) is None:
            self._templates = Templates(limits)

    @property
    def uses_templates(self) -> bool:
        """Whether instances are forked from templates now (False: fresh sandboxes)."""
        return self._templates is not None

    async def __aenter__(self) -> EnvPool:
        self._schedule_refill()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def _spawn(self) -> WorkerChannel:
        """A started worker. SandboxStartError when it cannot start (no environment code has
        run yet), SandboxUnavailable when bubblewrap cannot create namespaces here."""
        loop = asyncio.get_running_loop()
        starting = loop.run_in_executor(
            launcher_threads(),
            functools.partial(launch, self.limits, unsafe_no_sandbox=self.unsafe_no_sandbox))
        try:
            launched = await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(discard_when_started)
            raise
        except OSError as err:   # fork EAGAIN, an interpreter or bwrap that cannot run, cgroups
            raise start_error(err) from None
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
            raise SandboxStartError(f"the sandbox failed to start: {fault.reason}",
                                    channel.output_tail()) from None
        return channel

    @property
    def ready(self) -> int:
        """Workers started and waiting for a `load` now."""
        return len(self._ready)

    def expect(self, opens: int | None) -> None:
        """Announce a batch: `opens` more `open()` calls are coming (None: back to following
        the instances in use). The pool starts workers for the batch at once, up to
        `max_warm`, and never more than will be used, so the end of a batch wastes no start.
        Call it from the pool's event loop."""
        self._expected = None if opens is None else max(0, opens)
        self._schedule_refill()

    def _target(self) -> int:
        """Workers to hold ready (or starting). With a planned batch (`expect`): one for each
        open still to come, up to `max_warm`. Otherwise: as many as instances are open now
        (each one's successor should find a worker waiting), at least `warm`, at most
        `max_warm`. Plus one for every `open()` already waiting."""
        self._in_use = {c for c in self._in_use if c.dead is None}
        if self._expected is not None:
            want = min(self._expected, self.max_warm)
        else:
            want = max(self.warm, min(len(self._in_use), self.max_warm))
        return want + sum(1 for w in self._waiters if not w.done())

    def _schedule_refill(self) -> None:
        if self._closed or self._templates is not None:
            return   # forked instances need no warm fresh workers
        loop = asyncio.get_running_loop()
        while (self._starting < self.parallel_starts
               and len(self._ready) + self._starting < self._target()):
            self._starting += 1
            task = loop.create_task(self._start_one())
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)

    async def _start_one(self) -> None:
        try:
            channel = await self._spawn()
        except Exception as exc:
            self._starting -= 1
            if self._hand_over(exc):
                self._schedule_refill()   # for the other waiters: one failure each, no spin
            return
        except BaseException:
            self._starting -= 1
            raise
        self._starting -= 1
        if self._closed:
            await channel.close()
            return
        self._hand_over(channel)
        self._schedule_refill()

    def _hand_over(self, result: WorkerChannel | Exception) -> bool:
        """A started worker (or a failed start) goes to the longest-waiting `open()` (True),
        else into the ready queue (a failure: raised by the next `open()` if it is fatal)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            if isinstance(result, Exception):
                waiter.set_exception(result)
            else:
                waiter.set_result(result)
            return True
        if isinstance(result, Exception):
            self._start_error = result
        else:
            self._ready.append(result)
        return False

    async def _take_ready(self) -> WorkerChannel | None:
        """A warm worker, skipping any that died while idle (that is no environment's fault)."""
        while self._ready:
            channel = self._ready.popleft()
            if channel.usable:
                return channel
            await channel.close()
        return None

    async def open(self, source: str, *, class_name: str | None = None,
                   max_turns: int | None = None, replay: bool = False,
                   apart_from: object | None = None) -> EnvInstance:
        """Load `source` in a worker, find its one environment class (or `class_name`) and
        construct it, with `max_turns` when given and accepted by its __init__.

        `replay=True` (the replay audit) guarantees an instance that shares no template,
        process or tmpfs with any instance opened without it: with templates, replays are
        forked from a separate template sandbox of the source (its own uid and pid
        namespace); fresh sandboxes share nothing anyway. `apart_from` (the play's `holder`)
        means nothing here: every instance of this pool is held by this process.

        EnvFault when it does not compile, raises while loading, has no or several
        environment classes, or its constructor raises. SandboxStartError (an EnvFault, but
        the host's fault) when no worker could be started or the pool is closed.
        SandboxUnavailable when bubblewrap is installed but cannot create namespaces here.
        """
        check_open(self._closed, source, max_turns)
        self._live = {c for c in self._live if not c.reaped}
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            if isinstance(error, SandboxUnavailable):
                raise error
        if self._expected:
            self._expected -= 1
        if self._templates is not None:
            channel = await self._fork(source, replay)
            if channel is not None:
                self._in_use.add(channel)
                return await self._load(channel, source, class_name, max_turns)
        channel = await self._take_ready()
        if channel is None:
            channel = await self._wait_for_worker()
        self._in_use.add(channel)
        return await self._load(channel, source, class_name, max_turns)

    def prepare(self, sources: Iterable[str], *, replay: bool = False, instances: int = 0) -> None:
        """Start the templates of `sources` for this role now, in the background, and fork
        `instances` instances of each ahead (spares, waiting for their `load`), so the first
        opens find them ready: a batch's first wave then costs a round trip each, not a fork
        each in a queue. A template compiles its source and runs none of it; a spare has run
        nothing. Nothing where instances come from fresh sandboxes; a template that fails to
        start is left for the open that meets it to report. Call it from the pool's loop."""
        templates = self._templates
        if self._closed or templates is None:
            return
        loop = asyncio.get_running_loop()
        for source in dict.fromkeys(sources):
            task = loop.create_task(self._prepare_one(templates, source, replay, instances))
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)

    async def _prepare_one(self, templates: Templates, source: str, replay: bool,
                           instances: int) -> None:
        try:
            await templates.start(source, replay=replay)
        except Exception:   # the open that meets it reports it
            return
        key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), replay)
        if instances <= 0 or self._closed:
            return
        if key not in self._spares:
            await self._drop_oldest_spares()
            self._spares[key] = deque()
        wanted = instances - len(self._spares[key]) - self._forking.get(key, 0)
        self._forking[key] = self._forking.get(key, 0) + max(0, wanted)
        await asyncio.gather(*(self._spare_fork(key, source, replay)
                               for _ in range(max(0, wanted))))

    async def _fork(self, source: str, replay: bool) -> WorkerChannel | None:
        """A greeted instance of `source`'s template for this role: a spare one forked ahead
        of time if one is waiting, else a new fork; None when templates turned out not to
        work here (the pool then uses fresh sandboxes from now on). Each open also forks a
        spare for the next open of the same source and role (SPARE_INSTANCES at most), so
        an open costs one round trip, as from the warm pool."""
        key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), replay)
        spares = self._spares.pop(key, None)
        if spares is None:
            spares = deque()
            await self._drop_oldest_spares()
        self._spares[key] = spares   # most recently used last
        while spares:
            spare = spares.popleft()
            if spare.usable:
                self._fork_spare(key, source, replay)
                return spare
            self._live.discard(spare)
            await spare.close()
        channel = await self._fork_new(source, replay)
        if channel is not None:
            self._fork_spare(key, source, replay)
        return channel

    async def _drop_oldest_spares(self) -> None:
        """Keep spares for the SPARE_SOURCES most recently opened sources and roles only: a
        template with no instance left can then be closed (Templates keeps at most 32)."""
        while len(self._spares) >= SPARE_SOURCES:
            oldest = next(iter(self._spares))
            for channel in self._spares.pop(oldest):
                self._live.discard(channel)
                await channel.close(wait=False)

    def _fork_spare(self, key: tuple[str, bool], source: str, replay: bool) -> None:
        if self._closed or self._templates is None or key not in self._spares \
                or len(self._spares[key]) + self._forking.get(key, 0) >= SPARE_INSTANCES:
            return
        self._forking[key] = self._forking.get(key, 0) + 1
        task = asyncio.get_running_loop().create_task(self._spare_fork(key, source, replay))
        self._starts.add(task)
        task.add_done_callback(self._starts.discard)

    async def _spare_fork(self, key: tuple[str, bool], source: str, replay: bool) -> None:
        """Fork one instance into `key`'s spares (counted in `_forking` by the caller); a
        failure is left for the next open, which forks and reports for itself."""
        try:
            channel = await self._fork_new(source, replay)
        except Exception:
            return
        finally:
            self._forking[key] -= 1
        if channel is None:
            return
        if self._closed or key not in self._spares:
            self._live.discard(channel)
            await channel.close(wait=False)
        else:
            self._spares[key].append(channel)

    async def _without_templates(self, reason: str) -> None:
        """Fresh sandboxes from now on in this pool, said once (the first of the opens that
        waited for the templates says it)."""
        templates, self._templates = self._templates, None
        if templates is not None:
            log.warning("sandbox instances come from fresh sandboxes: %s", reason)
            await templates.aclose()
            self._schedule_refill()

    async def _fork_new(self, source: str, replay: bool) -> WorkerChannel | None:
        templates = self._templates
        if templates is None:
            return None
        try:
            launched = await templates.fork(source, replay=replay)
        except TemplateUnavailable as err:
            await self._without_templates(str(err))
            return None
        channel = WorkerChannel(launched, self.limits, asyncio.get_running_loop())
        self._live.add(channel)
        try:
            await channel.wait_ready(max(_STARTUP_TIMEOUT_S, self.limits.step_timeout_s))
        except EnvFault as fault:
            self._live.discard(channel)
            refused = refused_join(channel.launched.popen.poll(), channel.output_tail())
            if refused is not None:   # the kernel, not the environment: no instance can start
                await self._without_templates(refused)
                return None
            raise SandboxStartError(f"the sandbox failed to start: {fault.reason}",
                                    channel.output_tail()) from None
        instance_started()
        # joining the freezer waits for RCU grace periods (long under load): part of the
        # start, not of the `load` call's deadline, as for a worker from the warm pool
        await channel.adopted()
        return channel

    async def _load(self, channel: WorkerChannel, source: str, class_name: str | None,
                    max_turns: int | None) -> EnvInstance:
        request: Frame = {"op": "load", "class_name": class_name, "max_turns": max_turns}
        if not channel.launched.forked:
            # (a forked instance runs what its template compiled: the template of this
            # source's hash, so the text need not travel and be decoded again)
            request["source"] = source
        try:
            reply = await channel.call(request, "load", self.limits.step_timeout_s)
        finally:
            # after the load: a start in the background competes for the CPUs
            self._schedule_refill()
        if reply.get("ok") is not True:
            error = reply.get("error")
            reason = error.splitlines()[0][:500] if isinstance(error, str) and error else "load failed"
            fault = await channel.fail(reason)
            detail = reply.get("detail")
            if isinstance(detail, str):
                fault.detail = detail
            raise fault
        name, turns, oracle = reply.get("class_name"), reply.get("max_turns"), reply.get("has_oracle")
        if not isinstance(name, str) or type(turns) is not int or turns <= 0 \
                or type(oracle) is not bool:
            raise await channel.fail("protocol violation: malformed load reply")
        turns = min(turns, MAX_TURNS_DECLARED)   # the turn cap is min(this, the run's) anyway
        return EnvInstance(channel, self.limits, class_name=name, max_turns=turns,
                           has_oracle=oracle)

    async def _wait_for_worker(self) -> WorkerChannel:
        """The next worker to finish starting (a start is scheduled for every waiter)."""
        waiter: asyncio.Future[WorkerChannel] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._schedule_refill()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._hand_over(waiter.result())   # handed to us as we were cancelled
            raise

    async def aclose(self) -> None:
        """Stop refilling and kill every worker this pool started, open instances included."""
        self._closed = True
        if self._starts:
            # let starts in flight finish: each then closes what it started
            await asyncio.gather(*self._starts, return_exceptions=True)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(SandboxStartError("the sandbox pool is closed"))
        self._waiters.clear()
        channels = list(self._live) + list(self._ready)
        self._spares.clear()   # each spare is in _live too
        self._ready.clear()
        self._live.clear()
        for channel in channels:
            await channel.close()
        if self._templates is not None:
            await self._templates.aclose()


def check_sandbox(limits: SandboxLimits = DEFAULT_LIMITS, *, unsafe_no_sandbox: bool = False) -> None:
    """Raise SandboxUnavailable now if no sandbox can run on this machine: bubblewrap is
    missing, or it cannot create namespaces here (found by starting one worker and stopping
    it). Call it before writing anything that a run without a sandbox should not leave behind.
    A start that fails for a passing reason (SandboxStartError) is left to the caller's work.
    Must not be called from a running event loop."""
    if unsafe_no_sandbox:
        return
    require_runtime(limits.runtime)

    async def start_one() -> None:
        pool = EnvPool(limits, warm=0)
        try:
            channel = await pool._spawn()
            await channel.close()
        finally:
            await pool.aclose()

    with contextlib.suppress(SandboxStartError):
        asyncio.run(start_one())
