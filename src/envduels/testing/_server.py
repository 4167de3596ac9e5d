"""A scripted, fault-injecting OpenAI-compatible HTTP server for tests and benchmarks.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies) to serve the official
`openai` and `anthropic` clients on 127.0.0.1, with no dependency beyond the standard library, so
tests exercise real sockets, real retries and real parsing instead of mocked clients.

Routes: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages`` (Anthropic),
``GET /v1/models`` and ``GET /health``. Token usage counts whitespace-separated words. An OpenAI
request with ``"stream": true`` is answered as server-sent events, as OpenAI streams: one chunk
with the whole reply, one with its ``finish_reason``, one with the usage when
``stream_options.include_usage`` asks for it, then ``data: [DONE]`` (whole, with a
Content-Length).

With ``prompt_cache=True`` it also bills like a provider with a prompt cache, in each wire
format's own usage fields: OpenAI-style, a request whose leading messages were all sent before
reports those words as ``prompt_tokens_details.cached_tokens`` (within ``prompt_tokens``);
Anthropic-style, the longest prefix ending at a ``cache_control`` breakpoint that an earlier
request wrote is ``cache_read_input_tokens``, the rest up to its last breakpoint is written
(``cache_creation_input_tokens``) and only what follows is ``input_tokens``. Prefixes shorter than
``cache_min_tokens`` are never cached. ``reasoning_words`` adds hidden reasoning to every answer:
``completion_tokens_details.reasoning_tokens`` (within ``completion_tokens``), or a ``thinking``
block counted in Anthropic's ``output_tokens``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Responder = Callable[[str, list[dict]], str]

DEFAULT_REPLY = "OK"

# Faults a test may queue; each is consumed by one request, in order, before normal service.
FAULTS = {
    "429": "rate limited, with a retry-after header (seconds; '429:0.3' sets 0.3 s)",
    "500": "internal server error",
    "503": "service unavailable",
    "hang": "never answer (the client must time out)",
    "truncated": "a 200 whose JSON body is cut in half",
    "drop": "close the connection after half of the response",
    "nochoices": "a 200 with valid JSON but no choices",
    "usage_inf": "a 200 whose prompt (input) token count is the JSON number 1e400 (infinite)",
    "usage_negative": "a 200 whose prompt (input) token count is -1600000000",
    "usage_fraction": "a 200 whose prompt (input) token count is 2.5",
    "usage_cached_over": "a 200 claiming more cached tokens than the whole prompt (Anthropic: "
                         "-5 cache-read tokens)",
    "deep": "a 200 whose body is 100,000 nested JSON arrays (no parser recursion survives it)",
    "finish_error": "a 200 whose finish_reason (Anthropic: stop_reason) is 'error'",
    "400": "bad request (an invalid parameter)",
    "overflow": "bad request: context length exceeded",
    "401": "invalid API key",
    "404": "model not found",
}


def _words(text: str) -> int:
    return len(text.split())


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


@dataclass
class _Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    mode: str = "normal"  # normal | hang | drop
    content_type: str = "application/json"


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 whose answers and faults a test scripts.

    `responder(model, messages)` gives the reply text (default: "OK"). `faults` are consumed one
    per request, in order, before normal service (see `FAULTS`). With `api_key` set, requests
    without ``Authorization: Bearer <api_key>`` (or ``x-api-key``) get 401; with `models` set,
    other model names get 404. `latency_s` delays every normal answer.

    `requests` records every request received (model, messages, params, path, fault applied,
    the JSON `body` as sent and, for a normal answer, the `usage` it billed; never the
    credentials); `request_count` counts all HTTP
    requests, faulted ones included. `refuse_params` names body parameters the server does not
    know: a request carrying one gets a 400 naming it, like vLLM's. A request with a message
    containing a string of `refuse_content` gets a 400 `content_filter`, as a hosted provider's
    moderation answers. See the module docstring
    for `prompt_cache`, `cache_min_tokens` and `reasoning_words`.
    Use it as a context manager, or `start()` (returns the base URL) and `stop()`.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        latency_s: float = 0.0,
        faults: Sequence[str] = (),
        api_key: str | None = None,
        models: Sequence[str] | None = None,
        hang_s: float = 3600.0,
        port: int = 0,
        record: bool = True,
        prompt_cache: bool = False,
        cache_min_tokens: int = 0,
        reasoning_words: int = 0,
        refuse_params: Sequence[str] = (),
        refuse_content: Sequence[str] = (),
    ) -> None:
        for f in faults:
            if f.split(":")[0] not in FAULTS:
                raise ValueError(f"unknown fault {f!r}; choose from {', '.join(FAULTS)}")
        self.responder: Responder = responder or (lambda model, messages: DEFAULT_REPLY)
        self.latency_s = latency_s
        self.faults: list[str] = list(faults)
        self.api_key = api_key
        self.models = set(models) if models is not None else None
        self.hang_s = hang_s
        self.record = record
        self.prompt_cache = prompt_cache
        self.cache_min_tokens = cache_min_tokens
        self.reasoning_words = reasoning_words
        self.refuse_params = tuple(refuse_params)
        self.refuse_content = tuple(refuse_content)
        self._cached_prefixes: set[str] = set()
        self.requests: list[dict] = []
        self.request_count = 0
        self.base_url = ""
        self._port = port
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[asyncio.Task] = set()
        self._closing = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> str:
        """Start serving in a background thread; returns the base URL ("http://127.0.0.1:P/v1")."""
        if self._thread is not None:
            return self.base_url
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as err:  # report bind errors to start()
                failure.append(err)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close())
                loop.close()

        self._thread = threading.Thread(target=run, name="ScriptedServer", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self.base_url

    def stop(self) -> None:
        """Stop serving and close every open connection; idempotent."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def serve_forever(self) -> None:
        """Serve on the current event loop until cancelled (the subprocess entry point uses it)."""
        await self._open()
        try:
            await asyncio.Event().wait()
        finally:
            await self._close()

    async def _open(self) -> None:
        self._closing = False
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port,
                                                  backlog=1024)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        # every connection's task, also one accepted just now whose handler has not started
        # (_accept registers it at once); none is made once closing (a task left unstarted
        # when the loop closes was reported "never awaited")
        self._closing = True
        tasks = list(self._conns)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def add_faults(self, *faults: str) -> None:
        """Queue more faults (thread-safe)."""
        with self._lock:
            self.faults.extend(faults)

    # -- HTTP -------------------------------------------------------------------------------
    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection: its handler's task, registered before it first runs."""
        if self._closing:
            writer.close()
            return
        task = asyncio.get_running_loop().create_task(self._handle(reader, writer))
        self._conns.add(task)
        task.add_done_callback(self._conns.discard)
        task.add_done_callback(lambda _t: writer.close())

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _ = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                reply = await self._dispatch(method, target.split("?")[0], headers, body)
                if reply.mode == "hang":
                    # Hold the connection open without answering until the client gives up.
                    with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                        await asyncio.wait_for(reader.read(), self.hang_s)
                    return
                data = self._encode(reply)
                if reply.mode == "drop":
                    writer.write(data[: len(data) - len(reply.body) // 2])
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()
                    return
                writer.write(data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # Shutting down. Finish normally: asyncio 3.11 logs a cancelled connection handler.
            return
        finally:
            self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _encode(reply: _Reply) -> bytes:
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                f"content-type: {reply.content_type}",
                f"content-length: {len(reply.body)}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body

    async def _dispatch(self, method: str, path: str, headers: dict[str, str],
                        body: bytes) -> _Reply:
        self.request_count += 1
        if method == "GET" and path in ("/health", "/v1/health"):
            return _json(200, {"status": "ok"})
        if method == "GET" and path == "/v1/models":
            names = sorted(self.models) if self.models else ["scripted"]
            return _json(200, {"object": "list",
                               "data": [{"id": n, "object": "model", "owned_by": "envduels"}
                                        for n in names]})
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/messages"):
            return _json(404, {"error": {"message": f"no route {method} {path}",
                                         "type": "not_found"}})
        anthropic = path == "/v1/messages"
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return _json(400, {"error": {"message": "body is not JSON",
                                         "type": "invalid_request_error"}})
        with self._lock:
            fault = self.faults.pop(0) if self.faults else None
        model = str(request.get("model", ""))
        # The responder and `requests` see text; content blocks (cache_control) are in `body`.
        messages = [{**m, "content": _message_text(m.get("content"))} if isinstance(m, dict)
                    and isinstance(m.get("content"), list) else m
                    for m in request.get("messages") or []]
        if anthropic and request.get("system"):
            messages = [{"role": "system", "content": _message_text(request["system"])}, *messages]
        entry: dict[str, Any] = {}
        if self.record:
            params = {k: v for k, v in request.items() if k not in ("model", "messages", "system")}
            entry = {"path": path, "model": model, "messages": messages, "params": params,
                     "fault": fault, "body": request}
            self.requests.append(entry)
        if fault is None:
            fault = self._policy_fault(headers, model)
        if fault is None:
            refused = next((p for p in self.refuse_params if p in request), None)
            if refused is not None:
                return _error(400, f"Unrecognized request argument supplied: {refused}",
                              "invalid_request_error", "unknown_parameter", anthropic)
            if any(word in str(m.get("content", "")) for word in self.refuse_content
                   for m in messages if isinstance(m, dict)):
                return _error(400, "The response was filtered due to the prompt triggering "
                              "the content management policy.", "invalid_request_error",
                              "content_filter", anthropic)
        if fault is not None:
            reply = _fault_reply(fault, anthropic)
            if reply is not None:
                return reply
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.responder(model, messages)
        n_in = sum(_words(_message_text(m.get("content"))) for m in messages)
        n_out = _words(text)
        if fault == "truncated" or fault == "drop":
            raw = json.dumps(_completion(model, text, n_in, n_out, anthropic)).encode()
            if fault == "truncated":
                return _Reply(200, raw[: len(raw) // 2])
            return _Reply(200, raw, mode="drop")
        if fault in _HOSTILE:
            return _hostile_reply(fault, _completion(model, text, n_in, n_out, anthropic), anthropic)
        if fault == "nochoices":
            return _json(200, {"id": "x", "object": "chat.completion", "model": model,
                               "usage": {"prompt_tokens": n_in, "completion_tokens": 0,
                                         "total_tokens": n_in}})
        answer = _completion(model, text, n_in, n_out, anthropic)
        if self.prompt_cache or self.reasoning_words:
            with self._lock:
                cache = (self._bill_cache(model, request, anthropic) if self.prompt_cache
                         else (0, 0))
            answer = _billed(answer, cache, self.reasoning_words, anthropic)
        entry["usage"] = answer["usage"]   # what this answer billed, for hand computations
        if request.get("stream") is True and not anthropic:
            return _stream(answer, bool((request.get("stream_options") or {}).get("include_usage")))
        return _json(200, answer)

    def _bill_cache(self, model: str, request: dict, anthropic: bool) -> tuple[int, int]:
        """(words read from the cache, words written to it) for one request; updates it. Each
        model has its own cache, as at a provider."""
        if anthropic:
            return self._bill_breakpoints(model, request)
        prefixes = _message_prefixes(model, request.get("messages") or [])
        read = 0
        for digest, words in prefixes:
            if digest in self._cached_prefixes and words >= self.cache_min_tokens:
                read = words
        self._cached_prefixes.update(d for d, _ in prefixes)
        return read, 0

    def _bill_breakpoints(self, model: str, request: dict) -> tuple[int, int]:
        blocks: list[tuple[str, str, bool]] = []  # (role, text, has a breakpoint), in order
        system = request.get("system")
        for b in system if isinstance(system, list) else [{"text": system or ""}]:
            blocks.append(("system", str(b.get("text", "")), "cache_control" in b))
        for m in request.get("messages") or []:
            content = m.get("content")
            parts = content if isinstance(content, list) else [{"text": content or ""}]
            for b in parts:
                blocks.append((str(m.get("role")), str(b.get("text", "")), "cache_control" in b))
        # Like the Messages API: each breakpoint reads the longest cached prefix ending at it
        # or at one of the 20 blocks before it, and writes its own prefix when not cached.
        digests, counts = [], []
        digest, words = model, 0
        for role, text, _ in blocks:
            digest = _sha(f"{digest}\x00{role}\x00{text}")
            words += _words(text)
            digests.append(digest)
            counts.append(words)
        read = written = 0
        for i, (_, _, breakpoint) in enumerate(blocks):
            if not breakpoint or counts[i] < self.cache_min_tokens:
                continue
            for j in range(i, max(-1, i - 21), -1):
                if digests[j] in self._cached_prefixes:
                    read = max(read, counts[j])
                    break
            if digests[i] not in self._cached_prefixes:
                written = max(written, counts[i])
                self._cached_prefixes.add(digests[i])
        return read, max(0, written - read)

    def _policy_fault(self, headers: dict[str, str], model: str) -> str | None:
        if self.api_key is not None:
            bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if self.api_key not in (bearer, headers.get("x-api-key", "")):
                return "401"
        if self.models is not None and model not in self.models:
            return "404"
        return None


def _json(status: int, obj: dict, headers: dict[str, str] | None = None) -> _Reply:
    return _Reply(status, json.dumps(obj).encode(), headers or {})


def _error(status: int, message: str, kind: str, code: str | None, anthropic: bool,
           headers: dict[str, str] | None = None) -> _Reply:
    if anthropic:
        return _json(status, {"type": "error", "error": {"type": kind, "message": message}},
                     headers)
    return _json(status, {"error": {"message": message, "type": kind, "param": None,
                                    "code": code}}, headers)


def _fault_reply(fault: str, anthropic: bool) -> _Reply | None:
    name, _, arg = fault.partition(":")
    if name == "429":
        return _error(429, "Rate limit reached; slow down.", "rate_limit_error",
                      "rate_limit_exceeded", anthropic, {"retry-after": arg or "1"})
    if name in ("500", "503"):
        return _error(int(name), "The server had an error while processing your request.",
                      "server_error", None, anthropic)
    if name == "hang":
        return _Reply(0, b"", mode="hang")
    if name == "400":
        return _error(400, "Invalid value for 'temperature': must be at most 2.",
                      "invalid_request_error", "invalid_value", anthropic)
    if name == "overflow":
        return _error(400, "This model's maximum context length is 2048 tokens. However, your "
                      "messages resulted in 9000 tokens.", "invalid_request_error",
                      "context_length_exceeded", anthropic)
    if name == "401":
        return _error(401, "Incorrect API key provided.", "authentication_error",
                      "invalid_api_key", anthropic)
    if name == "404":
        return _error(404, "The model does not exist or you do not have access to it.",
                      "not_found_error", "model_not_found", anthropic)
    return None  # truncated / drop / nochoices: shaped after the normal answer


_HOSTILE = ("usage_inf", "usage_negative", "usage_fraction", "deep", "finish_error",
            "usage_cached_over")
_PLACEHOLDER = "__envduels_raw_number__"


def _hostile_reply(fault: str, normal: dict, anthropic: bool) -> _Reply:
    """The normal answer with one hostile change; raw JSON text where `json.dumps` cannot write
    it (1e400)."""
    if fault == "deep":
        return _Reply(200, b"[" * 100_000 + b"]" * 100_000)
    if fault == "usage_cached_over":
        over = 10 ** 6
        if anthropic:   # its usage parts add up to the prompt: only a bad count is malformed
            normal["usage"]["cache_read_input_tokens"] = -5
            return _json(200, normal)
        return _json(200, _billed(normal, (over, 0), 0, anthropic))
    if fault == "finish_error":
        if anthropic:
            normal["stop_reason"] = "error"
        else:
            normal["choices"][0]["finish_reason"] = "error"
        return _json(200, normal)
    raw = {"usage_inf": "1e400", "usage_negative": "-1600000000", "usage_fraction": "2.5"}[fault]
    normal["usage"]["input_tokens" if anthropic else "prompt_tokens"] = _PLACEHOLDER
    body = json.dumps(normal).replace(json.dumps(_PLACEHOLDER), raw)
    return _Reply(200, body.encode())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _message_prefixes(model: str, messages: list) -> list[tuple[str, int]]:
    """(digest, words) of every leading run of whole messages."""
    out, digest, words = [], model, 0
    for m in messages:
        text = _message_text(m.get("content")) if isinstance(m, dict) else ""
        digest = _sha(digest + "\x00" + json.dumps(m, sort_keys=True))
        words += _words(text)
        out.append((digest, words))
    return out


def _billed(normal: dict, cache: tuple[int, int], reasoning: int, anthropic: bool) -> dict:
    """A normal answer billed with a prompt cache and hidden reasoning, in the wire format's
    own usage fields."""
    read, written = cache
    usage = normal["usage"]
    if anthropic:
        usage["input_tokens"] -= read + written
        usage["cache_read_input_tokens"] = read
        usage["cache_creation_input_tokens"] = written
        if reasoning:
            normal["content"].insert(0, {"type": "thinking", "thinking": "hmm " * reasoning,
                                         "signature": "scripted"})
            usage["output_tokens"] += reasoning
        return normal
    usage["prompt_tokens_details"] = {"cached_tokens": read}
    usage["completion_tokens"] += reasoning
    usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return normal


def _stream(answer: dict, include_usage: bool) -> _Reply:
    """A chat completion as OpenAI's server-sent events (`chat.completion.chunk`s)."""
    head = {k: answer[k] for k in ("id", "created", "model")}
    choice = answer["choices"][0]
    chunks = [
        {**head, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": choice["message"], "finish_reason": None}]},
        {**head, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage:
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [],
                       "usage": answer["usage"]})
    events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return _Reply(200, "".join(events).encode(), content_type="text/event-stream")


def _completion(model: str, text: str, n_in: int, n_out: int, anthropic: bool) -> dict:
    if anthropic:
        return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": n_in, "output_tokens": n_out}}
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                      "total_tokens": n_in + n_out}}
