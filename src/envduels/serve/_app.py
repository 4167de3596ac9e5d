"""The ASGI app of `envduels serve`: OpenEnv's own server app around `DuelEnvironment`, plus
`GET /environments`, a body-size cap, a Host check and one-line errors.

OpenEnv's `create_fastapi_app` builds the app (`/reset`, `/step`, `/state`, `/schema`,
`/metadata`, `/health`, `/ws`, `/mcp`): what OpenEnv's `create_app` returns with its Gradio web
interface off. It is called directly, in simulation mode, so that neither an
`ENABLE_WEB_INTERFACE` (a web playground, with no login, beside the routes the protocol defines)
nor an `OPENENV_MODE=production` (no HTTP `/reset` and `/step`) in the caller's environment
changes what is served.
"""

from __future__ import annotations

import contextlib
import functools
import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import ServerMode
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from envduels.serve._catalog import Served
from envduels.serve._connection import CONNECTION, Connection
from envduels.serve._env import (
    TRANSPORT,
    DuelAction,
    DuelEnvironment,
    DuelObservation,
    DuelState,
    Panel,
)
from envduels.serve._session import Hub

MAX_BODY_BYTES = 1 << 20
"""The largest request body (HTTP) or WebSocket message accepted: a reply is searched for its
action in its last 100,000 characters, so 1 MiB holds any reply worth sending."""

DEFAULT_IDLE_TIMEOUT_S = 300.0


class EnvironmentInfo(BaseModel):
    """One served environment as `GET /environments` lists it."""

    id: str
    title: str
    domain: str
    author: str
    max_turns: int
    hint_levels: list[int]
    benchmark_seeds: list[int]
    panel: Panel | None


class EnvironmentList(BaseModel):
    environments: list[EnvironmentInfo]


def one_line(detail: object) -> str:
    """An error detail as one line: pydantic's error list as `field: problem; ...`."""
    if isinstance(detail, list):
        parts = []
        for err in detail[:5]:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
                parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
            else:
                parts.append(str(err))
        detail = "; ".join(parts) or "invalid request"
    text = " ".join(str(detail).split())
    return text if len(text) <= 500 else text[:499] + "…"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else str(exc)
    return JSONResponse({"detail": one_line(errors)}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"detail": one_line(exc.detail)}, status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


class _Guard:
    """Marks each request's transport for `DuelEnvironment` (HTTP or WebSocket), refuses an
    HTTP body over `max_body` bytes with a one-line 413 before anything parses it, hands each
    WebSocket to the hub as a `Connection` (so that the reaper can close it), and keeps a
    client's hang-up out of the log."""

    def __init__(self, app: ASGIApp, max_body: int, hub: Hub) -> None:
        self.app = app
        self.max_body = max_body
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        token = TRANSPORT.set(scope["type"])
        try:
            if scope["type"] == "http":
                body = await self._read(scope, receive)
                if body is None:
                    await _too_large(send, self.max_body)
                    return
                receive = _replay(body, receive)
                await self.app(scope, receive, send)
                return
            connection = Connection(receive, send)
            self.hub.connect(connection)
            held = CONNECTION.set(connection)
            try:
                # OpenEnv closes a socket its client already closed, and Starlette raises for
                # that: the client left, which is nothing to log a traceback about
                with contextlib.suppress(WebSocketDisconnect):
                    await self.app(scope, connection.receive, connection.send)
            finally:
                CONNECTION.reset(held)
                self.hub.disconnect(connection)
        finally:
            TRANSPORT.reset(token)

    async def _read(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when it is (or says it is) over the cap."""
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit()
                                              or int(value) > self.max_body):
                return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()   # what follows the body: a disconnect
    return replay


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"request body over {limit} bytes; send a shorter reply"}
                      ).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def build_app(served: dict[str, Served], *, max_sessions: int = 32,
              idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, allowed_hosts: list[str] | None = None,
              unsafe_no_sandbox: bool = False, max_body: int = MAX_BODY_BYTES) -> FastAPI:
    """The app serving `served`; `app.state.hub` holds the sessions (closed at shutdown).

    `max_sessions` caps both the WebSocket sessions OpenEnv accepts and the sandboxes alive at
    once (HTTP episodes included); a session idle for `idle_timeout_s` is ended, and its
    WebSocket closed (`serve._connection`), whether or not it ever reset.
    """
    hub = Hub(served, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
              unsafe_no_sandbox=unsafe_no_sandbox)
    app = create_fastapi_app(functools.partial(DuelEnvironment, hub), DuelAction,
                             DuelObservation, max_concurrent_envs=max_sessions,
                             state_cls=DuelState, mode=ServerMode.SIMULATION)
    app.title = "envduels serve"
    app.state.hub = hub

    @app.get("/environments", response_model=EnvironmentList, tags=["Environment Info"],
             summary="The served environments, with their panel results")
    async def environments() -> EnvironmentList:
        return EnvironmentList(environments=[EnvironmentInfo.model_validate(s.describe()) for s in served.values()])

    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.router.on_shutdown.append(hub.aclose)
    # outermost first: the size cap and the transport mark see every request
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    app.add_middleware(_Guard, max_body=max_body, hub=hub)
    return app
