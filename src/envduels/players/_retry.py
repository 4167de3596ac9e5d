"""Which failures are worth another attempt, and how long to wait before it.

Transient faults (429, 5xx, timeouts, dropped connections, malformed answers) raise `Retryable`
inside a provider; the player's loop waits and tries again, up to `max_retries` extra attempts.
Waits grow exponentially with "equal jitter" drawn from the player's own `random.Random`, so two
players never synchronise their retries and the global generator is never touched. A server's
`retry-after` (seconds or an HTTP date) is honoured, capped at `RetryPolicy.max_retry_after_s`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime


class Retryable(Exception):
    """A transient failure: `reason` is one line (never a secret); `retry_after_s` if the server said."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff parameters; the number of attempts comes from the player's `max_retries`."""

    base_s: float = 1.0
    max_backoff_s: float = 60.0
    max_retry_after_s: float = 120.0

    def delay(self, attempt: int, rng: random.Random, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1-based)."""
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.max_retry_after_s)
        ceiling = min(self.max_backoff_s, self.base_s * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


def parse_retry_after(headers: object) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date); None if absent."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    ms = get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())
