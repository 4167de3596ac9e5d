"""Players from a run configuration, and the pre-flight check behind `envduels models check`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from envduels.config import PlayerConfig, RunConfig
from envduels.errors import UserError
from envduels.players._base import ContextOverflow, Player, ProviderError
from envduels.players._cache import ResponseCache
from envduels.players._retry import RetryPolicy

# Each provider's module is imported when a player of it is built: the `anthropic` and
# `openai` client libraries take seconds of CPU to import, which a run that uses neither (or
# only one) should not pay at start-up.
_PROVIDER_CLASSES = {
    "openai": ("envduels.players._openai", "OpenAIPlayer"),
    "anthropic": ("envduels.players._anthropic", "AnthropicPlayer"),
    "local": ("envduels.players._local", "LocalPlayer"),
}


def provider_class(provider: str) -> type[Player]:
    """The Player class of `provider` ("openai", "anthropic", "local"), imported now."""
    import importlib

    module, name = _PROVIDER_CLASSES[provider]
    return getattr(importlib.import_module(module), name)


def one_line(text: str, limit: int = 300) -> str:
    from envduels.players._openai import one_line as _one_line

    return _one_line(text, limit)

CHECK_PROMPT = [{"role": "user", "content": "Reply with OK"}]
CHECK_MAX_TOKENS = 8


def build_player(config: PlayerConfig, *, cache: ResponseCache | None = None, run_seed: int = 0,
                 retry_policy: RetryPolicy | None = None) -> Player:
    """One player; UserError at once for a missing key, model file or local runtime."""
    return provider_class(config.provider)(config, cache=cache, run_seed=run_seed,
                                      retry_policy=retry_policy)


def build_players(cfg: RunConfig, *, cache: ResponseCache | None, run_seed: int
                  ) -> dict[str, Player]:
    """Every player of `cfg`, by name, sharing `cache`; request seeds derive from `run_seed`.

    Construction makes no request: a missing key, model file or llama.cpp binding raises the
    first player's UserError here, before a run starts. Close each player with `aclose`.
    """
    players: dict[str, Player] = {}
    try:
        for p in cfg.players:
            players[p.name] = build_player(p, cache=cache, run_seed=run_seed)
    except UserError:
        for built in players.values():
            built.discard()
        raise
    return players


@dataclass(frozen=True)
class CheckRow:
    """One player's pre-flight result; `error` is one line, empty when `ok`."""

    player: str
    provider: str
    model: str
    ok: bool
    latency_s: float | None
    input_tokens: int
    output_tokens: int
    reply: str
    error: str


async def _check_one(config: PlayerConfig) -> CheckRow:
    # One retry, quickly: a pre-flight check should report a dead server, not wait on it.
    checked = config.model_copy(update={"max_retries": min(config.max_retries, 1)})
    base = dict(player=config.name, provider=config.provider, model=config.model)
    try:
        player = build_player(checked, cache=None, run_seed=0,
                              retry_policy=RetryPolicy(base_s=0.5, max_retry_after_s=5.0))
    except UserError as err:
        return CheckRow(**base, ok=False, latency_s=None, input_tokens=0, output_tokens=0,
                        reply="", error=one_line(str(err)))
    started = time.monotonic()
    try:
        result = await player.chat(CHECK_PROMPT, call_id="models-check", role="solver",
                                   max_tokens=CHECK_MAX_TOKENS)
    except (UserError, ProviderError, ContextOverflow) as err:
        return CheckRow(**base, ok=False, latency_s=time.monotonic() - started, input_tokens=0,
                        output_tokens=0, reply="", error=one_line(player.scrub(str(err))))
    finally:
        await player.aclose()
    usage = result.usage
    return CheckRow(**base, ok=True, latency_s=usage.call_s, input_tokens=int(usage.input_tokens),
                    output_tokens=int(usage.output_tokens), reply=one_line(result.text, 40),
                    error="")


async def check_models(cfg: RunConfig) -> list[CheckRow]:
    """One short call ("Reply with OK") to every player, concurrently; never raises for a
    player's failure (it is in that player's row)."""
    return list(await asyncio.gather(*(_check_one(p) for p in cfg.players)))
