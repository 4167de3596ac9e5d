"""Matched pairs: the unit every hint metric is computed on.

A matched pair is one (environment, solver, seed, trial) played in both conditions. It counts
only when both episodes ended in `success` or `failure`; `incomplete` and `error` episodes drop
the whole pair. `y0` is the outcome without the hint, `yh` with it (1 = success).
"""

from __future__ import annotations

import pandas as pd

from envduels.duel.outcomes import Outcome

SCORED = (Outcome.SUCCESS, Outcome.FAILURE)
PAIR_KEYS = ["env_id", "solver", "seed", "trial"]
PAIR_COLUMNS = ["env_id", "author", "solver", "round", "domain", "seed", "trial", "self_play", "y0", "yh"]


def scored_episodes(episodes: pd.DataFrame) -> pd.DataFrame:
    """Episodes whose outcome is `success` or `failure`, with `y` = 1 for success."""
    out = episodes[episodes["outcome"].isin(SCORED)].copy()
    out["y"] = (out["outcome"] == Outcome.SUCCESS).astype(int)
    return out


def matched_pairs(episodes: pd.DataFrame, *, include_self_play: bool = False) -> pd.DataFrame:
    """One row per matched pair with columns `PAIR_COLUMNS`.

    Self-play pairs are dropped unless `include_self_play`; every cross-model metric uses the
    default. If a (key, condition) was played more than once the last row wins.
    """
    eps = scored_episodes(episodes)
    if not include_self_play:
        eps = eps[~eps["self_play"].astype(bool)]
    if eps.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in PAIR_COLUMNS})
    eps = eps.drop_duplicates(PAIR_KEYS + ["hinted"], keep="last")
    hinted = eps["hinted"].astype(bool)
    base = eps[~hinted][PAIR_KEYS + ["author", "round", "domain", "self_play", "y"]]
    with_hint = eps[hinted][PAIR_KEYS + ["y"]]
    pairs = base.merge(with_hint, on=PAIR_KEYS, suffixes=("0", "h"))
    pairs["self_play"] = pairs["self_play"].astype(bool)
    return pairs[PAIR_COLUMNS].reset_index(drop=True)


def domain_balanced(values: pd.Series, domains: pd.Series) -> float | None:
    """Mean within each domain, then the mean across domains; None when there are no values.

    `values` and `domains` are aligned per environment; NaN values are dropped first, and a
    missing domain counts as the domain "other".
    """
    d = pd.Series(domains.to_numpy(), dtype=object).fillna("other")  # a missing domain is a domain
    frame = pd.DataFrame({"v": values.to_numpy(dtype=float), "d": d.to_numpy()}).dropna(subset=["v"])
    if frame.empty:
        return None
    return float(frame.groupby("d")["v"].mean().mean())
