"""The per-run metrics of SPEC §5: solver, author and environment numbers.

Every function takes the run's tables (anything with `players`, `environments` and `episodes`
DataFrames in the columns of docs/architecture.md) and returns plain values. A metric with no
data is None, never 0. Cross-model metrics use matched pairs without self-play.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pandas as pd
from scipy.stats import binom

from envduels._text import last_boxed
from envduels.analysis.pairs import domain_balanced, matched_pairs, scored_episodes
from envduels.duel.answers import Answer, decisive_action, rescue_answers, rescues
from envduels.duel.faults import author_faults
from envduels.duel.outcomes import (  # noqa: F401 (re-exported: the names' one home is duel.outcomes)
    AUTHOR_FAULT_FLAGS,
    FLAGS,
    INFORMATIONAL_FLAGS,
    Flag,
    Outcome,
)
from envduels.envs import _battery
from envduels.envs._battery import BatteryFindings


class TablesLike(Protocol):
    """What the analysis reads: `envduels.store.Tables` or any stand-in with these frames."""

    players: pd.DataFrame
    environments: pd.DataFrame
    episodes: pd.DataFrame


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def _mean(values: pd.Series) -> float | None:
    return None if len(values) == 0 else float(values.mean())


def _roles(row: pd.Series) -> list[str]:
    roles = row.get("roles")
    if roles is None or (isinstance(roles, float) and np.isnan(roles)):
        return ["author", "solver"]
    return list(roles)


def solver_names(tables: TablesLike) -> list[str]:
    """Players with the solver role, then anyone else who solved, in table order."""
    names = [r["name"] for _, r in tables.players.iterrows() if "solver" in _roles(r)]
    for s in tables.episodes["solver"].unique() if len(tables.episodes) else []:
        if s not in names:
            names.append(s)
    return names


def author_names(tables: TablesLike) -> list[str]:
    """Players with the author role, then any other player who has environments."""
    players = list(tables.players["name"])
    names = [r["name"] for _, r in tables.players.iterrows() if "author" in _roles(r)]
    for a in tables.environments["author"].unique() if len(tables.environments) else []:
        if a not in names and a in players:
            names.append(a)
    return names


def mcnemar_exact(rescues: int, harms: int) -> float | None:
    """Two-sided exact McNemar p-value: binomial test of rescues vs harms at ½; None if both 0."""
    n = rescues + harms
    if n == 0:
        return None
    return float(min(1.0, 2.0 * binom.cdf(min(rescues, harms), n, 0.5)))


def solver_metrics(tables: TablesLike, pairs: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One SPEC §8 `solvers` row per solver, plus `mcnemar_p`, `rescues`, `harms`, `pairs`,
    `common_panel_solve` and `self_play_episodes`.

    `episodes`, `incomplete` and `errors` count the solver's cross-model episodes (self-play is
    counted apart in `self_play_episodes`).
    """
    pairs = matched_pairs(tables.episodes) if pairs is None else pairs
    eps = tables.episodes
    common = common_panel_solve(tables, pairs)
    rows = []
    for s in solver_names(tables):
        p = pairs[pairs["solver"] == s]
        mine = eps[(eps["solver"] == s) & ~eps["self_play"].astype(bool)]
        rescues = int(((p["y0"] == 0) & (p["yh"] == 1)).sum())
        harms = int(((p["y0"] == 1) & (p["yh"] == 0)).sum())
        per_env = p.groupby("env_id").agg(rate=("y0", "mean"), domain=("domain", "first"))
        rows.append(
            {
                "model": s,
                "hint_gain": _mean(p["yh"] - p["y0"]),
                "hint_rescue": _ratio(rescues, int((p["y0"] == 0).sum())),
                "hint_harm": _ratio(harms, int((p["y0"] == 1).sum())),
                "without_hint_accuracy": _mean(p["y0"]),
                "with_hint_accuracy": _mean(p["yh"]),
                "canonical_autonomous_solve": domain_balanced(per_env["rate"], per_env["domain"]),
                "common_panel_solve": common.get(s),
                "episodes": len(mine),
                "incomplete": int((mine["outcome"] == Outcome.INCOMPLETE).sum()),
                "errors": int((mine["outcome"] == Outcome.ERROR).sum()),
                "self_play_episodes": int(((eps["solver"] == s) & eps["self_play"].astype(bool)).sum()),
                "pairs": len(p),
                "rescues": rescues,
                "harms": harms,
                "mcnemar_p": mcnemar_exact(rescues, harms),
            }
        )
    return rows


def common_panel_solve(tables: TablesLike, pairs: pd.DataFrame | None = None) -> dict[str, float | None]:
    """Solver vs solver on common ground: for every other solver t, s's no-hint rate minus t's
    over the environments both played (authored by neither), averaged over the opponents t that
    share at least one environment. Positive: s solves more of the same environments."""
    pairs = matched_pairs(tables.episodes) if pairs is None else pairs
    if pairs.empty:
        return {}
    rates = pairs.groupby(["env_id", "solver"])["y0"].mean().unstack("solver")
    played = rates.notna().to_numpy(float)  # (env, solver)
    r = rates.fillna(0.0).to_numpy(float)
    both = played.T @ played  # environments each pair of solvers shares
    diff = r.T @ played - played.T @ r  # Σ over shared environments of (r_s − r_t)
    np.fill_diagonal(both, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_diff = np.where(both > 0, diff / np.where(both > 0, both, 1), np.nan)
    out: dict[str, float | None] = {}
    for k, s in enumerate(rates.columns):
        vals = mean_diff[k][both[k] > 0]
        out[s] = float(vals.mean()) if len(vals) else None
    return out


def env_lift(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per environment: mean (yh − y0) over the panel's matched pairs, with author and domain."""
    return pairs.assign(d=pairs["yh"] - pairs["y0"]).groupby("env_id").agg(
        lift=("d", "mean"), author=("author", "first"), domain=("domain", "first"), round=("round", "first")
    )


def design_scores(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per environment: the design score D averaged over seeds, with author and domain.

    Per seed, r are the panel solvers' no-hint success rates (over trials) and
    D = Σ_{i<j} |r_i − r_j| / ⌊n²/4⌋; a seed with fewer than two panel solvers has no D.
    """
    rates = pairs.groupby(["env_id", "seed", "solver"])["y0"].mean()
    per_seed = {}
    for (env, seed), r in rates.groupby(level=[0, 1]):
        v = r.to_numpy(dtype=float)
        n = len(v)
        if n < 2:
            continue
        total = np.abs(v[:, None] - v[None, :]).sum() / 2.0
        per_seed[(env, seed)] = total / (n * n // 4)
    if not per_seed:
        return pd.DataFrame(columns=["design", "author", "domain"])
    d = pd.Series(per_seed).groupby(level=0).mean().rename("design")
    info = pairs.groupby("env_id").agg(author=("author", "first"), domain=("domain", "first"))
    return info.join(d, how="inner")


def author_metrics(tables: TablesLike, pairs: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One SPEC §8 `authors` row per author (environment counts, faults, lift, design)."""
    pairs = matched_pairs(tables.episodes) if pairs is None else pairs
    envs = tables.environments
    eps = tables.episodes
    lifts = env_lift(pairs)
    designs = design_scores(pairs)
    rows = []
    for a in author_names(tables):
        mine = envs[envs["author"] == a]
        lv = lifts[lifts["author"] == a]
        dv = designs[designs["author"] == a]
        rows.append(
            {
                "model": a,
                "environments": len(mine),
                "valid_environments": int(mine["valid"].astype(bool).sum()),
                "invalid_environments": int((~mine["valid"].astype(bool)).sum()),
                "author_faults": int(((eps["author"] == a) & (eps["outcome"] == Outcome.INCOMPLETE)).sum()),
                "hint_authoring": domain_balanced(lv["lift"], lv["domain"]),
                "design_score": domain_balanced(dv["design"], dv["domain"]),
                "pairs": int((pairs["author"] == a).sum()),
            }
        )
    return rows


def lift_matrix(pairs: pd.DataFrame) -> pd.DataFrame:
    """Author × solver mean lift (yh − y0) over matched pairs; NaN where they never met."""
    if pairs.empty:
        return pd.DataFrame()
    return pairs.assign(d=pairs["yh"] - pairs["y0"]).pivot_table(
        index="author", columns="solver", values="d", aggfunc="mean"
    )


def learnability(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per environment × solver: the no-hint rate p and p(1 − p) (highest at p = ½)."""
    out = pairs.groupby(["env_id", "solver"])["y0"].mean().rename("p").reset_index()
    out["learnability"] = out["p"] * (1 - out["p"])
    return out


def boxed_content(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` in `text` (the box the engine would pass to
    the environment), or None."""
    box = last_boxed(text)
    return None if box is None else box[len("\\boxed{"):-1]


def winning_action(transcript: object) -> str | None:
    """The boxed text of the last step of a transcript (the winning step of a success): the
    content of `duel.answers.decisive_action`'s box (the action itself when it has none)."""
    action = decisive_action(transcript)
    if action is None:
        return None
    inner = boxed_content(action)
    return inner if inner is not None else action


# The flags under the names readers import from here; each is its `duel.outcomes.Flag` member.
NONDETERMINISTIC = Flag.NONDETERMINISTIC
UNSOLVED_WITH_HINT = Flag.UNSOLVED_WITH_HINT
HINT_GATED = Flag.HINT_GATED
HINT_LEAK = Flag.HINT_LEAK
TRIVIAL = Flag.TRIVIAL
HINT_IS_KEY = Flag.HINT_IS_KEY
FIXED_ANSWER = Flag.FIXED_ANSWER

HINT_GATED_NO_HINT_MAX = 0.25
"""`hint_gated` tolerance: the panel's no-hint pass rate is at most this..."""
HINT_GATED_HINTED_MIN = 0.75
"""...and its hinted pass rate at least this (over the panel's matched pairs)."""
HINT_LEAK_MIN_CHARS = 3
"""A winning box at least this long that appears verbatim in the hint is a leak (the original
rule); shorter answers are caught by the copying rule, which matches whole phrases."""


def _audits(tables: TablesLike) -> list[tuple[str, str, str | None]]:
    """(env_id, state, detail) of the run's recorded replay audits (`store.Tables.audits`),
    oldest first; none for tables without audits (episodes from a file)."""
    audits = getattr(tables, "audits", None)
    if not isinstance(audits, pd.DataFrame) or audits.empty:
        return []
    return list(zip(audits["env_id"], audits["state"], audits["detail"], strict=True))


def _rescue_answers(tables: TablesLike) -> dict[str, dict[int, set[Answer]]]:
    """What the hint changed in the panel's rescues as played: the run database's record of it
    (`store.Tables.rescue_answers`, read before judging), else from `tables.episodes` (tables
    from a file, whose episodes are as played)."""
    recorded = getattr(tables, "rescue_answers", None)
    if isinstance(recorded, dict):
        return recorded
    eps = tables.episodes
    if "transcript" not in eps.columns:
        return {}
    return rescue_answers(rescues(eps.to_dict("records")))


def copied_win(transcript: object, hint: str, phrases: set[str] | None = None) -> bool:
    """Whether a winning episode needed no reasoning: every action it boxed is a token or
    phrase of the hint (`envs._battery.hint_phrases`, compared `normalized`) or something an
    earlier turn showed (`shown_items` of an observation), and at least one is from the hint.
    A solver that says the hint's password and then types the code the environment prints
    copied; one that types the steps a hint names and then an answer it worked out did not.
    `phrases`: the hint's normalized phrases, when the caller has them already."""
    if not isinstance(transcript, list | tuple):
        return False
    if phrases is None:
        phrases = {_battery.normalized(p) for p in _battery.hint_phrases(hint)}
    shown: set[str] = set()
    from_hint = False
    acted = False
    for msg in transcript:
        if not isinstance(msg, dict):
            continue
        action = msg.get("action")
        if msg.get("role") == "env" and isinstance(action, str):
            inner = boxed_content(action)
            key = _battery.normalized(inner if inner is not None else action)
            if key in phrases:
                from_hint = True
            elif key and key not in shown:
                return False
            acted = True
        content = msg.get("content")
        if msg.get("role") in ("user", "env") and isinstance(content, str):
            shown.update(_battery.normalized(i) for i in _battery.shown_items(content))
    return acted and from_hint


def _hint_leak(transcripts: list[object], hint: str) -> bool:
    """`hint_leak` for one environment from its hinted panel wins (see `environment_flags`)."""
    if not transcripts:
        return False
    lowered = hint.lower()
    for transcript in transcripts:
        action = winning_action(transcript)
        if (action is not None and len(action.strip()) >= HINT_LEAK_MIN_CHARS
                and action.strip().lower() in lowered):
            return True
    phrases = {_battery.normalized(p) for p in _battery.hint_phrases(hint)}
    copied = sum(copied_win(t, hint, phrases) for t in transcripts)
    return 2 * copied > len(transcripts)


def environment_flags(tables: TablesLike) -> dict[str, list[str]]:
    """Per valid environment, its flags (`FLAGS`, in that order).

    Author's fault (`AUTHOR_FAULT_FLAGS`; every episode of the environment is then
    `incomplete`, so it has no informational flag):
    - `nondeterministic`: the replay audit found an episode that a fresh instance given the
      same seed and actions does not reproduce;
    - `trivial`, `hint_is_key`: validation's degenerate-policy battery won most seeds without
      the hint, or only by copying it (`tables.battery`, recorded for the run's validated
      environments, fixed-pool ones included);
    - `fixed_answer`: the winning answer is the same on every seed: validation's oracle gave
      one answer on all the seeds it played (`tables.battery`), or what the hint changed in the
      panel's rescues is one answer on more seeds than chance explains
      (`duel.answers.fixed_in_play`, over `tables.rescue_answers`, or the episodes of tables
      read from a file).

    Informational, over the panel (solvers other than the author) only:
    - `unsolved_with_hint`: nobody won with the hint (an environment nobody played with the
      hint is not flagged: no data is not evidence);
    - `hint_gated`: the panel's no-hint rate ≤ `HINT_GATED_NO_HINT_MAX` and hinted rate ≥
      `HINT_GATED_HINTED_MIN` over its matched pairs;
    - `hint_leak`: a hinted win's box (at least `HINT_LEAK_MIN_CHARS` long) appears verbatim in
      the hint, or most hinted wins are `copied_win`s (an answer or password copied from the
      hint at any step, a winning box equal to a hint token of any length). A solver that
      types the steps a procedure names and then an answer it worked out has not copied. What
      validation's battery did not win never clears it: a copying policy that lost may have
      lost before it could use the hint (a knock every solver passes, then the password).
    """
    envs = tables.environments
    eps = scored_episodes(tables.episodes)
    eps = eps[~eps["self_play"].astype(bool)]
    pairs = matched_pairs(tables.episodes)
    hints = dict(zip(envs["env_id"], envs["hint"].fillna(""), strict=False))
    battery: dict[str, BatteryFindings] = getattr(tables, "battery", None) or {}
    flags: dict[str, list[str]] = {e: [] for e in envs["env_id"]}
    # the author's-fault flags: the typed facts (audit states, the battery's flag, what the
    # hint changed in the rescues as played), one rule
    faults = author_faults(_audits(tables), battery, _rescue_answers(tables))
    for env_id, fault in faults.items():
        if env_id in flags:
            flags[env_id].append(fault.flag)
    # an environment at fault has no informational flag (tables from a file are not judged)
    eps = eps[~eps["env_id"].isin(list(faults))]
    pairs = pairs[~pairs["env_id"].isin(list(faults))]
    hinted = eps[eps["hinted"].astype(bool)]
    for env_id, group in hinted.groupby("env_id"):
        if env_id not in flags:
            continue
        if group["y"].sum() == 0:
            flags[env_id].append(UNSOLVED_WITH_HINT)
    rates = pairs.groupby("env_id").agg(r0=("y0", "mean"), rh=("yh", "mean"))
    for env_id, r in rates.iterrows():
        if env_id in flags and r["r0"] <= HINT_GATED_NO_HINT_MAX and r["rh"] >= HINT_GATED_HINTED_MIN:
            flags[env_id].append(HINT_GATED)
    wins = hinted[hinted["y"] == 1]
    for env_id, group in wins.groupby("env_id"):
        hint = hints.get(env_id, "")
        if hint and env_id in flags and _hint_leak(list(group["transcript"]), hint):
            flags[env_id].append(HINT_LEAK)
    return flags
