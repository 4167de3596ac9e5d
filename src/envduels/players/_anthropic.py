"""The `anthropic` provider, through the official SDK (its retries off; ours count them).

The Messages API takes the system prompt apart from the turns, has no seed and (for current
models) no temperature or top_p, so a rerun is reproducible only through the response cache;
`reasoning_effort` maps to ``output_config.effort``. Consecutive turns of one role are merged, since
the API requires user and assistant turns to alternate. With `cache: true` the request carries
`cache_control` breakpoints (`cache_breakpoints`); they are added when sending, not to the
request that keys the response cache. Thinking is billed within `output_tokens`; the API
reports no reasoning count apart, so `reasoning_tokens` stays 0 here.
"""

from __future__ import annotations

import anthropic

from envduels._text import one_line, valid_text
from envduels.config import PlayerConfig
from envduels.errors import UserError
from envduels.players._base import (
    Player,
    ProviderAnswer,
    answer_tokens,
    check_finish,
    is_content_refusal,
    refusal,
    resolve_key,
    sdk_http_client,
    token_count,
)
from envduels.players._cache import Request, ResponseCache
from envduels.players._openai import is_overflow
from envduels.players._retry import Retryable, RetryPolicy, parse_retry_after

ANTHROPIC_URL = "https://api.anthropic.com"


def split_system(messages: list[dict[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """(system text, alternating user/assistant turns) from OpenAI-style messages."""
    system = "\n\n".join(m["content"] for m in messages if m.get("role") == "system")
    turns: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": turns[-1]["content"] + "\n\n" + m["content"]}
        else:
            turns.append({"role": role, "content": m["content"]})
    return system, turns


MIN_CACHEABLE_TOKENS = 1024
"""The smallest prefix the Messages API caches (Sonnet and Opus; Haiku needs more). A
breakpoint on a shorter prefix would be ignored by the API, so none is placed."""

CHARS_PER_TOKEN_GUESS = 3
"""A generous guess (code and text run 3-4 characters per token): placing a breakpoint the API
then ignores costs nothing, missing one costs the cache."""

_EPHEMERAL = {"type": "ephemeral"}


def cache_breakpoints(system: str, turns: list[dict[str, str]]
                      ) -> tuple[str | list[dict], list[dict]]:
    """`system` and `turns` with `cache_control` breakpoints, as the Messages API takes them.

    At most three of the API's four: the system prompt (the same for every conversation of a
    role), the first user turn (the solver's hint and first observation, or the author's task
    prompt with its worked examples) and the latest user turn (so the next call reads this
    whole conversation back; the API finds the previous call's breakpoint by its 20-block
    lookback). A breakpoint is placed only where the prefix ending there holds at least
    `MIN_CACHEABLE_TOKENS` (guessed from its length); content without one is sent unchanged.
    """
    def block(text: str) -> dict:
        return {"type": "text", "text": text, "cache_control": dict(_EPHEMERAL)}

    minimum = MIN_CACHEABLE_TOKENS * CHARS_PER_TOKEN_GUESS
    sized = len(system)
    system_out: str | list[dict] = [block(system)] if system and sized >= minimum else system
    marked: set[int] = set()
    ends = []
    for turn in turns:
        sized += len(turn["content"])
        ends.append(sized)
    users = [i for i, t in enumerate(turns) if t["role"] == "user"]
    for i in users[:1] + users[-1:]:
        # the API refuses an empty text block, and a breakpoint needs one
        if ends[i] >= minimum and turns[i]["content"].strip():
            marked.add(i)
    turns_out = [{"role": t["role"], "content": [block(t["content"])]} if i in marked else dict(t)
                 for i, t in enumerate(turns)]
    return system_out, turns_out


class AnthropicPlayer(Player):
    """A player served by the Anthropic Messages API; the key comes from ANTHROPIC_API_KEY
    (or `api_key_env`). A `base_url` ending in /v1 is accepted (the SDK adds /v1 itself)."""

    provider = "anthropic"

    def __init__(self, config: PlayerConfig, *, cache: ResponseCache | None = None,
                 run_seed: int = 0, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(config, cache=cache, run_seed=run_seed, retry_policy=retry_policy)
        self._api_key = resolve_key(config, "ANTHROPIC_API_KEY")
        if self._api_key:
            self._secrets.append(self._api_key)
        self._sdk: anthropic.AsyncAnthropic | None = None

    @property
    def endpoint(self) -> str:
        return (self.config.base_url or ANTHROPIC_URL).rstrip("/").removesuffix("/v1")

    def client(self) -> anthropic.AsyncAnthropic:
        if self._sdk is None:
            cfg = self.config
            http = sdk_http_client(anthropic.DefaultAsyncHttpxClient, cfg)
            self._sdk = anthropic.AsyncAnthropic(base_url=self.endpoint, api_key=self._api_key,
                                                 max_retries=0, timeout=cfg.timeout_s,
                                                 http_client=http)
        return self._sdk

    def _request(self, messages: list[dict[str, str]], max_tokens: int, seed: int) -> Request:
        cfg = self.config
        system, turns = split_system(messages)
        # The Messages API of current models fixes sampling (the SDK no longer takes temperature
        # or top_p); effort is the one knob. The seed is not sent but keys the cache, so two
        # calls with the same messages and different identities stay distinct answers.
        params: dict[str, object] = {"max_tokens": max_tokens}
        if cfg.reasoning_effort is not None:
            effort = "low" if cfg.reasoning_effort == "minimal" else cfg.reasoning_effort
            params["output_config"] = {"effort": effort}
        request = {"provider": self.provider, "endpoint": self.endpoint, "model": cfg.model,
                   "messages": turns, "params": params, "seed": seed}
        if system:
            request["system"] = system
        return request

    async def _send(self, request: Request, conversation: str | None = None) -> ProviderAnswer:
        system, messages = request.get("system", ""), request["messages"]
        if conversation is not None:   # `cache: true`
            system, messages = cache_breakpoints(system, messages)
        extra = {"system": system} if system else {}
        failure: Exception | None = None
        try:
            reply = await self.client().messages.create(
                model=request["model"], messages=messages, **request["params"], **extra)
        except anthropic.APIStatusError as err:
            failure = self._classify(err)
        except anthropic.APITimeoutError:
            failure = Retryable(f"no answer within {self.config.timeout_s:g} s (timeout)")
        except anthropic.APIConnectionError as err:
            cause = type(err.__cause__).__name__ if err.__cause__ else "connection error"
            failure = Retryable(f"connection to {self.endpoint} failed ({cause})")
        except (ValueError, RecursionError) as err:
            # RecursionError: a body of deeply nested arrays exhausts the JSON parser.
            failure = Retryable(f"malformed response ({type(err).__name__})")
        if failure is not None:
            raise failure  # outside the handler: no SDK error (which holds the key) as context
        content = getattr(reply, "content", None)
        if content is None:
            raise Retryable("malformed response (no content)")
        text = valid_text("".join(str(getattr(b, "text", "")) for b in content
                                  if getattr(b, "type", "") == "text"))
        finish_reason = check_finish(valid_text(str(getattr(reply, "stop_reason", None) or "unknown")))
        usage = getattr(reply, "usage", None)
        # The API's input_tokens are only what followed the last cache hit or write; the bill
        # (and our input_tokens) is the whole prompt.
        uncached = token_count(getattr(usage, "input_tokens", None), "input_tokens")
        read = token_count(getattr(usage, "cache_read_input_tokens", None), "cache_read_input_tokens")
        written = token_count(getattr(usage, "cache_creation_input_tokens", None),
                              "cache_creation_input_tokens")
        return ProviderAnswer(text=text, finish_reason=finish_reason, usage=answer_tokens(
            uncached + read + written,
            token_count(getattr(usage, "output_tokens", None), "output_tokens"),
            cache_read_tokens=read, cache_write_tokens=written))

    def _classify(self, err: anthropic.APIStatusError) -> Exception:
        status = err.status_code
        body = err.body if isinstance(err.body, dict) else {}
        inner = body.get("error", {}) if isinstance(body.get("error"), dict) else {}
        message = self.scrub(one_line(inner.get("message") or err.message, 300))
        who = f"player {self.name!r} ({self.endpoint}, model {self.config.model!r})"
        if status == 429 or status >= 500 or status in (408, 409):
            return Retryable(f"server said {status}: {message}", parse_retry_after(err.response.headers))
        if status in (401, 403):
            var = self.config.api_key_env or "ANTHROPIC_API_KEY"
            return UserError(f"{who}: the server rejected the API key ({status}); check the key in {var}")
        return refusal(who, status, message, overflow=is_overflow(message),
                       content=is_content_refusal(message))

    async def aclose(self) -> None:
        if self._sdk is not None:
            sdk, self._sdk = self._sdk, None
            await sdk.close()
