"""Real run records for tests: `env` builds the `store.EnvRecord` a run records, `tables` the
analysis `store.Tables` around records and episode rows, with the store's own table builder
(so every test table has exactly the columns a run database gives); `call` the
`players.CallRecord` a player hands the run database, `call_records` what a database holds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd

from envduels.duel.usage import Usage
from envduels.envs import EnvSpec
from envduels.players import CallRecord
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


def call(player: str = "p", role: str = "solver", call_id: str = "c", *, text: str = "reply",
         input_tokens: int = 0, output_tokens: int = 0, cost_usd: float = 0.0,
         latency_s: float = 0.0, cache_read_tokens: int = 0, cache_write_tokens: int = 0,
         reasoning_tokens: int = 0, saved_usd: float = 0.0, retries: int = 0,
         request: dict[str, Any] | None = None) -> CallRecord:
    """One model call's record, as a player makes it."""
    return CallRecord(request=request or {"model": player}, text=text, finish_reason="stop",
                      usage=Usage(calls=1, input_tokens=input_tokens, output_tokens=output_tokens,
                                  cost_usd=cost_usd, call_s=latency_s,
                                  cache_read_tokens=cache_read_tokens,
                                  cache_write_tokens=cache_write_tokens,
                                  reasoning_tokens=reasoning_tokens, saved_usd=saved_usd,
                                  retries=retries),
                      player=player, role=role, call_id=call_id)


def call_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every call record a run database holds, oldest first, as stored (JSON)."""
    db = sqlite3.connect(Path(run_dir) / "run.db")
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT record FROM calls ORDER BY rowid")]
    finally:
        db.close()
