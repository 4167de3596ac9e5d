"""Optional requests-per-minute and tokens-per-minute limits, as token buckets.

Each bucket holds at most one minute's allowance and refills continuously. Tokens are reserved
from an estimate before a call and settled with the server's count afterwards; an overrun is
carried as debt, so sustained throughput never exceeds the configured rate.
"""

from __future__ import annotations

import asyncio
import time


class _Bucket:
    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = per_minute
        self.level = per_minute
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is available (0 if it is now)."""
        self._refill()
        need = min(amount, self.capacity) - self.level
        return max(0.0, need / self.rate)

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount


class RateLimiter:
    """Waits so that calls stay within `requests_per_minute` and `tokens_per_minute`."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self._requests = _Bucket(requests_per_minute) if requests_per_minute else None
        self._tokens = _Bucket(tokens_per_minute) if tokens_per_minute else None
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        return self._requests is not None or self._tokens is not None

    async def acquire(self, estimated_tokens: int) -> None:
        """Block until one request of about `estimated_tokens` tokens may start."""
        if not self.active:
            return
        async with self._lock:  # first come, first served
            while True:
                delay = 0.0
                if self._requests is not None:
                    delay = max(delay, self._requests.wait_for(1))
                if self._tokens is not None:
                    delay = max(delay, self._tokens.wait_for(estimated_tokens))
                if delay <= 0:
                    break
                await asyncio.sleep(delay)
            if self._requests is not None:
                self._requests.take(1)
            if self._tokens is not None:
                self._tokens.take(estimated_tokens)

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Correct the token reservation with the server's count."""
        if self._tokens is not None:
            self._tokens.take(actual_tokens - estimated_tokens)
