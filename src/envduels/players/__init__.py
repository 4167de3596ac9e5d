"""Players: one async chat interface over every provider (openai, anthropic, local).

`build_players(cfg, cache=..., run_seed=...)` gives each configured model as a `Player`;
`Player.chat(messages, call_id=..., role=...)` returns a `ChatResult`, whose `usage` (an
`envduels.duel.usage.Usage`, re-exported here) is what the call took. Retries, rate limits,
the response cache, seeds and cost accounting live here; see docs/players.md.
"""

from typing import TYPE_CHECKING

from envduels.duel.usage import Usage
from envduels.players._base import (
    BadRequest,
    ChatResult,
    ContentRefused,
    ContextOverflow,
    Player,
    ProviderError,
    request_seed,
)
from envduels.players._build import CheckRow, build_player, build_players, check_models
from envduels.players._cache import (
    CallRecord,
    MemoryCache,
    ResponseCache,
    canonical_json,
    request_key,
)
from envduels.players._cost import billed, cost_usd
from envduels.players._retry import RetryPolicy

if TYPE_CHECKING:
    from envduels.players._anthropic import AnthropicPlayer
    from envduels.players._local import LocalPlayer
    from envduels.players._openai import OpenAIPlayer

_LAZY = {"AnthropicPlayer": "anthropic", "OpenAIPlayer": "openai", "LocalPlayer": "local"}


def __getattr__(name: str) -> type:
    """The provider classes load their client library on first use (seconds of import)."""
    if name in _LAZY:
        from envduels.players._build import provider_class

        return provider_class(_LAZY[name])
    raise AttributeError(f"module 'envduels.players' has no attribute {name!r}")

__all__ = [
    "AnthropicPlayer",
    "BadRequest",
    "CallRecord",
    "ContentRefused",
    "LocalPlayer",
    "OpenAIPlayer",
    "ChatResult",
    "CheckRow",
    "ContextOverflow",
    "MemoryCache",
    "Player",
    "ProviderError",
    "ResponseCache",
    "RetryPolicy",
    "Usage",
    "billed",
    "build_player",
    "build_players",
    "canonical_json",
    "check_models",
    "cost_usd",
    "request_key",
    "request_seed",
]
