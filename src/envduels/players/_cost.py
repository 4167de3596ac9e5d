"""Token and cost accounting: what a call costs, as the provider bills it.

Input tokens are split the way providers bill them: read from the prompt cache, written to it,
and the rest (uncached). `input_tokens` is always the whole prompt (uncached + read + written),
so records written before the split (no read, no write) keep their meaning. The figures travel
as one `envduels.duel.usage.Usage`; this module only prices them.
"""

from __future__ import annotations

from dataclasses import replace

from envduels.config import Price
from envduels.duel.usage import Usage


def cost_usd(price: Price, input_tokens: float, output_tokens: float, *,
             cache_read_tokens: float = 0, cache_write_tokens: float = 0) -> float:
    """US dollars for one call: uncached input at `input_per_mtok`, cache reads at
    `cached_input_per_mtok`, cache writes at `cache_write_per_mtok`, output (reasoning
    included) at `output_per_mtok`. `input_tokens` is the whole prompt."""
    uncached = input_tokens - cache_read_tokens - cache_write_tokens
    return (uncached * price.input_per_mtok + cache_read_tokens * price.cached_input
            + cache_write_tokens * price.cache_write + output_tokens * price.output_per_mtok) / 1e6


def saved_usd(price: Price, input_tokens: float, output_tokens: float, *,
              cache_read_tokens: float = 0, cache_write_tokens: float = 0) -> float:
    """What the prompt cache saved on one call: its cost with every input token at the input
    price, minus its billed cost (negative when a cache write costs more than it saved)."""
    full = cost_usd(price, input_tokens, output_tokens)
    return full - cost_usd(price, input_tokens, output_tokens, cache_read_tokens=cache_read_tokens,
                           cache_write_tokens=cache_write_tokens)


def billed(price: Price, usage: Usage) -> Usage:
    """`usage` with `cost_usd` and `saved_usd` set from its tokens at `price` (replacing
    whatever they held): what those tokens cost when paid for now."""
    split = {"cache_read_tokens": usage.cache_read_tokens,
             "cache_write_tokens": usage.cache_write_tokens}
    return replace(usage,
                   cost_usd=cost_usd(price, usage.input_tokens, usage.output_tokens, **split),
                   saved_usd=saved_usd(price, usage.input_tokens, usage.output_tokens, **split))
