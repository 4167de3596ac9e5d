"""Token and cost accounting: what each player spent, per role, as the provider bills it.

Input tokens are split the way providers bill them: read from the prompt cache, written to it,
and the rest (uncached). `input_tokens` is always the whole prompt (uncached + read + written),
so records written before the split (no read, no write) keep their meaning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from envduels.config import Price


def cost_usd(price: Price, input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0,
             cache_write_tokens: int = 0) -> float:
    """US dollars for one call: uncached input at `input_per_mtok`, cache reads at
    `cached_input_per_mtok`, cache writes at `cache_write_per_mtok`, output (reasoning
    included) at `output_per_mtok`. `input_tokens` is the whole prompt."""
    uncached = input_tokens - cache_read_tokens - cache_write_tokens
    return (uncached * price.input_per_mtok + cache_read_tokens * price.cached_input
            + cache_write_tokens * price.cache_write + output_tokens * price.output_per_mtok) / 1e6


def saved_usd(price: Price, input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0,
              cache_write_tokens: int = 0) -> float:
    """What the prompt cache saved on one call: its cost with every input token at the input
    price, minus its billed cost (negative when a cache write costs more than it saved)."""
    full = cost_usd(price, input_tokens, output_tokens)
    return full - cost_usd(price, input_tokens, output_tokens, cache_read_tokens=cache_read_tokens,
                           cache_write_tokens=cache_write_tokens)


@dataclass
class Usage:
    """What one player spent in one role during this process.

    `calls` counts every answered call, cached ones included; tokens, `cost_usd` and
    `saved_usd` count only calls paid for now (a response-cache hit costs nothing new);
    `input_tokens` is whole prompts, of which `cache_read_tokens` and `cache_write_tokens`
    were read from and written to the provider's prompt cache; `reasoning_tokens` are within
    `output_tokens`; `retries` counts extra attempts; `cached` counts answers served from the
    response cache.
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    retries: int = 0
    cached: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    saved_usd: float = 0.0

    def add(self, other: Usage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> dict:
        return asdict(self)
