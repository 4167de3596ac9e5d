"""`envduels serve NAME...`: the environments as an OpenEnv server, until interrupted."""

from __future__ import annotations

import contextlib
import sys

from envduels._signals import terminate_as_interrupt
from envduels.errors import UserError


def serve_command(names: list[str], *, host: str = "127.0.0.1", port: int = 0,
                  max_sessions: int = 32, idle_timeout_s: float = 300.0,
                  unsafe_no_sandbox: bool = False) -> int:
    """Serve `names` (see `serve._catalog`) on host:port; the first stdout line is
    `envduels serve: http://HOST:PORT/`. Bound to loopback unless `host` says otherwise, with a
    warning (on stderr) that there is no login. UserError for bad names or options, or when no
    sandbox can run here."""
    try:
        import openenv.core.env_server  # noqa: F401  (the server is OpenEnv's)
    except ImportError as err:
        raise UserError(f"envduels serve needs OpenEnv, package openenv ({err}): pip install "
                        "'envduels[serve]'") from None
    import uvicorn

    from envduels.sandbox import SandboxLimits, check_sandbox
    from envduels.serve._app import MAX_BODY_BYTES, build_app
    from envduels.serve._catalog import catalog
    from envduels.view.commands import allowed_hosts, bind, is_loopback, url_of

    if max_sessions < 1:
        raise UserError(f"--max-sessions must be at least 1 (got {max_sessions})")
    if not idle_timeout_s > 0:
        raise UserError(f"--idle-timeout must be above 0 seconds (got {idle_timeout_s:g})")
    served = catalog(list(names))
    for limits in {s.limits for s in served.values()} or {SandboxLimits()}:
        check_sandbox(limits, unsafe_no_sandbox=unsafe_no_sandbox)
    app = build_app(served, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                    allowed_hosts=allowed_hosts(host), unsafe_no_sandbox=unsafe_no_sandbox)
    sock = bind(host, port)
    # SIGTERM does what Ctrl-C does, and either ends the server with exit 0 once uvicorn has
    # closed the sessions' sandboxes: uvicorn raises the signal again after its shutdown, and
    # Python's own SIGTERM would end the process before the sandbox layer's exit hooks ran
    try:
        print(f"envduels serve: {url_of(sock)}", flush=True)
        if not is_loopback(host):
            print(f"WARNING: serving on {host}, not loopback: anyone who can reach it can play "
                  "these environments and read their hints (there is no login)", file=sys.stderr,
                  flush=True)
        print(f"serving {len(served)} environment(s), at most {max_sessions} session(s) at once "
              "(Ctrl-C to stop)", file=sys.stderr, flush=True)
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                ws_max_size=MAX_BODY_BYTES)
        with terminate_as_interrupt(), contextlib.suppress(KeyboardInterrupt):
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return 0

