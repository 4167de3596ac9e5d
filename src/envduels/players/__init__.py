"""Players: one async chat interface over every provider (openai, anthropic, local).

`build_players(cfg, cache=..., run_seed=...)` gives each configured model as a `Player`;
`Player.chat(messages, call_id=..., role=...)` returns a `ChatResult`. Retries, rate limits,
the response cache, seeds and cost accounting live here; see docs/players.md.
"""

from envduels.players._anthropic import AnthropicPlayer
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
from envduels.players._cache import MemoryCache, ResponseCache, canonical_json, request_key
from envduels.players._cost import Usage, cost_usd
from envduels.players._local import LocalPlayer
from envduels.players._openai import OpenAIPlayer
from envduels.players._retry import RetryPolicy

__all__ = [
    "AnthropicPlayer",
    "BadRequest",
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
    "build_player",
    "build_players",
    "canonical_json",
    "check_models",
    "cost_usd",
    "request_key",
    "request_seed",
]
