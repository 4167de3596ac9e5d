"""The turn cap: how many solver turns one episode of an environment gets (SPEC §4).

The one rule lives with the rest of the episode protocol in `envduels.duel.protocol`; it is
re-exported here for everything that asks it by this name: validation (`validate_env`), a run's
episodes (`engine.scheduler`), `envduels play`, the Gymnasium adapter (`envduels.gym`),
`envduels serve` and the design's call counts (`report.plan`, `engine.estimate`).
"""

from __future__ import annotations

from envduels.duel.protocol import turn_cap

__all__ = ["turn_cap"]
