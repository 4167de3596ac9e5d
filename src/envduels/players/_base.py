"""The one chat interface every provider implements, and the call path they share.

`Player.chat` derives the request seed, looks the request up in the response cache, waits for
the concurrency and rate limits, sends it with retries, accounts tokens and cost per role, and
records the answer. A provider only says how to build a request and how to send it once.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import logging
import math
import os
import random
import re
import ssl
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TypeVar, cast

from envduels._text import one_line, plural, valid_text
from envduels.config import PlayerConfig
from envduels.duel.faults import ContentRefusal, ContextFull, ProviderFault
from envduels.duel.usage import Usage
from envduels.errors import UserError
from envduels.players._cache import (
    RECORDED_TOKENS,
    CallRecord,
    Request,
    ResponseCache,
    request_key,
)
from envduels.players._cost import billed
from envduels.players._ratelimit import RateLimiter
from envduels.players._retry import Retryable, RetryPolicy

log = logging.getLogger("envduels.players")

_ROLES = ("author", "solver")

_HIT = Usage(calls=1, cached=1)
"""What a response-cache hit adds to a role's usage: an answered call, nothing paid."""


@dataclass(frozen=True)
class ChatResult:
    """One answer and what it took.

    `usage` has `calls` 1 and the original call's tokens and seconds (`call_s`), so a cached
    rerun reads exactly like the first run; `cost_usd` and `saved_usd` are what this call cost
    now (0.0 when it was `cached`, a response-cache hit); `retries` counts extra attempts.
    `request_key` is the cache key of the request. The old names (`input_tokens`,
    `output_tokens`, `cost_usd`, `cached`, `retries`, `latency_s`, the cache and reasoning
    counts) read `usage` (docs/players.md)."""

    text: str
    finish_reason: str
    request_key: str = ""
    usage: Usage = Usage()

    @property
    def input_tokens(self) -> int:
        """The whole prompt, of which `cache_read_tokens` were read from the provider's
        prompt cache and `cache_write_tokens` written to it."""
        return int(self.usage.input_tokens)

    @property
    def output_tokens(self) -> int:
        return int(self.usage.output_tokens)

    @property
    def cache_read_tokens(self) -> int:
        return int(self.usage.cache_read_tokens)

    @property
    def cache_write_tokens(self) -> int:
        return int(self.usage.cache_write_tokens)

    @property
    def reasoning_tokens(self) -> int:
        """Within `output_tokens` (0 where the provider does not report them apart)."""
        return int(self.usage.reasoning_tokens)

    @property
    def cost_usd(self) -> float:
        return self.usage.cost_usd

    @property
    def cached(self) -> bool:
        return bool(self.usage.cached)

    @property
    def retries(self) -> int:
        return int(self.usage.retries)

    @property
    def latency_s(self) -> float:
        """The original call's seconds, end to end."""
        return self.usage.call_s


class ContextOverflow(ContextFull):
    """The conversation no longer fits the model's context: a solver failure, not an error."""


class BadRequest(UserError):
    """The server refused this request as malformed (400, 413, 422 that is not an overflow).

    Raised at once, without retries. Before a player has answered it means its parameters are
    wrong; after, it is about one request (e.g. a content filter), which the engine records as
    that unit's `error` instead of stopping the run."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ContentRefused(BadRequest, ContentRefusal):
    """The server refused this request for what the conversation says (a content filter or
    moderation policy), not for how it was asked. In an episode the conversation is the
    environment's text (docs/engine.md): the engine records `incomplete`, the author's fault,
    whether or not the player has answered before, so an environment can neither stop a run
    nor escape a loss by sending text a provider refuses."""


_CONTENT_FILTER = re.compile(
    r"content[_ ]filter|content management policy|content[_ ]policy|usage polic|"
    r"flagged (as|by|for)|moderation|safety system", re.IGNORECASE)


def is_content_refusal(message: str, code: object = None) -> bool:
    """Does a 400's code or message say the content itself was refused?"""
    return code in ("content_filter", "content_policy_violation", "moderation_blocked") or bool(
        _CONTENT_FILTER.search(message or ""))


def refusal(who: str, status: int, message: str, *, overflow: bool,
            content: bool = False) -> Exception:
    """The error for a request the server refused that no retry can fix (a 404 or a 4xx bad
    request), shared by the providers: `overflow` says the message reports a context overflow,
    `content` that a content filter refused what the conversation says."""
    if status == 404:
        return UserError(f"{who}: unknown model or wrong base_url (404): {message}; check "
                         "model and base_url")
    if status in (400, 413, 422) and overflow:
        return ContextOverflow(f"{who}: the conversation does not fit the context: {message}")
    if status in (400, 422) and content:
        return ContentRefused(f"{who}: the provider refused the conversation's content "
                              f"({status}): {message}", status)
    return BadRequest(f"{who}: bad request ({status}): {message}; fix the player's parameters",
                      status)


class ProviderError(ProviderFault):
    """The provider still failed after every retry: the episode is an `error` (played again on resume)."""


@dataclass(frozen=True)
class ProviderAnswer:
    """What a provider returns for one successful attempt: the text, why it stopped, and its
    token counts as a `Usage` (from `answer_tokens`; calls, cost and seconds left at 0)."""

    text: str
    finish_reason: str
    usage: Usage


def answer_tokens(input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0,
                  cache_write_tokens: int = 0, reasoning_tokens: int = 0) -> Usage:
    """One answer's token counts (each from `token_count`) as a `Usage`.

    A broken server (or one that counts differently) may claim more cached tokens than it was
    sent, or more reasoning than output: billed as given, uncached input would go negative.
    The answer itself is sound, and retrying would pay for the call again, so the parts that
    do not fit are dropped instead: the whole prompt is billed at the input price (never less
    than the parts would bill on an OpenAI-style wire, which has no cache-write price), and
    the output holds no separate reasoning count."""
    if cache_read_tokens + cache_write_tokens > input_tokens:
        cache_read_tokens = cache_write_tokens = 0
    if reasoning_tokens > output_tokens:
        reasoning_tokens = 0
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                 cache_read_tokens=cache_read_tokens, cache_write_tokens=cache_write_tokens,
                 reasoning_tokens=reasoning_tokens)


MAX_TOKENS_PER_CALL = 1_000_000_000
"""More tokens than any context holds: a larger count is a broken or hostile server's."""


def token_count(value: object, field: str) -> int:
    """A usage count from a server's answer: absent (None) is 0; otherwise it must be an integer
    (an integral float such as 12.0 is accepted) from 0 to `MAX_TOKENS_PER_CALL`. Anything else
    (1e400, -5, 2.5, "7", true) raises `Retryable`: a negative count would refund the budget and
    an infinite one crash the accounting."""
    if value is None:
        return 0
    count: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        count = int(value)
    if count is None or not 0 <= count <= MAX_TOKENS_PER_CALL:
        shown = one_line(repr(value), 40)
        raise Retryable(f"malformed response (usage {field} is {shown}, not a token count)")
    return count


def check_finish(finish_reason: str) -> str:
    """`finish_reason` unless it says the generation failed: a 200 whose finish_reason is
    "error" (vLLM, some proxies) carries no answer, so it is a malformed response to retry."""
    if finish_reason == "error":
        raise Retryable("malformed response (finish_reason 'error')")
    return finish_reason


def _from_record(record: CallRecord, key: str) -> ChatResult:
    """A cache hit: the original answer, tokens and latency; nothing new to pay. Records
    written before the prompt-cache split read as all input uncached."""
    u = record.usage
    usage = Usage(calls=1, cached=1, call_s=u.call_s, input_tokens=u.input_tokens,
                  output_tokens=u.output_tokens, reasoning_tokens=u.reasoning_tokens,
                  cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens)
    return ChatResult(text=valid_text(record.text),  # a record cached before replies were cleaned
                      finish_reason=record.finish_reason, request_key=key, usage=usage)


_TURN_SUFFIX = re.compile(r":(turn|attempt):\d+$")


def conversation_id(call_id: str, messages: list[dict[str, str]]) -> str:
    """The conversation a call belongs to, for the provider's prompt cache: an episode's turns
    (`ep:KEY:turn:N`) share `ep:KEY`; an author's calls share the task prompt they start
    from (the same for every environment it writes in a round); any other call is its own."""
    if call_id.startswith("author:"):
        first = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        return "author-task:" + hashlib.sha256(
            str(first).encode("utf-8", "surrogatepass")).hexdigest()
    return _TURN_SUFFIX.sub("", call_id)


def request_seed(run_seed: int, player: str, call_id: str) -> int:
    """A 31-bit seed fixed by (run seed, player name, call id): reruns ask identical questions."""
    digest = hashlib.sha256(f"{run_seed}\x00{player}\x00{call_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF


_Client = TypeVar("_Client")


def sdk_http_client(default_client: Callable[..., _Client], cfg: PlayerConfig) -> _Client:
    """An SDK's default async HTTP client (`openai.DefaultAsyncHttpxClient`, ...) with the
    player's connection limits and timeouts, built with the SDK's own HTTP library: httpx, or
    its fork httpx2 in recent SDKs. A client of one takes only its own `Limits` and `Timeout`
    (given httpx's `Timeout`, httpx2's client makes every phase's timeout that object)."""
    base = cast(type, default_client).__mro__[1]   # the library's AsyncClient
    http = importlib.import_module(base.__module__.partition(".")[0])
    limits = cfg.concurrency
    plain = (cfg.base_url or "").lower().startswith("http://")
    return default_client(
        limits=http.Limits(max_connections=limits.http_connections,
                           max_keepalive_connections=limits.http_keepalive),
        timeout=http.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 10.0)),
        verify=no_tls_context() if plain else shared_tls_context(http))


def no_tls_context() -> ssl.SSLContext:
    """The TLS context of a client whose endpoint is plain `http://` (a local server): it
    trusts no certificate, so TLS through it always fails, never goes unverified. Building
    it loads no CA bundle: the first call of a run does not wait 20-80 ms for one."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


_TLS_CONTEXTS: dict[tuple[str, str | None, str | None, int], ssl.SSLContext] = {}


def shared_tls_context(http: ModuleType) -> ssl.SSLContext:
    """The TLS context an HTTP library's client builds by default (`create_ssl_context()`: its
    CA bundle, `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), built once per thread, library and
    value of those two variables and shared by every player's client made in that thread.

    Each build loads the whole CA bundle: about 20 ms of CPU per player (measured, bench_engine
    start-up), paid before a player's first call. Sharing is safe because a client only ever
    sets the context's ALPN list, and every client here sets the same one (HTTP/1.1)."""
    # per thread too: a client sets the context's ALPN list on every connection, which
    # OpenSSL frees and copies without a lock, so two threads' clients never share one
    key = (http.__name__, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"),
           threading.get_ident())
    context = _TLS_CONTEXTS.get(key)
    if context is None:
        context = _TLS_CONTEXTS[key] = http.create_ssl_context()
    return context


_PROVIDER_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic"}


def resolve_key(cfg: PlayerConfig, default_env: str | None) -> str | None:
    """The API key from the variable `cfg.api_key_env` (else `default_env`); UserError if unset."""
    var = cfg.api_key_env or default_env
    if var is None:
        return None
    key = os.environ.get(var, "").strip()
    if not key:
        # Say what the key is for: a self-hosted server's key is not "your openai API key".
        what = (f"the API key of this player's server {cfg.base_url}" if cfg.base_url
                else f"your {_PROVIDER_NAMES.get(cfg.provider, cfg.provider)} API key")
        raise UserError(
            f"player {cfg.name!r}: set {var} to {what} "
            f"(export {var}=...), or name another variable with api_key_env"
        )
    return key


class Player:
    """A configured model that chats. Subclasses implement `_request` and `_send`.

    Safe to share across tasks: at most `config.concurrency.units` calls are in flight.
    """

    provider: str = ""

    def __init__(self, config: PlayerConfig, *, cache: ResponseCache | None = None,
                 run_seed: int = 0, retry_policy: RetryPolicy | None = None) -> None:
        self.name = config.name
        self.config = config
        self.cache = cache
        self.run_seed = run_seed
        self.retry_policy = retry_policy or RetryPolicy()
        self._rng = random.Random(request_seed(run_seed, config.name, "retry-jitter"))
        self._semaphore = asyncio.Semaphore(config.concurrency.units)
        self._limiter = RateLimiter(config.requests_per_minute, config.tokens_per_minute)
        self._usage: dict[str, Usage] = defaultdict(Usage)   # frozen: replaced with +=
        self._secrets: list[str] = []
        self._inflight: dict[str, asyncio.Future[CallRecord]] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.provider}:{self.config.model}>"

    @property
    def usage(self) -> dict[str, Usage]:
        """Per role, what this player's calls took in this process: `calls` counts every
        answered call, cached ones included; tokens, `cost_usd`, `saved_usd`, `retries` and
        `call_s` count only calls paid for now (a response-cache hit costs nothing new);
        `cached` counts the hits. Every configured role is present, with zeros until used."""
        roles = [*self.config.roles, *(r for r in self._usage if r not in self.config.roles)]
        return {role: self._usage.get(role, Usage()) for role in roles}

    def total_usage(self) -> Usage:
        """Every role's `usage` added up."""
        return sum(self._usage.values(), Usage())

    async def chat(self, messages: list[dict[str, str]], *, call_id: str, role: str,
                   max_tokens: int | None = None) -> ChatResult:
        """Answer `messages` (OpenAI-style role/content dicts).

        `call_id` is the call's deterministic identity within the run; the request seed derives
        from (run seed, player, call_id). Raises `ContextOverflow` when the conversation does not
        fit, `ProviderError` after `max_retries` failed retries, `UserError` at once for a missing
        key, a rejected key, an unknown model or a bad request. Lone surrogates in `messages`
        are sent, keyed and recorded as U+FFFD; the answer's text never holds one.
        """
        if role not in _ROLES:
            raise ValueError(f"role must be one of {_ROLES}, not {role!r}")
        # Observations come from untrusted environment code: a lone surrogate could be neither
        # sent, hashed nor stored. Ordinary text is unchanged, so existing cache keys still hit.
        messages = [{k: valid_text(v) if isinstance(v, str) else v for k, v in m.items()}
                    for m in messages]
        seed = request_seed(self.run_seed, self.name, call_id)
        request = self._request(messages, max_tokens or self.config.max_tokens, seed)
        key = request_key(request)
        self._usage.setdefault(role, Usage())   # a role asked for is listed, answered or not
        if self.cache is not None:
            record = self.cache.get(key)
            if record is not None:
                self._usage[role] += _HIT
                return _from_record(record, key)
        while (pending := self._inflight.get(key)) is not None:
            # The same request is being answered now: share that answer and pay once.
            try:
                record = await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    continue  # the task asking first was cancelled, not this one: ask again
                raise
            self._usage[role] += _HIT
            return _from_record(record, key)
        future: asyncio.Future[CallRecord] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result, record = await self._answer_fresh(request, key, messages, role, call_id)
            future.set_result(record)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # mark it retrieved: the sharing tasks re-raise it
            raise
        finally:
            del self._inflight[key]
        return result

    async def _answer_fresh(self, request: Request, key: str, messages: list[dict[str, str]],
                            role: str, call_id: str) -> tuple[ChatResult, CallRecord]:
        estimate = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 16
        # Prompt-cache hints go with the request but not into it: they never change the
        # answer, so the request key (and every call recorded before them) stays valid.
        conversation = conversation_id(call_id, messages) if self.config.cache else None
        async with self._semaphore:
            answer, latency, retries = await self._send_with_retries(request, estimate,
                                                                     conversation)
        tokens = answer.usage
        self._limiter.settle(estimate, int(tokens.input_tokens + tokens.output_tokens))
        usage = billed(self.config.price, replace(tokens, calls=1, retries=retries, call_s=latency))
        self._usage[role] += usage
        result = ChatResult(text=answer.text, finish_reason=answer.finish_reason,
                            request_key=key, usage=usage)
        record = CallRecord(request=request, text=answer.text, finish_reason=answer.finish_reason,
                            usage=replace(usage, **{n: int(getattr(tokens, n))
                                                    for n in RECORDED_TOKENS}),
                            player=self.name, role=role, call_id=call_id)
        if self.cache is not None:
            self.cache.put(key, record)
        return result, record

    async def _send_with_retries(self, request: Request, estimate: int, conversation: str | None
                                 ) -> tuple[ProviderAnswer, float, int]:
        attempt = 0
        while True:
            await self._limiter.acquire(estimate)  # every attempt is a request the server counts
            try:
                await self._ready()
                started = time.monotonic()
                answer = await self._send(request, conversation)
                return answer, time.monotonic() - started, attempt
            except Retryable as err:
                attempt += 1
                reason = self.scrub(err.reason)
                if attempt > self.config.max_retries:
                    raise ProviderError(
                        f"player {self.name!r}: {reason}; still failing after "
                        f"{plural(self.config.max_retries, 'retry', 'retries')}") from None
                wait = self.retry_policy.delay(attempt, self._rng, err.retry_after_s)
                log.warning("player %s: %s; retry %d/%d in %.2f s", self.name, reason, attempt,
                            self.config.max_retries, wait)
                await asyncio.sleep(wait)

    def scrub(self, text: str) -> str:
        """`text` with every secret this player holds replaced by ***, where it stands as a
        whole token: not inside a longer run of letters, digits, `-` or `_`, nor part of a
        dotted name, number or path (`127.0.0.1`, `llama3.1-8b`, `/v1`). A key can only appear
        in a message as a whole token, and a short key (`VLLM_API_KEY=x`, common for local
        servers) must not cut up the words around it ("player" stays "player")."""
        for secret in sorted(filter(None, self._secrets), key=len, reverse=True):
            text = re.sub(rf"(?<![\w./-]){re.escape(secret)}(?![\w-]|\.\w)", "***", text)
        return text

    def _request(self, messages: list[dict[str, str]], max_tokens: int, seed: int) -> Request:
        """The full request as a secret-free dict; its canonical JSON is the cache key."""
        raise NotImplementedError

    async def _ready(self) -> None:
        """Prepare to send (e.g. start a model server), outside the latency measurement."""

    async def _send(self, request: Request, conversation: str | None = None) -> ProviderAnswer:
        """Send `request` once. Raise `Retryable`, `ContextOverflow` or `UserError`.

        `conversation` (None when `cache` is off) names the conversation the call belongs to
        (`conversation_id`), for the provider's prompt cache."""
        raise NotImplementedError

    def discard(self) -> None:
        """Give up a player that never chatted (no connection is open yet)."""

    async def aclose(self) -> None:
        """Release connections (and, for local players, the model server); idempotent."""
