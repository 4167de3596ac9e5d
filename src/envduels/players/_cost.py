"""Token and cost accounting: what each player spent, per role."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from envduels.config import Price


def cost_usd(price: Price, input_tokens: int, output_tokens: int) -> float:
    """US dollars for one call at the configured per-million-token prices."""
    return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6


@dataclass
class Usage:
    """What one player spent in one role during this process.

    `calls` counts every answered call, cached ones included; tokens and `cost_usd` count only
    calls paid for now (a cache hit costs nothing new); `retries` counts extra attempts;
    `cached` counts answers served from the response cache.
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    retries: int = 0
    cached: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.retries += other.retries
        self.cached += other.cached

    def to_json(self) -> dict:
        return asdict(self)
