"""One WebSocket connection of `envduels serve`, as the hub's reaper sees it and ends it.

OpenEnv's server holds one of its `--max-sessions` slots for every open WebSocket, until that
socket closes; ending a session's sandbox does not close it. So an idle client that stays
connected, or one that connects and never sends a thing, would hold its slot for good. A
`Connection` sits between the server and OpenEnv's endpoint (the app's middleware wraps each
WebSocket in one): it notes when the client last sent a message, and `expire(reason)` ends
it from the connection's own task, the next time the endpoint waits for a message: a close
frame with `CLOSE_IDLE` and the reason goes to the client, and the endpoint is told the client
left, so OpenEnv frees the slot at once. Nothing the endpoint sends after that goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time

from starlette.types import Message, Receive, Send

CLOSE_IDLE = 4408
"""The WebSocket close code of a session ended for idleness: 4000-4999 are the application's
own (RFC 6455 §7.4.2); 408 as HTTP's Request Timeout."""

_REASON_BYTES = 123   # the most a close frame's reason may hold (RFC 6455 §5.5)

CONNECTION: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "envduels_connection", default=None)
"""The WebSocket connection of the request being served (None over HTTP), set by the app's
middleware for the endpoint's task."""


class Connection:
    """One client's WebSocket: `receive` and `send` are the ones to hand the endpoint."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.last_active = time.monotonic()
        self.ended: str | None = None
        self._expired = asyncio.Event()
        self._closed = False   # a close frame went out: nothing more may

    def expire(self, reason: str) -> None:
        """End the connection with `reason` (one line, for the client), from any task of the
        server's loop: the close happens in the connection's own task."""
        if self.ended is None:
            self.ended = reason
            self._expired.set()

    async def receive(self) -> Message:
        """The client's next message, or, once expired, a disconnect (after the close frame
        has gone out)."""
        if self.ended is None:
            inner = asyncio.ensure_future(self._receive())
            expired = asyncio.ensure_future(self._expired.wait())
            try:
                await asyncio.wait({inner, expired}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                inner.cancel()
                raise
            finally:
                expired.cancel()
            if inner.done():
                message = inner.result()
                if message["type"] == "websocket.receive":
                    self.last_active = time.monotonic()
                return message
            inner.cancel()   # the server's receive may be cancelled: no message is lost
            with contextlib.suppress(asyncio.CancelledError):
                await inner
        if not self._closed:
            self._closed = True
            reason = (self.ended or "").encode()[:_REASON_BYTES].decode(errors="ignore")
            with contextlib.suppress(Exception):   # the client may be gone already
                await self._send({"type": "websocket.close", "code": CLOSE_IDLE,
                                  "reason": reason})
        return {"type": "websocket.disconnect", "code": CLOSE_IDLE}

    async def send(self, message: Message) -> None:
        """Pass the endpoint's `message` on, unless the connection was closed already."""
        if self._closed:
            return
        if message["type"] == "websocket.close":
            self._closed = True
        await self._send(message)
