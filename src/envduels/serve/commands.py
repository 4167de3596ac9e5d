"""`envduels serve NAME...`: the environments as an OpenEnv server, until interrupted."""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
from typing import TYPE_CHECKING

from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.serve._catalog import Served


def default_workers() -> int:
    """The server processes `envduels serve` runs unless told: one per core it may use."""
    return len(os.sched_getaffinity(0)) or 1


def raise_open_files() -> int:
    """Raise this process's descriptor limit (inherited by its server processes) to its hard
    limit: a held-open session costs its socket and its sandbox's pipes. Returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass   # what the soft limit allows is what the server holds
    return soft


def serve_command(names: list[str], *, host: str | None = None, port: int = 0,
                  max_sessions: int = 32, idle_timeout_s: float = 300.0,
                  workers: int | None = None, ray: str | None = None,
                  unsafe_no_sandbox: bool = False) -> int:
    """Serve `names` (see `serve._catalog`) on host:port from `workers` server processes
    (default: one per core); the first stdout line is `envduels serve: http://HOST:PORT/`,
    printed once every process accepts. Bound to loopback unless `host` says otherwise, with
    a warning (on stderr) that there is no login. With `ray` (a cluster's address, or 'auto'),
    the same server on every node of that Ray cluster instead (`serve._ray`), `workers` and
    `max_sessions` for each node, and the first line lists every node's URL. UserError for
    bad names or options, or when no sandbox can run here."""
    if importlib.util.find_spec("openenv") is None or \
            importlib.util.find_spec("openenv.core.env_server") is None:
        raise UserError("envduels serve needs OpenEnv, package openenv: pip install "
                        "'envduels[serve]'")

    from envduels.sandbox import SandboxLimits, check_sandbox
    from envduels.serve._catalog import catalog
    from envduels.serve._processes import ServeOptions, Supervisor
    from envduels.view.commands import allowed_hosts, bind, is_loopback, url_of

    if max_sessions < 1:
        raise UserError(f"--max-sessions must be at least 1 (got {max_sessions})")
    if not idle_timeout_s > 0:
        raise UserError(f"--idle-timeout must be above 0 seconds (got {idle_timeout_s:g})")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1 (got {workers}); leave it out for one "
                        "per core")
    if ray is not None and host is not None:
        raise UserError("--host and --ray do not go together: with --ray each node serves on "
                        "its own address")
    served = catalog(list(names))
    if ray is not None:
        return _serve_on_ray(served, address=ray, port=port, max_sessions=max_sessions,
                             idle_timeout_s=idle_timeout_s, workers=workers,
                             unsafe_no_sandbox=unsafe_no_sandbox)
    host = host or "127.0.0.1"
    for limits in {s.limits for s in served.values()} or {SandboxLimits()}:
        check_sandbox(limits, unsafe_no_sandbox=unsafe_no_sandbox)
    workers = workers or default_workers()
    open_files = raise_open_files()
    options = ServeOptions(served=served, max_sessions=max_sessions,
                           idle_timeout_s=idle_timeout_s, allowed_hosts=allowed_hosts(host),
                           unsafe_no_sandbox=unsafe_no_sandbox)
    held = bind(host, port, reuse_port=True)   # each server process listens at its address

    def ready() -> None:   # the URL once every process accepts: it answers when it is printed
        print(f"envduels serve: {url_of(held)}", flush=True)
        if not is_loopback(host):
            print(f"WARNING: serving on {host}, not loopback: anyone who can reach it can play "
                  "these environments and read their hints (there is no login)", file=sys.stderr,
                  flush=True)
        print(f"serving {len(served)} environment(s) from {workers} server process(es), at "
              f"most {max_sessions} session(s) at once, {open_files} descriptors per process "
              "(Ctrl-C to stop)", file=sys.stderr, flush=True)

    try:
        # SIGTERM does what Ctrl-C does, and either ends the server with exit 0 once every
        # process has closed its sessions' sandboxes
        return Supervisor(options, held, workers, on_ready=ready).run()
    finally:
        held.close()


def _serve_on_ray(served: dict[str, Served], *, address: str, port: int, max_sessions: int,
                  idle_timeout_s: float, workers: int | None, unsafe_no_sandbox: bool) -> int:
    from envduels.serve._processes import ServeOptions
    from envduels.serve._ray import serve_on_ray
    from envduels.view.commands import is_loopback

    options = ServeOptions(served=served, max_sessions=max_sessions,
                           idle_timeout_s=idle_timeout_s, allowed_hosts=None,
                           unsafe_no_sandbox=unsafe_no_sandbox)

    def ready(urls: list[str]) -> None:
        print(f"envduels serve: {' '.join(urls)}", flush=True)
        hosts = {url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]") for url in urls}
        if not all(is_loopback(h) for h in hosts):
            print("WARNING: serving on the nodes' addresses, not loopback: anyone who can reach "
                  "them can play these environments and read their hints (there is no login)",
                  file=sys.stderr, flush=True)
        each = f"{workers} server process(es)" if workers else "a server process per CPU"
        print(f"serving {len(served)} environment(s) on {len(urls)} node(s), each with {each} "
              f"and at most {max_sessions} session(s) at once (Ctrl-C to stop)",
              file=sys.stderr, flush=True)

    return serve_on_ray(options, address=address, port=port, workers=workers, on_ready=ready)
