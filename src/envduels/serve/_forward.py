"""HTTP requests for an episode another server process holds: which process that is, and the
request passed on to it over its unix socket, its answer passed back unchanged.

Only `POST /reset` with an `episode_id` and `POST /step` are routed (`serve._shared.owner`):
an episode's whole life is in one process. A `/reset` without an id stays where it landed and
gets an id of that process. A body that is not JSON, or whose id is malformed, stays too: the
process it landed on answers the one-line error.
"""

from __future__ import annotations

import json

import httpx
from starlette.types import Scope, Send

from envduels.serve._shared import Place, owner

ROUTED_PATHS = ("/reset", "/step")
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length",
               b"upgrade", b"te", b"trailer", b"proxy-connection"}
_CONNECT_TIMEOUT_S = 5.0


def episode_of(scope: Scope, body: bytes) -> str | None:
    """The `episode_id` a routed request names (None: not routed, or no usable id)."""
    if scope.get("method") != "POST" or scope.get("path") not in ROUTED_PATHS:
        return None
    try:
        request = json.loads(body)
    except ValueError:
        return None
    episode_id = request.get("episode_id") if isinstance(request, dict) else None
    if not isinstance(episode_id, str) or not 1 <= len(episode_id) <= 128:
        return None
    return episode_id


class Forwarder:
    """Passes requests on to the other server processes of `place`, one kept-alive
    connection pool per process. Bound to the event loop of its first `forward`."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._clients: dict[int, httpx.AsyncClient] = {}

    def holder(self, scope: Scope, body: bytes) -> int | None:
        """The other process that holds the request's episode; None when it is this one's."""
        if self.place.count == 1:
            return None
        episode_id = episode_of(scope, body)
        if episode_id is None:
            return None
        index = owner(episode_id, self.place.count)
        return None if index == self.place.index else index

    async def forward(self, index: int, scope: Scope, body: bytes, send: Send) -> None:
        """Send the request to process `index` and its answer to the client; a 503 naming the
        server's fault when that process does not answer (it stopped, or is restarting)."""
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=self.place.socket_of(index)),
                timeout=httpx.Timeout(None, connect=_CONNECT_TIMEOUT_S))
        path = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}"
                                if scope.get("query_string") else "")
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in _HOP_BY_HOP]
        try:
            response = await client.request(scope["method"], f"http://process-{index}{path}",
                                            headers=headers, content=body)
        except httpx.TransportError as err:
            detail = (f"server process {index}, which holds this episode, did not answer "
                      f"({type(err).__name__}): it stopped and its episodes ended (the server's "
                      "fault, not the environment's); /reset to start another")
            response = httpx.Response(503, json={"detail": detail})
        content = response.content
        out = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
        out.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": out})
        await send({"type": "http.response.body", "body": content})

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
