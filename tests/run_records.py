"""Real run records for tests: `env` builds the `store.EnvRecord` a run records, `tables` the
analysis `store.Tables` around records and episode rows, with the store's own table builder
(so every test table has exactly the columns a run database gives)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from envduels.envs import EnvSpec
from envduels.store import EPISODE_COLUMNS, PLAYER_COLUMNS, EnvRecord, Tables, environment_frame


def env(env_id: str, author: str, *, round: int = 1, slot: int = 0, valid: bool = True,
        invalid_reason: str | None = None, fixed_pool: bool = False, hint: str = "think first",
        **spec: Any) -> EnvRecord:
    """One environment as a run records it; `spec` sets any other `EnvSpec` field (`hints`
    replaces `{"hint": hint}`; `source` defaults to a one-line class, `title` to the id)."""
    spec.setdefault("source", f"class E:\n    pass  # {env_id}\n")
    spec.setdefault("title", env_id)
    spec.setdefault("hints", {"hint": hint})
    spec["benchmark_seeds"] = tuple(spec.get("benchmark_seeds", (0, 1)))
    return EnvRecord(EnvSpec(env_id, author=author, **spec), round=round, slot=slot, valid=valid,
                     invalid_reason=invalid_reason, fixed_pool=fixed_pool)


def tables(envs: list[EnvRecord], episodes: list[dict[str, Any]],
           players: pd.DataFrame | None = None) -> Tables:
    """The analysis tables of `envs` and `episodes` (rows with the `EPISODE_COLUMNS` keys), in
    the order given."""
    return Tables(players=pd.DataFrame(columns=PLAYER_COLUMNS) if players is None else players,
                  environments=environment_frame(envs),
                  episodes=pd.DataFrame(episodes, columns=EPISODE_COLUMNS))
