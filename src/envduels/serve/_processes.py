"""The server processes of `envduels serve --workers N`, and the supervisor that keeps N alive.

Each server process is a whole server: OpenEnv's app, its own event loop, its own sandboxes
(docs/training.md, "Serving at scale", says why not one front process). Each listens on a
socket of its own at the server's one address (SO_REUSEPORT), so the kernel spreads new
connections evenly over the live processes; what they share is in `serve._shared` (the counts
against `--max-sessions`, where an HTTP episode lives). A process that stops ends only the
sessions it held (its sandboxes die with it) and the supervisor starts another in its place,
whose HTTP episodes answer that they were lost; one that fails before it ever served stops the
server, since its successors would fail the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import TYPE_CHECKING

from envduels._signals import terminate_as_interrupt
from envduels.serve._shared import Place

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

    from envduels.serve._catalog import Served

STOP_TIMEOUT_S = 60.0   # a process closing its sandboxes at shutdown; then it is killed
BACKLOG = 2048          # connections waiting for each process's accept (the kernel caps it)


@dataclass(frozen=True)
class ServeOptions:
    """What every server process serves, and how (the `envduels serve` options)."""

    served: dict[str, Served]
    max_sessions: int
    idle_timeout_s: float
    allowed_hosts: list[str] | None
    unsafe_no_sandbox: bool = False
    harness_workers: int = 0   # > 0: sandboxes in harness worker processes (bench_serve.py)


def listen_at(family: int, address: tuple[object, ...]) -> socket.socket:
    """This process's own listening socket at the server's address (which the supervisor
    holds with SO_REUSEPORT)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # inherited by connections
    sock.bind(address)
    sock.listen(BACKLOG)
    return sock


def run_process(options: ServeOptions, place: Place, family: int,
                address: tuple[object, ...], ready: Event) -> None:
    """The body of one server process (spawned by `Supervisor`): serve at `address` and on
    this process's own unix socket (forwarded HTTP requests) until told to stop, or until the
    supervisor is gone. `ready` is set once it accepts. Its name (`ps`, /proc/PID/comm) is
    `envduels-srvK` for process K."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(process_name(place.index))
    import uvicorn  # the serve extra's, in the process that serves

    from envduels.serve._app import MAX_BODY_BYTES, build_app

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                ready.set()

    app = build_app(options.served, max_sessions=options.max_sessions,
                    idle_timeout_s=options.idle_timeout_s, allowed_hosts=options.allowed_hosts,
                    unsafe_no_sandbox=options.unsafe_no_sandbox, place=place,
                    harness_workers=options.harness_workers)
    sockets = [listen_at(family, address)]
    if place.sockets_dir is not None:
        path = place.socket_of(place.index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)   # left by the process this one replaces
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.bind(path)
        peer.listen(1024)
        sockets.append(peer)
    server = Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                   ws_max_size=MAX_BODY_BYTES))
    parent = multiprocessing.parent_process()
    if parent is not None:   # a supervisor killed outright: stop, closing the sandboxes
        def stop_with_parent() -> None:
            multiprocessing.connection.wait([parent.sentinel])
            server.should_exit = True
        threading.Thread(target=stop_with_parent, name="envduels-parent", daemon=True).start()
    with terminate_as_interrupt(), contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)


def process_name(index: int) -> str:
    """What server process `index` is called in `ps` (15 characters at most: comm's limit)."""
    return f"envduels-srv{index}"


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-exitcode).name}"
        return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class Supervisor:
    """Runs `count` server processes at the address `held` holds (a socket bound with
    SO_REUSEPORT, not listening) until interrupted (Ctrl-C or SIGTERM), replacing any that
    stops. `on_ready()` is called once every process accepts. `run()` returns the command's
    exit status."""

    def __init__(self, options: ServeOptions, held: socket.socket, count: int,
                 on_ready: Callable[[], None] = lambda: None) -> None:
        self.options = options
        self.family = int(held.family)
        self.address = held.getsockname()
        self.count = count
        self.on_ready = on_ready
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, tuple[SpawnProcess, Event]] = {}
        self._dir: str | None = None
        self._place: Place | None = None

    def run(self) -> int:
        if self.count > 1:
            self._dir = tempfile.mkdtemp(prefix="envduels-serve-")   # mode 0700: ours alone
            lock = os.path.join(self._dir, "capacity.lock")
            open(lock, "wb").close()
        else:
            lock = None
        self._place = Place(index=0, count=self.count, max_sessions=self.options.max_sessions,
                            counts=self._context.RawArray("q", 2 * self.count),
                            lock_path=lock, sockets_dir=self._dir)
        try:
            with terminate_as_interrupt():
                try:
                    for index in range(self.count):
                        self._start(index, lost=None)
                    if not self._wait_ready():
                        return 1
                    self.on_ready()
                    return self._watch()
                except KeyboardInterrupt:
                    return 0
        finally:
            self._stop()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _start(self, index: int, lost: str | None) -> None:
        assert self._place is not None
        place = dataclasses.replace(self._place, index=index, lost=lost)
        ready = self._context.Event()
        process = self._context.Process(target=run_process, name=process_name(index),
                                        args=(self.options, place, self.family, self.address,
                                              ready))
        # a Ctrl-C while the new process imports would print its traceback: it ignores SIGINT
        # until its server installs its own handlers (SIGTERM still stops it)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            process.start()
        finally:
            signal.signal(signal.SIGINT, previous)
        self._processes[index] = (process, ready)

    def _wait_ready(self) -> bool:
        """Wait until every process accepts; False (said on stderr) if one stopped first."""
        for index, (process, ready) in list(self._processes.items()):
            while not ready.wait(0.2):
                if not process.is_alive():
                    self._processes.pop(index)
                    print(f"envduels serve: server process {index} "
                          f"{_how_it_ended(process.exitcode)} before it could serve; stopping "
                          "(its log is above)", file=sys.stderr, flush=True)
                    return False
        return True

    def _watch(self) -> int:
        """Replace each process that stops; 1 if one stopped before it ever served."""
        assert self._place is not None
        while True:
            by_sentinel = {p.sentinel: index for index, (p, _) in self._processes.items()}
            for sentinel in multiprocessing.connection.wait(list(by_sentinel)):
                index = by_sentinel[sentinel]   # type: ignore[index]
                process, ready = self._processes.pop(index)
                process.join()
                how = _how_it_ended(process.exitcode)
                self._place.clear(index)   # its sandboxes died with it
                if not ready.is_set():
                    print(f"envduels serve: server process {index} {how} before it could "
                          "serve; stopping (its log is above)", file=sys.stderr, flush=True)
                    return 1
                print(f"envduels serve: server process {index} (pid {process.pid}) {how}; the "
                      "sessions it held ended; starting another in its place", file=sys.stderr,
                      flush=True)
                self._start(index, lost=f"server process {index} "
                                        f"{how} at {time.strftime('%H:%M:%S')}")

    def _stop(self) -> None:
        """Stop every process as Ctrl-C stops a server (closing its sandboxes); kill any
        still there after STOP_TIMEOUT_S."""
        for process, _ in self._processes.values():
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process, _ in self._processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self._processes.clear()
