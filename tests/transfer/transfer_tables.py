"""Small run data for the transfer tests: real environment records (`tests/run_records.py`) and
hand-chosen matched pairs, as analysis tables or as a real run database."""

from __future__ import annotations

from typing import Any

import run_records

from envduels.store import EnvRecord, EpisodeRow, Tables
from envduels.store.writer import RunWriter


def env_row(env_id: str, author: str, **kw: Any) -> EnvRecord:
    """An environment of round 1 in domain logic, its hint "hint of ID", seeds 11 and 22, ten
    turns, no source; `kw` sets any record or `EnvSpec` field."""
    kw.setdefault("hint", f"hint of {env_id}")
    kw.setdefault("source", "")
    kw.setdefault("max_turns", 10)
    kw.setdefault("benchmark_seeds", (11, 22))
    kw.setdefault("domain", "logic")
    return run_records.env(env_id, author, **kw)


def pair_rows(env_id: str, author: str, solver: str, seed: int, y0: int, yh: int, *, trial: int = 0,
              round_: int = 1) -> list[dict]:
    """The no-hint and hinted episode of one matched pair."""
    rows = []
    for hinted, y in ((False, y0), (True, yh)):
        rows.append({
            "episode_key": f"{env_id}|{solver}|{seed}|{trial}|{int(hinted)}", "env_id": env_id,
            "author": author, "solver": solver, "round": round_, "domain": "logic", "seed": seed,
            "trial": trial, "hinted": hinted, "outcome": "success" if y else "failure",
            "reason": "", "turns": 3, "self_play": solver == author, "transcript": [],
        })
    return rows


def tables(envs: list[EnvRecord], episodes: list[dict]) -> Tables:
    return run_records.tables(envs, episodes)


def write_run(run_dir, envs: list[EnvRecord], episodes: list[dict], *, players: list[str] = ()) -> None:
    """A real run database (through the engine's Store) holding these records."""
    with RunWriter(run_dir) as store:
        store.set_meta("config", {"name": "transfer", "players": [{"name": p, "provider": "openai", "model": p}
                                              for p in players]})
        for e in envs:
            store.put_environment(e)
        for ep in episodes:
            store.put_episode(EpisodeRow(**ep))
