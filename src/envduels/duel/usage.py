"""One shape for what model calls take: counts, tokens, dollars and seconds.

A single call's figures, a player's running total in one role, a run's billed totals and an
estimate of calls not made yet are all a `Usage`, added with `+` (and `sum(usages, Usage())`)
and scaled with `scaled(k)`. Counts are whole numbers for calls that happened; an estimate
holds expected values, so every field accepts a float.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Usage:
    """What some calls took.

    `input_tokens` is whole prompts, of which `cache_read_tokens` were read from the provider's
    prompt cache and `cache_write_tokens` written to it; `reasoning_tokens` are within
    `output_tokens` (0 where the provider does not report them apart). `cost_usd` is what the
    calls were billed now (a response-cache hit costs nothing new) and `saved_usd` what the
    prompt cache saved against billing every input token at the input price. `retries` counts
    extra attempts, `cached` the answers served from the response cache, `call_s` the seconds
    of calls end to end.
    """

    calls: float = 0
    input_tokens: float = 0
    output_tokens: float = 0
    cache_read_tokens: float = 0
    cache_write_tokens: float = 0
    reasoning_tokens: float = 0
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    retries: float = 0
    cached: float = 0
    call_s: float = 0.0

    @property
    def uncached_input_tokens(self) -> float:
        """Input tokens billed at the full input price."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    @property
    def tokens(self) -> float:
        """Input and output tokens together (a budget's `max_tokens` counts these)."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __radd__(self, other: object) -> Usage:
        if other == 0:   # sum() starts from 0
            return self
        return NotImplemented

    def scaled(self, k: float) -> Usage:
        """Every figure times `k` (an estimate's calls per job times its jobs)."""
        return Usage(*(getattr(self, f.name) * k for f in fields(self)))
