"""`envduels view`: serve the viewer for run folders until interrupted."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envduels._signals import terminate_as_interrupt
from envduels.errors import UserError

LOOPBACK_NAMES = ("localhost",)


def allowed_hosts(host: str) -> list[str]:
    """The Host headers the viewer answers: loopback names, the address it listens on and, when
    that is beyond loopback, this machine's own names and addresses. Never "*": any web page the
    user opens could then read the runs through DNS rebinding."""
    import socket

    hosts = ["127.0.0.1", "localhost", "[::1]", "::1", host.strip("[]")]
    if not is_loopback(host):
        name = socket.gethostname()
        hosts += [name, socket.getfqdn()]
        with contextlib.suppress(OSError):
            hosts += socket.gethostbyname_ex(name)[2]
    return list(dict.fromkeys(h for h in hosts if h))


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one. UserError when it cannot.
    With `reuse_port`, a socket that only holds the address (SO_REUSEPORT, not listening):
    each of several processes then listens on a socket of its own at `getsockname()`, and the
    kernel spreads new connections evenly over them (a listening socket they all share goes
    to whichever process wakes first: every connection to one, when idle)."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535 (got {port}); 0 picks a free port")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UserError(f"cannot resolve --host {host} ({err.strerror}); use 127.0.0.1") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # inherited by accepted connections: a response written in two sends (head, body) is not
    # held back by Nagle's algorithm waiting for the client's delayed ACK (40 ms on Linux)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(addr)
    except OSError as err:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({err.strerror}); pick another --port, "
                        "or --port 0 for a free one") from None
    if reuse_port:
        return sock
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def view_command(run_dirs: list[Path], *, host: str = "127.0.0.1", port: int = 0) -> int:
    """Serve the viewer for `run_dirs` on host:port, print its URL, and run until interrupted.

    Never writes to a run folder. Bound to loopback unless `host` says otherwise, in which case
    a warning says that anyone who can reach that address can read every prompt, reply and
    environment of these runs.
    """
    import uvicorn

    from envduels.view._app import close_app, create_app

    if not run_dirs:
        raise UserError("give at least one run folder: envduels view RUN_DIR [RUN_DIR ...]")
    # SIGTERM as Ctrl-C: uvicorn stops serving on either, then raises the signal again once
    # it has, and Python's own SIGTERM would end the process before `close_app` ends the
    # analysis worker (an orphan of about 240 MB each time)
    with terminate_as_interrupt(), contextlib.suppress(KeyboardInterrupt):
        app = create_app(run_dirs, allowed_hosts=allowed_hosts(host))
        try:
            sock = bind(host, port)
            if not is_loopback(host):
                print(f"WARNING: serving on {host}, not loopback: anyone who can reach it can "
                      "read every prompt, reply, hint and environment of these runs (there is "
                      "no login)")
            print(f"envduels view: {url_of(sock)}  (Ctrl-C to stop)", flush=True)
            config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
            try:
                uvicorn.Server(config).run(sockets=[sock])
            finally:
                sock.close()
        finally:
            close_app(app)
    return 0   # stopping is how a viewer ends: nothing was left undone


@contextmanager
def running(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread for the block; yields its URL. For
    tests, benchmarks and screenshots: the same server `envduels view` runs, on a real socket."""
    import time

    import uvicorn

    sock = bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        if hasattr(app.state, "pool"):
            from envduels.view._app import close_app

            close_app(app)
