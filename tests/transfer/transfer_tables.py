"""Build small `Tables`-shaped run data by hand for the transfer tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

ENV_COLUMNS = [
    "env_id", "author", "round", "domain", "title", "valid", "invalid_reason", "hint", "source",
    "source_sha256", "class_name", "max_turns", "fixed_pool", "benchmark_seeds",
]


@dataclass
class FakeTables:
    """The shape of `envduels.store.Tables`: players, environments, episodes DataFrames."""

    environments: pd.DataFrame
    episodes: pd.DataFrame
    players: pd.DataFrame = field(default_factory=pd.DataFrame)


def env_row(env_id: str, author: str, **kw) -> dict:
    row = {
        "env_id": env_id, "author": author, "round": 1, "domain": "logic", "title": env_id,
        "valid": True, "invalid_reason": None, "hint": f"hint of {env_id}", "source": "",
        "source_sha256": "", "class_name": None, "max_turns": 10, "fixed_pool": False,
        "benchmark_seeds": [11, 22],
    }
    row.update(kw)
    return row


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


def tables(envs: list[dict], episodes: list[dict]) -> FakeTables:
    return FakeTables(
        environments=pd.DataFrame(envs, columns=ENV_COLUMNS),
        episodes=pd.DataFrame(episodes),
    )


def write_run(run_dir, envs: list[dict], episodes: list[dict], *, players: list[str] = ()) -> None:
    """A real run database (through the engine's Store) holding these rows."""
    import hashlib

    from envduels.store import EnvironmentRow, EpisodeRow, Store

    with Store(run_dir) as store:
        store.set_meta("config", {"name": "transfer", "players": [{"name": p, "provider": "openai", "model": p}
                                              for p in players]})
        for slot, e in enumerate(envs):
            source = e["source"]
            store.put_environment(EnvironmentRow(
                env_id=e["env_id"], author=e["author"], round=e["round"], slot=slot,
                domain=e["domain"], title=e["title"], valid=e["valid"],
                invalid_reason=e["invalid_reason"], hints=e.get("hints") or {"hint": e["hint"]},
                source=source, source_sha256=hashlib.sha256(source.encode()).hexdigest(),
                class_name=e["class_name"], max_turns=e["max_turns"], fixed_pool=e["fixed_pool"],
                benchmark_seeds=tuple(e["benchmark_seeds"]), metadata=e.get("metadata", {}),
            ))
        for ep in episodes:
            store.put_episode(EpisodeRow(**ep))
