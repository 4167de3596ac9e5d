"""The whole analysis of one run, assembled as a `RunReport` (`analysis.result`): the SPEC §8
JSON shape plus extra keys, validated where it is made."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from envduels.analysis.convergence import convergence as _convergence
from envduels.analysis.divergence import DivergenceEntry, divergence
from envduels.analysis.irt import fit_irt
from envduels.analysis.learning import learning_curves
from envduels.analysis.metrics import (
    HINT_GATED,
    HINT_LEAK,
    TablesLike,
    author_metrics,
    author_names,
    environment_flags,
    learnability,
    lift_matrix,
    solver_metrics,
)
from envduels.analysis.pairs import matched_pairs
from envduels.analysis.ratings import Rating, compute_ratings
from envduels.analysis.result import JSONValue, RatingRow, RunReport
from envduels.analysis.scale import scale
from envduels.analysis.simulate import FrameTables
from envduels.analysis.transitivity import transitivity

LEAD_FLAGS = (HINT_LEAK, HINT_GATED)
"""Flags whose environments win duels for their author without a hint that teaches anything:
the hint gives the answer away (`hint_leak`) or the environment is unsolvable without it
(`hint_gated`). A duel lead that rests on them is called out in the report."""


@dataclass
class Analysis:
    """`result`: the typed SPEC §8 record every output reads; the rest feeds the report's
    tables and charts."""

    result: RunReport
    ratings: dict[str, Rating]
    lift: pd.DataFrame
    pairs: pd.DataFrame
    tables: TablesLike

    @property
    def json(self) -> dict[str, object]:
        """The SPEC §8 object as `report --json` writes it (a fresh dict each call:
        `RunReport.to_json()`; change `result`, not this)."""
        return self.result.to_json()


def json_safe(value: object) -> JSONValue:
    """Recursively: NumPy scalars to Python, NaN/±inf to None, tuples to lists; TypeError for a
    value with no JSON form (before, `json.dumps` raised on it later)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        v = float(value)
        return None if math.isnan(v) or math.isinf(v) else v
    if value is pd.NA or value is pd.NaT:
        return None
    if value is None or isinstance(value, bool | int | str):
        return value
    raise TypeError(f"json_safe: {type(value).__name__} has no JSON form")  # a bug in an analysis function


def is_true(value: object) -> bool:
    """A boolean cell that is really True (missing, NaN or None: False)."""
    return isinstance(value, bool | np.bool_) and bool(value)


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rating rows best first: by rank (SPEC §5), then by rating as printed (to the nearest
    point), then by model name.

    The one order of every table, chart and sentence of the report and the leaderboard. Rank
    first keeps the printed rank column monotone (a model certainly below another is never
    listed above a model that is below nobody); the top-rated model always has rank 1, so the
    leader is the same either way. Models whose printed ratings are equal are *level*; the name
    only breaks the tie for listing and never makes one of them "the best". Neither depends on
    the last bits of a fit: strengths within `_ties.RATING_TOLERANCE` are snapped to one value
    where they are fitted, so tied models print, round and sort alike on every machine.
    """
    return sorted(rows, key=lambda r: (r.get("rank") or 0, -round(r["rating"]), str(r["model"])))


def level_with_top(rows: Sequence[RatingRow] | Sequence[Mapping[str, object]]) -> list[str]:
    """The models whose printed rating equals the top one (rows as `ordered` returns them:
    `RatingRow`s, or a rating's rows as `analysis.ratings` makes them)."""
    typed = [r if isinstance(r, RatingRow) else RatingRow.model_validate(r) for r in rows]
    return [r.model for r in typed if round(r.rating) == round(typed[0].rating)]


def flagged_lead(tables: TablesLike, duel_rows: list[dict[str, Any]], flags: dict[str, list[str]]) -> dict[str, object] | None:
    """Whether the duel leader's lead rests on its `hint_leak`/`hint_gated` environments.

    None when the leader wrote no such environment. Otherwise the environments, their flags, and
    where the leader lands when the duel ratings are refitted without them (`position_without`:
    1-based place in `ordered` order, None when it is no longer rated; `models_without`: how many
    models are rated then). A point estimate only: the question is whether the lead survives at all.
    """
    if len(duel_rows) < 2:
        return None
    leader = duel_rows[0]["model"]
    envs = tables.environments
    mine = envs[(envs["author"] == leader) & envs["valid"].astype(bool)]["env_id"]
    hit = {e: [f for f in flags.get(e, []) if f in LEAD_FLAGS] for e in mine}
    hit = {e: f for e, f in hit.items() if f}
    if not hit:
        return None
    keep = ~envs["env_id"].isin(list(hit))
    eps = tables.episodes
    sub = FrameTables(tables.players, envs[keep].reset_index(drop=True),
                      eps[~eps["env_id"].isin(list(hit))].reset_index(drop=True))
    rows = ordered(compute_ratings(sub, matched_pairs(sub.episodes), bootstrap=0)["duel"].rows)
    models = [r["model"] for r in rows]
    return {"model": leader, "environments": [{"id": e, "flags": f} for e, f in hit.items()],
            "position_without": models.index(leader) + 1 if leader in models else None,
            "models_without": len(models)}


def unrated_authors(tables: TablesLike, pairs: pd.DataFrame, rating: Rating) -> list[dict[str, str]]:
    """Every author without an author-rating row, with why (the rating compares lifts, which an
    author whose environments all broke does not have): `{"model", "reason"}` in author order.
    Without this an author whose every environment failed validation, or whose every episode
    ended `incomplete` or `error`, vanished from the author table with no word."""
    rated = {r["model"] for r in rating.rows}
    envs = tables.environments
    authored = envs[~envs["fixed_pool"].astype(bool)] if "fixed_pool" in envs.columns else envs
    eps = tables.episodes
    played = eps[~eps["self_play"].astype(bool)]
    out = []
    for a in author_names(tables):
        if a in rated:
            continue
        mine = authored[authored["author"] == a]
        valid = mine[mine["valid"].astype(bool)]
        if mine.empty:
            reason = "wrote no environment (every authoring attempt failed; see its faults)"
        elif valid.empty:
            reason = (f"{'its only environment' if len(mine) == 1 else f'all {len(mine)} of its environments'} "
                      "failed validation, so it has no lift to compare")
        elif (on := played[played["env_id"].isin(valid["env_id"])]).empty:
            reason = f"no other model played its {_count(len(valid), 'valid environment')}"
        elif not pairs["env_id"].isin(valid["env_id"]).any():
            broke = on["outcome"].value_counts()
            reason = (f"none of the {_count(len(on), 'episode')} on its {_count(len(valid), 'valid environment')} "
                      f"formed a matched pair ({int(broke.get('incomplete', 0))} incomplete, "
                      f"{int(broke.get('error', 0))} error), so it has no lift to compare")
        else:
            reason = "no solver it was measured on was also measured on another author's environments"
        out.append({"model": str(a), "reason": reason})
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def _costs(players: pd.DataFrame) -> list[dict[str, object]]:
    # cache reads, writes and reasoning are parts of input and output tokens; saved_usd is what
    # prompt caching saved against billing every input token at the input price
    cols = ["cost_usd", "input_tokens", "output_tokens", "cache_read_tokens",
            "cache_write_tokens", "reasoning_tokens", "saved_usd"]
    out = []
    for r in players.to_dict("records"):
        out.append({"model": r["name"]} | {c: r.get(c) for c in cols})
    return out


def _environment_rows(tables: TablesLike, pairs: pd.DataFrame, flags: dict[str, list[str]]) -> list[dict[str, object]]:
    rates = pairs.groupby("env_id").agg(no_hint=("y0", "mean"), with_hint=("yh", "mean"), pairs=("y0", "size"))
    rows = []
    for e in tables.environments.to_dict("records"):
        r = rates.loc[e["env_id"]] if e["env_id"] in rates.index else None
        invalid_reason = e.get("invalid_reason")
        rows.append({
            "id": e["env_id"],
            "author": e["author"],
            "round": int(e["round"]),
            "domain": e.get("domain"),
            "valid": bool(e["valid"]),
            "invalid_reason": None if invalid_reason is None or pd.isna(invalid_reason) else invalid_reason,
            "hint": e.get("hint"),
            "fixed_pool": is_true(e.get("fixed_pool")),
            "flags": flags.get(e["env_id"], []),
            "title": e.get("title"),
            "panel_no_hint": None if r is None else r["no_hint"],
            "panel_with_hint": None if r is None else r["with_hint"],
            "lift": None if r is None else r["with_hint"] - r["no_hint"],
            "pairs": 0 if r is None else int(r["pairs"]),
        })
    return rows


def rating_entries(tables: TablesLike, pairs: pd.DataFrame, *, bootstrap: int = 1000,
                   seed: int = 0) -> tuple[dict[str, Rating], dict[str, object], DivergenceEntry]:
    """The ratings, the duel transitivity and the author–solver divergence, exactly as `analyze`
    reports them (`envduels plan` rates its simulated tournaments through this too)."""
    ratings = compute_ratings(tables, pairs, bootstrap=bootstrap, seed=seed)
    duel = ratings["duel"]
    return (ratings,
            transitivity(duel.scores, duel.players, duel.theta, draws=duel.score_draws,
                         edge_p=duel.edge_p, tie_rate=duel.tie_rate, seed=seed),
            divergence(ratings["author"], ratings["solver"], seed=seed))


def analyze(
    tables: TablesLike,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    name: str = "run",
    history: str | None = None,
    permutations: int = 1000,
    convergence: bool = True,
) -> Analysis:
    """Every SPEC §5 number for one run. Deterministic for a given `seed`.

    `convergence=False`: the design-convergence entry is None (tables without environment
    source, such as episodes recorded by another harness, say nothing about design)."""
    # the fits solve stacks of small systems (one per bootstrap draw or profile bound), each too
    # small for BLAS threads to help: two threads made them 15-40x slower on a busy 2-core machine
    # (docs/analysis.md, "Many models")
    with threadpool_limits(limits=1, user_api="blas"):
        return _analyze(tables, bootstrap=bootstrap, seed=seed, name=name, history=history,
                        permutations=permutations, convergence=convergence)


def _analyze(tables: TablesLike, *, bootstrap: int, seed: int, name: str, history: str | None,
             permutations: int, convergence: bool) -> Analysis:
    pairs = matched_pairs(tables.episodes)
    ratings, transitive, diverge = rating_entries(tables, pairs, bootstrap=bootstrap, seed=seed)
    for r in ratings.values():
        r.rows = ordered(r.rows)
    flags = environment_flags(tables)
    envs = tables.environments
    players = tables.players
    cost = pd.to_numeric(players.get("cost_usd", pd.Series(dtype=float)), errors="coerce")
    valid_envs = envs[envs["valid"].astype(bool)]
    texts = [f"{r.get('title') or ''}\n{r.get('hint') or ''}\n{r.get('source') or ''}" for r in valid_envs.to_dict("records")]
    methods: dict[str, dict[str, object]] = {k: {"interval": ratings[k].interval, "note": ratings[k].note,
                                              "rank_note": ratings[k].rank_note} for k in ("duel", "author", "solver")}
    # authors the author rating leaves out (every environment broke), each with why
    methods["author"]["unrated"] = unrated_authors(tables, pairs, ratings["author"])
    # the duel's profile intervals are widened by its environments' overdispersion (issue 20)
    methods["duel"]["overdispersion"] = ratings["duel"].overdispersion
    result: dict[str, object] = {
        "run": {
            "name": name,
            "players": list(players["name"]),
            "rounds": int(envs["round"].max()) if len(envs) else 0,
            "episodes": len(tables.episodes),
            "cost_usd": None if cost.isna().all() else float(cost.sum()),
            "history": history,
            "matched_pairs": len(pairs),
            "bootstrap": bootstrap,
        },
        "solvers": solver_metrics(tables, pairs),
        "authors": author_metrics(tables, pairs),
        "ratings": {k: ratings[k].rows for k in ("duel", "author", "solver")},
        # per rating: how its intervals were made, and why intervals or ranks are missing
        "rating_methods": methods,
        "transitivity": transitive,
        "divergence": diverge,
        "environments": _environment_rows(tables, pairs, flags),
        "irt": fit_irt(pairs),
        "learning": learning_curves(envs, pairs),
        "convergence": _convergence(list(valid_envs["env_id"]), list(valid_envs["author"]), texts,
                                    permutations=permutations, seed=seed) if convergence else None,
        "scale": scale(players, ratings),
        "costs": _costs(players),
        "learnability": learnability(pairs).to_dict("records"),
        "duel_flagged_lead": flagged_lead(tables, ratings["duel"].rows, flags),
        # kept for readers of earlier reports: the same as rating_methods[kind].note
        "rating_notes": {k: ratings[k].note for k in ("duel", "author", "solver")},
    }
    return Analysis(RunReport.model_validate(json_safe(result)), ratings, lift_matrix(pairs), pairs, tables)
