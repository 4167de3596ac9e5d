"""The `openai` provider: any OpenAI-compatible server through the official SDK.

The SDK's own retries are off; the player's loop counts and paces them. Errors map to what a
run can do about them: transient ones are `Retryable`, an overlong conversation is
`ContextOverflow`, and a wrong key, model or parameter is an immediate one-line `UserError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re

import openai

from envduels._text import valid_text
from envduels.config import PlayerConfig
from envduels.errors import UserError
from envduels.players._base import (
    Answer,
    Player,
    answer_tokens,
    check_finish,
    is_content_refusal,
    refusal,
    resolve_key,
    sdk_http_client,
    token_count,
)
from envduels.players._cache import ResponseCache
from envduels.players._retry import Retryable, RetryPolicy, parse_retry_after

OPENAI_URL = "https://api.openai.com/v1"

log = logging.getLogger("envduels.players")

_OVERFLOW = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long"
    r"|input is too long|exceeds? (the )?(available )?(model'?s? )?(maximum|max|context)",
    re.IGNORECASE)  # "available": llama.cpp's server


def is_overflow(message: str, code: object = None) -> bool:
    """Does a 400's message or code say the conversation does not fit the context?"""
    return code in ("context_length_exceeded", "string_above_max_length") or bool(
        _OVERFLOW.search(message or ""))


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def server_message(err: openai.APIStatusError) -> str:
    """The server's own error message when it sent one, else the SDK's."""
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(err.message)


class _CacheKeyRefused(Exception):
    """The server refused `prompt_cache_key` (handled in `_send`, never raised out of it)."""


def _refuses_cache_key(err: openai.APIStatusError) -> bool:
    """Is this a 400/422 that names `prompt_cache_key` as the parameter it does not accept?"""
    return err.status_code in (400, 422) and (
        "prompt_cache_key" in server_message(err) or getattr(err, "param", None) == "prompt_cache_key")


class OpenAIPlayer(Player):
    """A player served by an OpenAI-compatible endpoint (`base_url`, default api.openai.com).

    Without `base_url` the key comes from OPENAI_API_KEY (or `api_key_env`); with a `base_url`
    and no `api_key_env`, no key is needed (local servers such as vLLM or llama.cpp).
    """

    provider = "openai"

    def __init__(self, config: PlayerConfig, *, cache: ResponseCache | None = None,
                 run_seed: int = 0, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(config, cache=cache, run_seed=run_seed, retry_policy=retry_policy)
        self._api_key = resolve_key(config, self._default_key_env())
        if self._api_key:
            self._secrets.append(self._api_key)
        self._sdk: openai.AsyncOpenAI | None = None
        self._cache_key_refused = False

    def _default_key_env(self) -> str | None:
        """The key variable used without `api_key_env`: only the hosted API needs one."""
        return None if self.config.base_url else "OPENAI_API_KEY"

    @property
    def endpoint(self) -> str:
        return (self.config.base_url or OPENAI_URL).rstrip("/")

    def _make_client(self, base_url: str) -> openai.AsyncOpenAI:
        cfg = self.config
        http = sdk_http_client(openai.DefaultAsyncHttpxClient, cfg)
        return openai.AsyncOpenAI(base_url=base_url, api_key=self._api_key or "not-needed",
                                  max_retries=0, timeout=cfg.timeout_s, http_client=http)

    async def client(self) -> openai.AsyncOpenAI:
        if self._sdk is None:
            self._sdk = self._make_client(self.endpoint)
        return self._sdk

    def _request(self, messages: list[dict[str, str]], max_tokens: int, seed: int) -> dict:
        cfg = self.config
        params: dict[str, object] = {"seed": seed}
        if cfg.reasoning_effort is not None:
            # Reasoning models take max_completion_tokens and reject sampling parameters.
            params["reasoning_effort"] = cfg.reasoning_effort
            params["max_completion_tokens"] = max_tokens
        else:
            params["temperature"] = cfg.temperature
            params["max_tokens"] = max_tokens
            if cfg.top_p is not None:
                params["top_p"] = cfg.top_p
        return {"provider": self.provider, "endpoint": self._cache_endpoint(), "model": cfg.model,
                "messages": [dict(m) for m in messages], "params": params}

    def _cache_endpoint(self) -> str:
        return self.endpoint

    def prompt_cache_key(self, conversation: str | None) -> str | None:
        """The `prompt_cache_key` sent for a conversation: a hash of the player and the
        conversation, so an episode's turns share one and two episodes never do; None when
        caching is off or this server refused the parameter earlier in the session."""
        if conversation is None or self._cache_key_refused:
            return None
        digest = hashlib.sha256(f"{self.name}\x00{conversation}".encode("utf-8", "surrogatepass"))
        return "envduels-" + digest.hexdigest()[:32]

    async def _send(self, request: dict, conversation: str | None = None) -> Answer:
        sdk = await self.client()
        body = {"model": request["model"], "messages": request["messages"], **request["params"]}
        cache_key = self.prompt_cache_key(conversation)
        if cache_key is not None:
            body["prompt_cache_key"] = cache_key
        failure: Exception | None = None
        try:
            # The SDK's generic `post` keeps its auth, errors and connection pool but skips the
            # per-call TypedDict transform and model construction of `chat.completions.create`,
            # which cost about 1 ms of CPU per call: our messages are plain JSON already.
            reply = await sdk.post("/chat/completions", cast_to=dict, body=body)
        except openai.APIStatusError as err:
            if cache_key is not None and _refuses_cache_key(err):
                failure = _CacheKeyRefused()
            else:
                failure = self._classify(err)
        except openai.APITimeoutError:
            failure = Retryable(f"no answer within {self.config.timeout_s:g} s (timeout)")
        except openai.APIConnectionError as err:
            failure = self._connection_failed(err)
        except (json.JSONDecodeError, ValueError, RecursionError) as err:
            # RecursionError: a body of deeply nested arrays exhausts the JSON parser.
            failure = Retryable(f"malformed response ({type(err).__name__})")
        if isinstance(failure, _CacheKeyRefused):
            # An OpenAI-compatible server that does not know the parameter (vLLM, older
            # proxies): ask again without it, now and for the rest of the session.
            self._cache_key_refused = True
            log.warning("player %s: %s refuses prompt_cache_key; sending without it", self.name,
                        self.endpoint)
            return await self._send(request, conversation)
        if failure is not None:
            # Raised outside the handler: SDK errors hold the request, headers and key
            # included, and must not ride along as __context__.
            raise failure
        return self._answer(reply)

    def _connection_failed(self, err: openai.APIConnectionError) -> Exception:
        cause = err.__cause__
        detail = type(cause).__name__ if cause is not None else "connection error"
        return Retryable(f"connection to {self.endpoint} failed ({detail})")

    @staticmethod
    def _answer(reply: object) -> Answer:
        """The answer in a chat-completion JSON body; `Retryable` when the body is malformed."""
        if not isinstance(reply, dict):
            raise Retryable("malformed response (no choices)")
        choices = reply.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise Retryable("malformed response (no choices)")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise Retryable("malformed response (choice without a message)")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise Retryable("malformed response (content is not text)")
        text = valid_text(text)  # JSON may carry a lone surrogate (\ud800), which UTF-8 refuses
        finish_reason = check_finish(valid_text(str(choices[0].get("finish_reason") or "unknown")))
        usage = _mapping(reply.get("usage"))
        prompt = _mapping(usage.get("prompt_tokens_details"))
        completion = _mapping(usage.get("completion_tokens_details"))
        return Answer(text=text, finish_reason=finish_reason, usage=answer_tokens(
            token_count(usage.get("prompt_tokens"), "prompt_tokens"),
            token_count(usage.get("completion_tokens"), "completion_tokens"),
            cache_read_tokens=token_count(prompt.get("cached_tokens"), "cached_tokens"),
            reasoning_tokens=token_count(completion.get("reasoning_tokens"), "reasoning_tokens")))

    def _classify(self, err: openai.APIStatusError) -> Exception:
        status = err.status_code
        message = self.scrub(one_line(server_message(err)))
        code = getattr(err, "code", None)
        who = f"player {self.name!r} ({self.endpoint}, model {self.config.model!r})"
        if status == 429:
            if code == "insufficient_quota":
                return UserError(f"{who}: the account is out of quota: {message}; add credit or "
                                 "use another key")
            return Retryable(f"rate limited (429): {message}", parse_retry_after(err.response.headers))
        if status >= 500 or status in (408, 409):
            return Retryable(f"server error ({status}): {message}",
                             parse_retry_after(err.response.headers))
        if status in (401, 403):
            var = self.config.api_key_env or self._default_key_env()
            fix = f"check the key in {var}" if var else "set api_key_env to the variable holding its key"
            return UserError(f"{who}: the server rejected the API key ({status}); {fix}")
        return refusal(who, status, message, overflow=is_overflow(message, code),
                       content=is_content_refusal(message, code))

    async def aclose(self) -> None:
        if self._sdk is not None:
            sdk, self._sdk = self._sdk, None
            await sdk.close()


def _mapping(value: object) -> dict[str, object]:
    """`value` when the JSON body holds an object there, else empty (an absent or malformed
    usage block counts as no tokens reported)."""
    return value if isinstance(value, dict) else {}
