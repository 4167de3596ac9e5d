"""Run tables for analysis and report tests: hand-chosen outcomes around real environment
records (`tests/run_records.py`)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import run_records

from envduels.store import EnvRecord, Tables

OUT = {1: "success", 0: "failure", "i": "incomplete", "e": "error"}


def players(*names: str, **extra: Any) -> pd.DataFrame:
    return pd.DataFrame({
        "name": list(names), "provider": "openai", "model": list(names),
        "params_b": extra.get("params_b", [None] * len(names)),
        "roles": [["author", "solver"] for _ in names],
        "cost_usd": [1.0] * len(names), "input_tokens": [10] * len(names), "output_tokens": [5] * len(names),
    })


def env(env_id: str, author: str, domain: str = "logic", *, round: int = 1, valid: bool = True,
        hint: str = "think first") -> EnvRecord:
    return run_records.env(env_id, author, domain=domain, round=round, valid=valid,
                           invalid_reason=None if valid else "oracle failed", hint=hint,
                           class_name="E", max_turns=10)


def pair(env_id: str, author: str, solver: str, seed: int, y0: Any, yh: Any, *, domain: str = "logic",
         round: int = 1, trial: int = 0, win_action: str | None = None) -> list[dict[str, Any]]:
    """Both episodes of one matched pair; outcomes 1/0 or 'i' (incomplete) / 'e' (error)."""
    rows = []
    for hinted, y in ((False, y0), (True, yh)):
        transcript: list[dict[str, Any]] = [{"role": "user", "content": "Observation: go"},
                                            {"role": "assistant", "content": "\\boxed{wait}"}]
        if y == 1 and win_action is not None:
            transcript.append({"role": "env", "action": f"\\boxed{{{win_action}}}", "reward": 1.0,
                               "terminated": True, "content": "you win"})
        rows.append({"episode_key": f"{env_id}:{solver}:{seed}:{trial}:{int(hinted)}", "env_id": env_id,
                     "author": author, "solver": solver, "round": round, "domain": domain, "seed": seed,
                     "trial": trial, "hinted": hinted, "outcome": OUT[y], "reason": "",
                     "turns": 2, "self_play": author == solver, "transcript": transcript})
    return rows


def tables(names: list[str], envs: list[EnvRecord], episodes: list[list[dict[str, Any]]]) -> Tables:
    return run_records.tables(envs, [r for p in episodes for r in p], players(*names))


def hand_run() -> Tables:
    """Three players; values worked out by hand in test_metrics.py."""
    return tables(
        ["A", "B", "C"],
        [env("eA1", "A", "logic"), env("eA2", "A", "math"), env("eB1", "B", "logic"),
         env("eC1", "C", "logic", valid=False)],
        [
            pair("eA1", "A", "B", 0, 0, 1), pair("eA1", "A", "B", 1, 1, 1),
            pair("eA1", "A", "C", 0, 0, 0), pair("eA1", "A", "C", 1, 0, "i"),
            pair("eA1", "A", "A", 0, 1, 1),
            pair("eA2", "A", "B", 0, 1, 0, domain="math"), pair("eA2", "A", "C", 0, 0, 1, domain="math"),
            pair("eA2", "A", "C", 1, "e", 1, domain="math"),
            pair("eB1", "B", "A", 0, 0, 1), pair("eB1", "B", "A", 1, 0, 1), pair("eB1", "B", "C", 0, 1, 1),
        ],
    )
