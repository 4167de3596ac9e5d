"""The turn cap: how many solver turns one episode of an environment gets (SPEC §4).

The one rule, asked by every place that plays an environment: validation (`validate_env`),
a run's episodes (`engine.scheduler`), `envduels play`, the Gymnasium adapter (`envduels.gym`)
and the design's call counts (`report.plan`, `engine.estimate`).
"""

from __future__ import annotations


def turn_cap(env_max_turns: int, limit: int | None = None) -> int:
    """The most solver turns an episode gets: the environment's own `max_turns`, lowered to
    `limit` when one is given (a run's `tournament.max_turns`, validation's cap, a Gym caller's
    `max_turns`), and at least 1.

    A limit only ever lowers the environment's own: an environment is always constructed with
    its own `max_turns`, so one that declares 5 is never played for 24 turns it does not expect.
    """
    cap = env_max_turns if limit is None else min(env_max_turns, limit)
    return max(1, int(cap))
