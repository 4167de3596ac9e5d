"""Results from elsewhere: rate episodes recorded by another harness (`report --episodes FILE`).

The file holds one JSON object per line (JSON Lines), one per episode:

    {"env_id": "maze-3", "author": "gpt-x", "domain": "planning", "round": 1, "solver": "llama",
     "seed": 7, "trial": 0, "hinted": true, "outcome": "success", "title": "...", "hint": "..."}

`round` defaults to 1, `trial` to 0; `title` and `hint` are optional. The rows become the same
three tables a run database gives (`envduels.store.Tables`), and `analyze` runs on them
unchanged, so every number that needs only episodes is computed exactly as for a run. What a
file cannot hold is null: design convergence (needs the environments' source), costs (need the
model calls), player sizes, and the `hint_leak` flag (needs transcripts).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import pandas as pd

from envduels._safe_load import open_capped, parse_json
from envduels.duel.outcomes import Outcome
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.analysis.summary import Analysis

OUTCOMES: tuple[str, ...] = tuple(Outcome)
REQUIRED = ("env_id", "author", "domain", "solver", "seed", "hinted", "outcome")
OPTIONAL = ("round", "trial", "title", "hint")
ENV_FIELDS = ("author", "domain", "round", "title", "hint")
"""Fields that describe the environment: every line of one env_id must agree on them."""


@dataclass
class EpisodeTables:
    """The three analysis tables built from an episodes file (columns of `envduels.store.Tables`)."""

    players: pd.DataFrame
    environments: pd.DataFrame
    episodes: pd.DataFrame
    ignored_fields: list[str]


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The row with defaults filled in; UserError naming the field on any problem."""
    for key in REQUIRED:
        if key not in row:
            raise UserError(f"{where}: missing field '{key}'; every line needs "
                            f"{', '.join(REQUIRED)} (round, trial, title, hint are optional)")
    out = {k: row.get(k) for k in REQUIRED + OPTIONAL}
    for key in ("env_id", "author", "domain", "solver"):
        if not isinstance(value := out[key], str) or not value.strip():
            raise UserError(f"{where}: field '{key}' must be a non-empty string (got {json.dumps(out[key])})")
    for key in ("title", "hint"):
        if out[key] is not None and not isinstance(out[key], str):
            raise UserError(f"{where}: field '{key}' must be a string or absent (got {json.dumps(out[key])})")
    out["round"] = 1 if out["round"] is None else out["round"]
    out["trial"] = 0 if out["trial"] is None else out["trial"]
    for key, low in (("seed", None), ("trial", 0), ("round", 1)):
        v = out[key]
        if not _is_int(v) or (low is not None and v < low):
            need = "an integer" if low is None else f"an integer ≥ {low}"
            raise UserError(f"{where}: field '{key}' must be {need} (got {json.dumps(v)})")
    if not isinstance(out["hinted"], bool):
        raise UserError(f"{where}: field 'hinted' must be true or false (got {json.dumps(out['hinted'])})")
    if out["outcome"] not in OUTCOMES:
        raise UserError(f"{where}: field 'outcome' is {json.dumps(out['outcome'])}; use one of "
                        f"{', '.join(OUTCOMES)}")
    return out


EPISODES_MAX_BYTES = 2 << 30
"""The largest episodes file read (about 10 million episodes)."""
LINE_MAX_BYTES = 1 << 20
"""The longest line read: one episode is a few hundred bytes."""


def _read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of `path`, read one at a time from a regular file of at
    most `EPISODES_MAX_BYTES` (`envduels._safe_load`); one-line `UserError` on a line over
    `LINE_MAX_BYTES` or one that is not UTF-8."""
    missing = f"episodes file {str(path)!r} not found; pass a JSON Lines file with one episode per line"
    with open_capped(path, EPISODES_MAX_BYTES, "episodes file", missing) as fh:
        read = 0
        for number in itertools.count(1):
            try:
                raw = fh.readline(LINE_MAX_BYTES + 1)
            except OSError as err:
                raise UserError(f"cannot read {path} ({err.strerror}); check the path and its permissions") from None
            if not raw:
                return
            read += len(raw)
            if read > EPISODES_MAX_BYTES:   # it grew after the check
                raise UserError(f"episodes file {path} is over its limit of {EPISODES_MAX_BYTES >> 20:,} MiB; "
                                "split it")
            if len(raw) > LINE_MAX_BYTES:
                raise UserError(f"{path} line {number}: longer than {LINE_MAX_BYTES >> 20} MiB; write one "
                                "episode per line")
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise UserError(f"{path}: not UTF-8 text; save the episodes file as UTF-8") from None


def load_episodes(path: str | Path) -> EpisodeTables:
    """Read and check an episodes file; the tables `analyze` takes.

    Blank lines are skipped. A line that is not a JSON object, lacks a field, has a field of
    the wrong type or an unknown outcome, repeats an episode (same env_id, solver, seed, trial,
    hinted) or disagrees with an earlier line about its environment (author, domain, round,
    title, hint) raises `UserError` naming the line number and the field. Fields other than the
    listed ones are ignored and returned in `ignored_fields`.
    Players are every author and solver in order of first appearance, with the roles they played.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], int] = {}
    envs: dict[str, tuple[int, dict[str, Any]]] = {}
    ignored: set[str] = set()
    for number, line in _read_lines(path):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        raw = parse_json(line, where, fix="write one JSON object per line")
        if not isinstance(raw, dict):
            raise UserError(f"{where}: expected a JSON object with fields {', '.join(REQUIRED)}; "
                            f"got a JSON {type(raw).__name__}")
        ignored |= set(raw) - set(REQUIRED) - set(OPTIONAL)
        row = _check_row(raw, where)
        key = (row["env_id"], row["solver"], row["seed"], row["trial"], row["hinted"])
        if key in seen:
            raise UserError(
                f"{where}: duplicate episode (env_id {row['env_id']!r}, solver {row['solver']!r}, seed "
                f"{row['seed']}, trial {row['trial']}, hinted {str(row['hinted']).lower()}) already on line "
                f"{seen[key]}; keep one line per episode, or number repeats with 'trial'")
        seen[key] = number
        if row["env_id"] in envs:
            first_line, first = envs[row["env_id"]]
            for f in ENV_FIELDS:
                if row[f] != first[f]:
                    raise UserError(
                        f"{where}: field '{f}' of environment {row['env_id']!r} is {json.dumps(row[f])} but "
                        f"line {first_line} has {json.dumps(first[f])}; every line of an environment must agree")
        else:
            envs[row["env_id"]] = (number, row)
        rows.append(row)
    if not rows:
        raise UserError(f"{path} holds no episodes; write one JSON object per line with fields "
                        f"{', '.join(REQUIRED)}")
    return _tables(rows, envs, sorted(ignored))


def _tables(rows: list[dict[str, Any]], envs: dict[str, tuple[int, dict[str, Any]]],
            ignored: list[str]) -> EpisodeTables:
    from envduels.store import ENVIRONMENT_COLUMNS, EPISODE_COLUMNS, PLAYER_COLUMNS

    names = list(dict.fromkeys(n for r in rows for n in (r["author"], r["solver"])))
    authors = {r["author"] for r in rows}
    solvers = {r["solver"] for r in rows}
    players = pd.DataFrame([
        {"name": n, "provider": None, "model": n, "params_b": None,
         "roles": [role for role, ok in (("author", n in authors), ("solver", n in solvers)) if ok],
         "cost_usd": None, "input_tokens": None, "output_tokens": None}
        for n in names
    ], columns=PLAYER_COLUMNS)
    seeds: dict[str, set[int]] = {}
    for r in rows:
        seeds.setdefault(r["env_id"], set()).add(r["seed"])
    environments = pd.DataFrame([
        {"env_id": e, "author": r["author"], "round": r["round"], "domain": r["domain"],
         "title": r["title"], "valid": True, "invalid_reason": None, "hint": r["hint"], "source": None,
         "source_sha256": None, "class_name": None, "max_turns": None, "fixed_pool": False,
         "benchmark_seeds": sorted(seeds[e]), "slot": None,
         "hints": {} if r["hint"] is None else {"hint": r["hint"]}, "metadata": {}}
        for e, (_line, r) in envs.items()
    ], columns=ENVIRONMENT_COLUMNS)
    episodes = pd.DataFrame([
        {"episode_key": json.dumps([r["env_id"], r["solver"], r["seed"], r["trial"], r["hinted"]]),
         "env_id": r["env_id"], "author": r["author"], "solver": r["solver"], "round": r["round"],
         "domain": r["domain"], "seed": r["seed"], "trial": r["trial"], "hinted": r["hinted"],
         "outcome": r["outcome"], "reason": None, "turns": None,
         "self_play": r["author"] == r["solver"], "transcript": []}
        for r in rows
    ], columns=EPISODE_COLUMNS)
    for df, cols in ((environments, ("valid", "fixed_pool")), (episodes, ("hinted", "self_play"))):
        for c in cols:
            df[c] = df[c].astype(bool)
    return EpisodeTables(players, environments, episodes, ignored)


def analyze_episodes(source: str | Path | EpisodeTables, *, bootstrap: int = 1000, seed: int = 0,
                     name: str | None = None) -> Analysis:
    """`envduels.analysis.Analysis` of an episodes file (or of its loaded tables): the SPEC §8
    object as for a run, with `convergence`, `costs` and `run.cost_usd` null (a file of episodes
    cannot say them). Raises `UserError` on a bad file (see `load_episodes`)."""
    from envduels.analysis.summary import analyze

    tables = source if isinstance(source, EpisodeTables) else load_episodes(source)
    if name is None:
        name = "episodes" if isinstance(source, EpisodeTables) else Path(source).stem
    result = analyze(tables, bootstrap=bootstrap, seed=seed, name=name, convergence=False)
    result.result.run.cost_usd = None
    result.result.run.source = "episodes"
    result.result.costs = None
    return result
