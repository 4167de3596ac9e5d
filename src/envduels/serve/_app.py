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

from envduels._text import one_line
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
from envduels.serve._forward import Forwarder
from envduels.serve._session import Hub
from envduels.serve._shared import Held, Place

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


def detail_line(detail: object) -> str:
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
    return one_line(detail, 500)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else str(exc)
    return JSONResponse({"detail": detail_line(errors)}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"detail": detail_line(exc.detail)}, status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


class _Guard:
    """Marks each request's transport for `DuelEnvironment` (HTTP or WebSocket), refuses an
    HTTP body over `max_body` bytes with a one-line 413 before anything parses it, passes an
    HTTP request for an episode another server process holds on to that process, refuses a
    WebSocket past `--max-sessions` connections (all processes together) in OpenEnv's shape,
    hands each other WebSocket to the hub as a `Connection` (so that the reaper can close it),
    and keeps a client's hang-up out of the log."""

    def __init__(self, app: ASGIApp, max_body: int, hub: Hub, forwarder: Forwarder) -> None:
        self.app = app
        self.max_body = max_body
        self.hub = hub
        self.forwarder = forwarder

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
                holder = self.forwarder.holder(scope, body)
                if holder is not None:
                    await self.forwarder.forward(holder, scope, body, send)
                    return
                receive = _replay(body, receive)
                await self.app(scope, receive, send)
                return
            place = self.hub.place
            if not place.claim(Held.CONNECTIONS):
                await _refuse(receive, send, place)
                return
            try:
                await self._session(scope, receive, send)
            finally:
                place.release(Held.CONNECTIONS)
        finally:
            TRANSPORT.reset(token)

    async def _session(self, scope: Scope, receive: Receive, send: Send) -> None:
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


CLOSE_TRY_LATER = 1013
"""The close code of a WebSocket refused at capacity: "Try Again Later" (IANA's registry)."""


async def _refuse(receive: Receive, send: Send, place: Place) -> None:
    """A WebSocket past `--max-sessions` connections: OpenEnv's own refusal (an error message
    with code CAPACITY_REACHED, which its client raises), then a close with the reason."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    everywhere = f", its {place.count} processes together" if place.count > 1 else ""
    line = (f"the server is at --max-sessions {place.max_sessions} connections{everywhere}: "
            "close another session or try again later")
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": {
        "message": line, "code": "CAPACITY_REACHED",
        "active_sessions": place.total(Held.CONNECTIONS), "max_sessions": place.max_sessions}})})
    await send({"type": "websocket.close", "code": CLOSE_TRY_LATER,
                "reason": "at --max-sessions: try again later"})


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
              unsafe_no_sandbox: bool = False, max_body: int = MAX_BODY_BYTES,
              place: Place | None = None, harness_workers: int = 0) -> FastAPI:
    """The app serving `served`; `app.state.hub` holds the sessions (closed at shutdown).

    `max_sessions` caps both the WebSocket sessions OpenEnv accepts and the sandboxes alive at
    once (HTTP episodes included), in all the server's processes together when `place` is one
    of several (`serve._shared`; default: a server of one process); a session idle for
    `idle_timeout_s` is ended, and its WebSocket closed (`serve._connection`), whether or not
    it ever reset. `harness_workers` N > 0 puts the sandboxes in N harness worker processes
    behind this one instead of in it (a measurement of the other design: bench_serve.py).
    """
    place = place or Place.alone(max_sessions)
    hub = Hub(served, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
              unsafe_no_sandbox=unsafe_no_sandbox, place=place, harness_workers=harness_workers)
    forwarder = Forwarder(place)
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
    app.router.on_shutdown.append(forwarder.aclose)
    # outermost first: the size cap and the transport mark see every request
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    app.add_middleware(_Guard, max_body=max_body, hub=hub, forwarder=forwarder)
    return app
