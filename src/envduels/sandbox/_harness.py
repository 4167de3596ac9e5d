"""HarnessPool: the sandbox harness spread over worker processes, one per core by default.

Interface (the same as `EnvPool`'s, so every caller runs unchanged): `open(source, *,
class_name, max_turns, replay)` returns an instance with `reset`, `step`, `oracle_action`,
`close(wait=)`, `alive`, `pid`, `class_name`, `max_turns`, `has_oracle`
(`RemoteEnvInstance`); `expect(n)`, `ready`, `aclose()`, and `async with`. Faults are the
same classes as in-process: `EnvFault` (the environment's), `SandboxStartError` (the host's),
its subclasses `SandboxLost` (the worker holding the instance died) and `HarnessCapacity`
(the harness ran out of something), `SandboxUnavailable` (no sandbox can run here).

Design (docs/workers.md): each harness worker (`_harness_worker.py`) is a process with its own
event loop holding an ordinary `EnvPool` (templates, instances, their channels) behind an
`InstanceHost`, as a Ray node's host does (`ray_pool.py`). The caller's process only routes:
one framed request per call over a socketpair (4-byte length, a JSON array), replies matched by
id, so any number of calls are in flight per worker.

Routing: an episode lives in one worker (every call of an instance goes to the worker that
opened it). An open goes to the worker with the fewest open instances, ties to the first from
a place drawn from the source's hash (so a source's templates stay in few workers when the
load allows). A replay is opened with `apart_from=` the holder of its play
(`RemoteEnvInstance.holder`) and never runs in that worker while another lives: every worker
plays and every worker replays, so neither role waits on one core. A replay of an episode
played in an earlier session may run anywhere: that session's workers are gone.

A worker that dies (killed, a harness bug) ends only the instances it held: each of their calls
raises `SandboxLost` naming the harness, never the environment; a new worker takes its place
for later opens. A worker exits when the caller's process does (its socket closes; a SIGKILL of
the caller reaches it as PR_SET_PDEATHSIG), killing its sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias

from ._launcher import require_runtime
from ._limits import DEFAULT_LIMITS, SandboxLimits, SandboxLost, SandboxStartError, check_open
from ._remote import RemoteEnvInstance, raise_reply

if TYPE_CHECKING:
    from ._pool import EnvPool

log = logging.getLogger("envduels.sandbox")

FRAME_MAX_BYTES = 64 << 20     # a reply holds at most an observation, an info and output
_HEADER = struct.Struct(">I")
_SHUTDOWN_S = 10.0             # a worker closes its sandboxes, then exits


def cores() -> int:
    """The cores this process may run on: the default number of harness workers."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def encode(message: list[Any]) -> bytes:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8",
                                                                               "surrogatepass")
    return _HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> list[Any] | None:
    """The next message, or None at the end of the stream. ValueError for a broken frame."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError:
        return None
    (size,) = _HEADER.unpack(header)
    if size > FRAME_MAX_BYTES:
        raise ValueError(f"a frame of {size} bytes")
    try:
        data = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None
    message = json.loads(data.decode("utf-8", "surrogatepass"))
    if not isinstance(message, list):
        raise ValueError("a frame that is not a list")
    return message


@dataclass(eq=False)
class HarnessWorker:
    """One harness worker process, as the caller sees it."""

    index: int
    process: subprocess.Popen[bytes]
    writer: asyncio.StreamWriter
    open: int = 0                 # instances it holds for this pool
    ready: int = 0                # warm sandboxes it last reported
    dead: str | None = None       # why it is gone
    answered: bool = False        # it has replied at least once
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    reading: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


def _forget_when_done(starting: dict[int, asyncio.Task[HarnessWorker]],
                      index: int) -> Callable[[asyncio.Task[HarnessWorker]], None]:
    """A done-callback that drops worker `index`'s start task from `starting`."""
    def forget(_task: asyncio.Task[HarnessWorker]) -> None:
        starting.pop(index, None)
    return forget


class WorkerLauncher:
    """How a `HarnessPool` starts its worker processes, and those started before its event
    loop ran (`HarnessPool.spawn`), with the `prepare` requests for workers not started yet:
    plain processes and sockets, no event loop needed."""

    def __init__(self, limits: SandboxLimits, unsafe_no_sandbox: bool,
                 pool_options: dict[str, Any], workers: int) -> None:
        self._config = {"limits": asdict(limits), "unsafe": unsafe_no_sandbox,
                        "pool": pool_options}
        self._spawned: dict[int, tuple[subprocess.Popen[bytes], socket.socket]] = {}
        self._prepared: dict[int, list[list[Any]]] = {}
        self._started = [False] * workers   # each index's first worker began starting

    def launch(self, index: int) -> tuple[subprocess.Popen[bytes], socket.socket]:
        """Worker `index`'s process: the one started early if there is one, else a new one.
        SandboxStartError if it cannot start."""
        spawned = self._spawned.pop(index, None)
        if spawned is not None:
            return spawned
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH"))
                                            if p)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "envduels.sandbox._harness_worker",
                 str(theirs.fileno()), json.dumps({**self._config, "parent": os.getpid()})],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        except OSError as err:
            mine.close()
            raise SandboxStartError(f"the harness could not start a worker process: {err}") \
                from None
        finally:
            theirs.close()
        return process, mine

    def spawn(self, index: int) -> None:
        """Start worker `index`'s process now, for `launch` to hand over; the `prepare`s
        asked of it so far are sent at once (it reads them first thing)."""
        if index in self._spawned or self._started[index]:
            return
        process, mine = self._spawned[index] = self.launch(index)
        for args in self._prepared.pop(index, []):
            mine.sendall(encode([0, "prepare", args]))

    def taken(self, index: int) -> list[list[Any]]:
        """Worker `index` is connected to its pool: the `prepare`s kept for it, to send now.
        Later ones go to it directly; a worker replacing it gets none."""
        self._started[index] = True
        return self._prepared.pop(index, [])

    def deliver(self, index: int, args: list[Any]) -> None:
        """`prepare` args for worker `index`, not connected to its pool: to its socket if it
        was started early, else kept for its first start (a replacement goes without)."""
        if index in self._spawned:
            with contextlib.suppress(OSError):
                self._spawned[index][1].sendall(encode([0, "prepare", args]))
        elif not self._started[index]:
            self._prepared.setdefault(index, []).append(args)

    def spawned_pids(self) -> list[int]:
        """Pids of the processes started early and not taken yet (diagnostics, tests)."""
        return [process.pid for process, _ in self._spawned.values()]

    def discard(self) -> None:
        """End the processes started early that no pool took (no event loop needed)."""
        spawned, self._spawned = self._spawned, {}
        for process, mine in spawned.values():
            mine.close()   # the worker ends at the end of its stream
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(_SHUTDOWN_S)
            if process.poll() is None:
                process.kill()
                process.wait()


class HarnessPool:
    """`EnvPool`'s surface over `workers` harness worker processes (default: one per core);
    see the module docstring. `pool_options` (warm, max_warm, parallel_starts, templates) go
    to each worker's `EnvPool`. Bound to the event loop of its first use. Raises
    SandboxUnavailable at construction when the runtime is missing, as `EnvPool` does."""

    def __init__(self, limits: SandboxLimits = DEFAULT_LIMITS, *,
                 unsafe_no_sandbox: bool = False, workers: int | None = None,
                 **pool_options: Any) -> None:
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if not unsafe_no_sandbox:
            require_runtime(limits.runtime)
        self.limits = limits
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.workers = workers or cores()
        self._options = pool_options
        self._slots: list[HarnessWorker | None] = [None] * self.workers
        self._starting: dict[int, asyncio.Task[HarnessWorker]] = {}
        self._ids = 0
        self._closed = False
        self._expected: int | None = None
        self._broken: str | None = None   # a worker died before it ever answered
        self.launcher = WorkerLauncher(limits, unsafe_no_sandbox, pool_options, self.workers)
        self.replaced = 0         # workers started in place of one that died

    async def __aenter__(self) -> HarnessPool:
        await self.start()
        return self

    async def start(self) -> None:
        """Start the workers now (else the first `open` or `expect` does)."""
        await self._start_all()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    # ----- workers --------------------------------------------------------------------------
    async def _start_all(self) -> None:
        """Every worker slot holds a live worker (started now where none does).
        SandboxStartError once a worker died before it ever answered: starting another would
        only fail the same way, in a loop."""
        if self._broken is not None:
            raise SandboxStartError(self._broken)
        starts = []
        for index, worker in enumerate(self._slots):
            if worker is None or worker.dead is not None:
                if index not in self._starting:
                    task = asyncio.get_running_loop().create_task(self._start(index))
                    self._starting[index] = task
                    task.add_done_callback(_forget_when_done(self._starting, index))
                starts.append(self._starting[index])
        if starts:
            await asyncio.gather(*starts)

    def spawn(self) -> None:
        """Start the worker processes now, before any event loop runs (a command's imports
        and checks then overlap their start-up); the pool takes them over on first use.
        Templates asked for with `prepare` before this start at once in the workers chosen.
        `discard()` ends them if the pool is never used."""
        for index, worker in enumerate(self._slots):
            if worker is None and index not in self._starting:
                self.launcher.spawn(index)

    def discard(self) -> None:
        """End the workers `spawn` started that no event loop took over (no loop needed)."""
        self.launcher.discard()

    async def _start(self, index: int) -> HarnessWorker:
        process, mine = self.launcher.launch(index)
        reader, writer = await asyncio.open_unix_connection(sock=mine, limit=FRAME_MAX_BYTES)
        worker = HarnessWorker(index, process, writer)
        worker.reading = asyncio.get_running_loop().create_task(self._read(worker, reader))
        if self._expected:
            self._send(worker, "expect", [self._share(self._expected)])
        for args in self.launcher.taken(index):   # asked for before it was connected
            self._send(worker, "prepare", args)
        self._slots[index] = worker
        if self._closed:   # closed while it started
            await self._stop(worker)
        return worker

    async def _read(self, worker: HarnessWorker, reader: asyncio.StreamReader) -> None:
        why = "its connection closed"
        try:
            while (message := await read_frame(reader)) is not None:
                rid, reply = message
                worker.answered = True
                future = worker.pending.pop(rid, None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (ValueError, TypeError, OSError) as err:
            why = f"it sent a broken frame ({err})"
        await self._lost(worker, why)

    async def _lost(self, worker: HarnessWorker, why: str) -> None:
        """`worker` is gone: fail its calls in flight, replace it (unless closing)."""
        if worker.dead is not None:
            return
        end = time.monotonic() + 1.0
        while worker.process.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.01)
        rc = worker.process.poll()
        if rc is None:
            worker.process.kill()   # speaking garbage or silent: it cannot be trusted
            how = why
        elif rc < 0:
            how = f"was killed by {_signal_name(-rc)}"
        else:
            how = f"exited with status {rc}"
        worker.dead = (f"the harness worker process {worker.pid} that held this sandbox "
                       f"{how}: the harness's fault, not the environment's")
        with contextlib.suppress(Exception):
            worker.writer.close()
        for future in worker.pending.values():
            if not future.done():
                future.set_exception(SandboxLost(worker.dead))
        worker.pending.clear()
        if not worker.answered and not self._closed:
            self._broken = (f"the harness could not start a worker process: it {how} before "
                            "it answered (see its output above)")
            log.error("%s", self._broken)
            return
        if not self._closed and self._slots[worker.index] is worker:
            log.warning("harness worker process %d %s (%d instance(s) ended with it); a new "
                        "worker takes its place", worker.pid, how, worker.open)
            self.replaced += 1
            await self._start_all()

    def _send(self, worker: HarnessWorker, method: str, args: list[Any],
              future: asyncio.Future[Any] | None = None) -> None:
        rid = 0
        if future is not None:
            self._ids += 1
            rid = self._ids
            worker.pending[rid] = future
        worker.writer.write(encode([rid, method, args]))

    async def _request(self, worker: HarnessWorker, method: str, *args: Any) -> Any:
        """`method(*args)` on `worker`'s InstanceHost; SandboxLost when the worker is gone."""
        if worker.dead is not None:
            raise SandboxLost(worker.dead)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            self._send(worker, method, list(args), future)
        except (OSError, RuntimeError) as err:   # its socket is closing: it is dying
            worker.pending.pop(self._ids, None)
            raise SandboxLost(f"the harness worker process {worker.pid} is gone ({err})") \
                from None
        reply = await future
        if isinstance(reply, list) and reply and reply[0] == "error":
            raise SandboxStartError(f"harness worker error in {method}: {reply[1]}")
        return reply

    # ----- the Transport of RemoteEnvInstance ------------------------------------------------
    async def stats(self) -> list[dict[str, Any]]:
        """Each live worker's own CPU seconds (its sandboxes' processes not counted unless
        reaped by it) and open instances, in worker order: for benches."""
        await self._start_all()
        return [await self._request(w, "stats") for w in self._slots
                if w is not None and w.dead is None]

    async def host_call(self, holder: HarnessWorker, iid: int, op: str,
                        arg: int | str | list[Any] | None) -> tuple[Any, ...]:
        return tuple(await self._request(holder, "call", iid, op, arg))

    async def host_close(self, holder: HarnessWorker, iid: int, *, wait: bool) -> None:
        if holder.dead is not None:
            return
        if wait:   # as EnvInstance.close: no process of it left on return
            with contextlib.suppress(SandboxLost):
                await self._request(holder, "close", iid, True)
        else:
            with contextlib.suppress(OSError, RuntimeError):
                self._send(holder, "close", [iid])

    def slot_freed(self) -> None:
        pass   # opens never wait for room: each worker's pool decides

    # ----- the EnvPool surface ---------------------------------------------------------------
    @property
    def worker_pids(self) -> list[int]:
        """Host pids of the live workers, in worker order (diagnostics, tests)."""
        return [w.pid for w in self._slots if w is not None and w.dead is None]

    @property
    def ready(self) -> int:
        """Warm sandboxes the workers held at their last open (templates keep none)."""
        return sum(w.ready for w in self._slots if w is not None and w.dead is None)

    def _share(self, opens: int) -> int:
        return -(-opens // self.workers)

    def expect(self, opens: int | None) -> None:
        """As `EnvPool.expect`: each worker is told its share of the batch."""
        if self._closed:
            return
        self._expected = None if opens is None else max(0, opens)
        for worker in self._slots:
            if worker is not None and worker.dead is None:
                share = None if self._expected is None else self._share(self._expected)
                with contextlib.suppress(OSError, RuntimeError):
                    self._send(worker, "expect", [share])

    def prepare(self, sources: Iterable[str], *, replay: bool = False, instances: int = 0) -> None:
        """As `EnvPool.prepare`, in the workers the opens of each source go to: as many as
        `instances` asks for (at least one, the first in the source's `route` order: where
        an open goes when the workers are equally busy), each forking its share. A worker
        not started yet does it first thing; one that replaces a dead worker does not."""
        if self._closed:
            return
        instances = max(0, instances)
        spread = max(1, min(instances, self.workers))
        share = -(-instances // spread)
        chosen: dict[int, list[str]] = {}
        for source in dict.fromkeys(sources):
            for index in self.route(source)[:spread]:
                chosen.setdefault(index, []).append(source)
        for index, batch in chosen.items():
            args = [batch, bool(replay), share]
            worker = self._slots[index]
            if worker is not None and worker.dead is None:
                with contextlib.suppress(OSError, RuntimeError):
                    self._send(worker, "prepare", args)
            else:
                self.launcher.deliver(index, args)

    def route(self, source: str) -> list[int]:
        """Every worker index, in the order an open of `source` prefers them when equally
        loaded: from a place drawn from the source's hash."""
        n = self.workers
        home = int.from_bytes(hashlib.sha256(source.encode("utf-8", "surrogatepass"))
                              .digest()[:8], "big") % n
        return [(home + k) % n for k in range(n)]

    async def open(self, source: str, *, class_name: str | None = None,
                   max_turns: int | None = None, replay: bool = False,
                   apart_from: object | None = None) -> RemoteEnvInstance:
        """As `EnvPool.open`, in the least busy worker; `apart_from` (the `holder` of an
        instance: a replay's play) is never chosen while another worker lives."""
        check_open(self._closed, source, max_turns)
        await self._start_all()
        if self._expected:
            self._expected -= 1
        rank = {index: place for place, index in enumerate(self.route(source))}
        live = [w for w in self._slots if w is not None]
        others = [w for w in live if w is not apart_from]
        worker = min(others or live, key=lambda w: (w.open, rank[w.index]))
        worker.open += 1
        try:
            reply = await self._request(worker, "open", source, class_name, max_turns, replay)
        except BaseException:
            worker.open -= 1
            raise
        if reply[0] != "ok":
            worker.open -= 1
            raise_reply(reply)
        _, iid, name, turns, oracle, pid, ready = reply
        worker.ready = ready
        return RemoteEnvInstance(self, worker, iid, class_name=name, max_turns=turns,
                                 has_oracle=oracle, pid=pid)

    async def aclose(self) -> None:
        """Close every worker's sandboxes (open instances included) and stop the workers."""
        if self._closed:
            return
        self._closed = True
        if self._starting:
            await asyncio.gather(*self._starting.values(), return_exceptions=True)
        self.discard()
        workers = [w for w in self._slots if w is not None]
        await asyncio.gather(*(self._stop(w) for w in workers), return_exceptions=True)

    async def _stop(self, worker: HarnessWorker) -> None:
        if worker.dead is None:
            with contextlib.suppress(SandboxLost, SandboxStartError):
                await asyncio.wait_for(self._request(worker, "shutdown"), _SHUTDOWN_S)
            with contextlib.suppress(Exception):
                worker.writer.close()   # the worker exits at the end of its stream
        end = time.monotonic() + _SHUTDOWN_S
        while worker.process.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.01)
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
        if worker.reading is not None:
            await asyncio.gather(worker.reading, return_exceptions=True)


SandboxPool: TypeAlias = "HarnessPool | EnvPool"
"""A pool on this machine: in harness workers, or in the caller's process."""


def sandbox_pool(limits: SandboxLimits = DEFAULT_LIMITS, *, workers: int | None = None,
                 unsafe_no_sandbox: bool = False,
                 **pool_options: Any) -> HarnessPool | EnvPool:
    """The pool a command uses: `HarnessPool` over `workers` harness worker processes (None:
    one per core, `sandbox.workers`), or with `workers=0` an `EnvPool` in this process (all
    sandbox work on the caller's event loop, as before harness workers). `pool_options` go to
    the `EnvPool`(s)."""
    if workers == 0:
        from ._pool import EnvPool
        return EnvPool(limits, unsafe_no_sandbox=unsafe_no_sandbox, **pool_options)
    return HarnessPool(limits, workers=workers, unsafe_no_sandbox=unsafe_no_sandbox,
                       **pool_options)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
