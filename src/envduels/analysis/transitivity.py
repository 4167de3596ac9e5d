"""Transitivity of the duel win matrix: 3-cycles, stochastic transitivity, BT goodness of fit.

The input is the observed match score matrix `S[i, j]` (points of i against j, ties as halves)
and the fitted BT strengths. An edge i→j is "won" when i's share of the points exceeds ½; a cycle
is *significant* when all three of its edges are, at level 1 − 0.05/m with m the number of model
pairs that met (Bonferroni). With the ratings' bootstrap draws of the score matrix (what
`analyze` passes), an edge i→j is significant when i beats j in all but at most a share
0.05/(2m) of the draws: the environments are the unit of evidence, as for the intervals. Without
draws (a bare win matrix) it falls back to Wilson intervals over the matches, which treat every
match as independent and, at one match per pair and round, can almost never clear ½.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from scipy.special import expit
from scipy.stats import norm


def wilson(wins: float, n: float, alpha: float) -> tuple[float, float]:
    """Wilson score interval for a proportion (accepts half-wins)."""
    if n <= 0:
        return 0.0, 1.0
    z = float(norm.ppf(1 - alpha / 2))
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def transitivity(
    scores: np.ndarray,
    players: list[str],
    theta: np.ndarray | None = None,
    *,
    draws: np.ndarray | None = None,
) -> dict[str, Any]:
    """Triads, raw and significant 3-cycles (with their members), WST/SST violation rates among
    chains i>j>k, and the BT log-loss per match against the saturated pairwise model.

    `draws` (B, n, n): bootstrap draws of the score matrix; when given (B ≥ 1) they decide which
    edges are significant (`significance` = "bootstrap"), else Wilson intervals do ("wilson").
    """
    n = len(players)
    games = scores + scores.T
    met = games > 0
    share = np.where(met, scores / np.where(met, games, 1.0), np.nan)
    pairs_met = int(np.triu(met, 1).sum())
    alpha = 0.05 / max(pairs_met, 1)
    sig = np.zeros((n, n), dtype=bool)
    use_draws = draws is not None and len(draws) > 0
    if use_draws:
        # share of draws in which i does not beat j (a loss, a tie, or the pair never met)
        not_beaten = 1.0 - (draws > np.swapaxes(draws, 1, 2)).mean(axis=0)
        sig = met & (not_beaten <= alpha / 2)
    else:
        for i, j in zip(*np.nonzero(np.triu(met, 1)), strict=True):
            lo, hi = wilson(scores[i, j], games[i, j], alpha)
            sig[i, j], sig[j, i] = lo > 0.5, hi < 0.5
    beats = np.nan_to_num(share, nan=0.5) > 0.5
    triads = cycles = significant = 0
    cycle_list: list[dict[str, Any]] = []
    for i, j, k in combinations(range(n), 3):
        if not (met[i, j] and met[j, k] and met[i, k]):
            continue
        triads += 1
        for a, b, c in ((i, j, k), (i, k, j)):
            if beats[a, b] and beats[b, c] and beats[c, a]:
                cycles += 1
                is_sig = bool(sig[a, b] and sig[b, c] and sig[c, a])
                significant += is_sig
                cycle_list.append({"models": [players[a], players[b], players[c]], "significant": is_sig})
    chains = wst = sst = 0
    for i in range(n):
        for j in range(n):
            for k in range(n):
                if len({i, j, k}) < 3 or not (met[i, j] and met[j, k] and met[i, k]):
                    continue
                if share[i, j] > 0.5 and share[j, k] > 0.5:
                    chains += 1
                    wst += share[i, k] < 0.5
                    sst += share[i, k] < max(share[i, j], share[j, k])
    out: dict[str, Any] = {
        "triads": triads,
        "cycles": cycles,
        "significant_cycles": significant,
        "significance": "bootstrap" if use_draws else "wilson",
        "wst_violations": None if chains == 0 else wst / chains,
        "sst_violations": None if chains == 0 else sst / chains,
        "chains": chains,
        "cycle_list": cycle_list,
        "bt_log_loss": None,
        "saturated_log_loss": None,
    }
    total = float(np.triu(games, 1).sum())
    if theta is not None and total > 0:
        p_bt = np.clip(expit(theta[:, None] - theta[None, :]), 1e-12, 1 - 1e-12)
        p_sat = np.clip(np.nan_to_num(share, nan=0.5), 1e-12, 1 - 1e-12)
        out["bt_log_loss"] = float(-(scores * np.log(p_bt)).sum() / total)
        out["saturated_log_loss"] = float(-(scores * np.log(p_sat)).sum() / total)
    return out
