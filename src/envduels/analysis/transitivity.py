"""Transitivity of the duel win matrix: 3-cycles, stochastic transitivity, BT goodness of fit.

The input is the observed match score matrix `S[i, j]` (points of i against j, ties as halves)
and the fitted BT strengths. An edge i→j is "won" when i's share of the points exceeds ½; a cycle
is *significant* when all three of its edges are, at level 1 − 0.05/m with m the number of model
pairs that met (Bonferroni). What `analyze` passes is `edge_p`, from `duel_edge_pvalues`: a
permutation test over the environments behind each pair's matches (i's environments played by j and
j's played by i), so an edge needs evidence from several environments; with one or two behind
a match it cannot be significant. A bootstrap of environments (`draws`, the earlier rule) can
reweight a match but never reverse it, so with few environments its edges were "significant"
by construction. Without either, Wilson intervals over the matches decide.

Raw cycles and WST/SST violations are not zero under a transitive truth: with one match per pair
shares are 0, ½ or 1. `expected` gives their distribution under the fitted BT model (parametric
bootstrap of the same matches, ties at the observed rate), the reference to read them against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from envduels.analysis.randomization import two_sample_pvalues


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
    edge_p: np.ndarray | None = None,
    tie_rate: float = 0.0,
    reference_draws: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """Triads, raw and significant 3-cycles (with their members), WST/SST violation rates among
    chains i>j>k, and the BT log-loss per match against the saturated pairwise model.

    `edge_p[i, j]`: one-sided p-value that i beats j (`duel_edge_pvalues`); when given it decides
    which edges are significant (`significance` = "environments"), else `draws` (B, n, n) of the
    score matrix do ("bootstrap"), else Wilson intervals ("wilson"). With `theta`, `expected`
    holds the cycles and WST/SST rates a transitive BT model with these strengths produces on
    the same matches (`reference_draws` simulations; mean, 2.5–97.5% range, and the share of
    simulations with at least the observed value).
    """
    n = len(players)
    games = scores + scores.T
    met = games > 0
    share = np.where(met, scores / np.where(met, games, 1.0), np.nan)
    pairs_met = int(np.triu(met, 1).sum())
    alpha = 0.05 / max(pairs_met, 1)
    sig = np.zeros((n, n), dtype=bool)
    use_draws = draws is not None and len(draws) > 0
    if edge_p is not None:
        sig = met & (edge_p <= alpha / 2)
    elif draws is not None and use_draws:
        # share of draws in which i does not beat j (a loss, a tie, or the pair never met)
        not_beaten = 1.0 - (draws > np.swapaxes(draws, 1, 2)).mean(axis=0)
        sig = met & (not_beaten <= alpha / 2)
    else:
        for i, j in zip(*np.nonzero(np.triu(met, 1)), strict=True):
            lo, hi = wilson(scores[i, j], games[i, j], alpha)
            sig[i, j], sig[j, i] = lo > 0.5, hi < 0.5
    triads, cycles, significant, chains, wst, sst, cycle_list = _observed_triads(share, met, sig, players)
    out: dict[str, Any] = {
        "triads": triads,
        "cycles": cycles,
        "significant_cycles": significant,
        "significant_edges": int(np.triu(sig | sig.T, 1).sum()),
        "significance": "environments" if edge_p is not None else "bootstrap" if use_draws else "wilson",
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
    out["expected"] = None
    if theta is not None and triads > 0 and reference_draws > 0:
        out["expected"] = expected_rates(scores, theta, tie_rate=tie_rate, draws=reference_draws, seed=seed,
                                         observed=(cycles, out["wst_violations"], out["sst_violations"]))
    return out


TRIAD_BUDGET = 1 << 21
"""Elements (draws × ordered triples) held at once while counting triads: memory stays at a few
tens of MiB whatever the number of models; time still grows with the triads (cubic in the models,
about 1 s for the 161,700 triads of 100 models and 200 reference draws)."""


def _met_triples(met: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """(t, 3) arrays of i < j < k whose three pairs all met, in lexicographic order, about `size`
    rows at a time (at least one first index's worth): never all C(n, 3) triples at once."""
    n = len(met)
    buf: list[np.ndarray] = []
    held = 0
    for i in range(n - 2):
        rest = met[i, i + 1:]
        j, k = np.nonzero(np.triu(met[i + 1:, i + 1:] & rest[:, None] & rest[None, :], 1))
        if len(j):
            buf.append(np.column_stack([np.full(len(j), i), j + i + 1, k + i + 1]))
            held += len(j)
        if held >= size:
            yield np.concatenate(buf)
            buf, held = [], 0
    if buf:
        yield np.concatenate(buf)


_PERMS = ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0])


def _chunk_counts(share: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """(4, B): raw 3-cycles, chains a>b>c, WST and SST violations among them, over triples `tri`."""
    i, j, k = tri.T
    beats = share > 0.5
    cyc = ((beats[:, i, j] & beats[:, j, k] & beats[:, k, i]) | (beats[:, i, k] & beats[:, k, j] & beats[:, j, i])).sum(axis=1)
    a, b, c = np.concatenate([tri[:, perm] for perm in _PERMS]).T
    ab, bc, ac = share[:, a, b], share[:, b, c], share[:, a, c]
    chain = (ab > 0.5) & (bc > 0.5)
    return np.stack([cyc, chain.sum(axis=1), (chain & (ac < 0.5)).sum(axis=1),
                     (chain & (ac < np.maximum(ab, bc))).sum(axis=1)])


def _triad_totals(share: np.ndarray, met: np.ndarray) -> np.ndarray:
    """(4, B) per stacked share matrix (B, n, n): raw 3-cycles, chains, WST and SST violations,
    counted over the met triples in chunks of `TRIAD_BUDGET` elements."""
    per = max(1, TRIAD_BUDGET // (6 * max(len(share), 1)))
    total = np.zeros((4, len(share)), dtype=np.int64)
    for tri in _met_triples(met, per):
        for start in range(0, len(tri), per):
            total += _chunk_counts(share, tri[start:start + per])
    return total


def _triad_rates(share: np.ndarray, met: np.ndarray) -> dict[str, np.ndarray]:
    """Per stacked share matrix (B, n, n): raw 3-cycles and WST/SST violation rates (NaN: no chain)."""
    cycles, n_chain, wst, sst = _triad_totals(share, met)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"cycles": cycles.astype(float), "wst": np.where(n_chain > 0, wst / np.maximum(n_chain, 1), np.nan),
                "sst": np.where(n_chain > 0, sst / np.maximum(n_chain, 1), np.nan)}


def _observed_triads(share: np.ndarray, met: np.ndarray, sig: np.ndarray, players: list[str]
                     ) -> tuple[int, int, int, int, int, int, list[dict[str, Any]]]:
    """Triads, raw and significant 3-cycles, chains, WST and SST violations of the observed share
    matrix (NaN where a pair never met), and the cycles in triad order (i < j < k; i→j→k→i
    before i→k→j→i)."""
    beats = np.nan_to_num(share, nan=0.5) > 0.5
    triads = significant = 0
    cycle_list: list[dict[str, Any]] = []
    for tri in _met_triples(met, TRIAD_BUDGET // 6):
        triads += len(tri)
        i, j, k = tri.T
        forward = beats[i, j] & beats[j, k] & beats[k, i]  # at most one direction per triad
        backward = beats[i, k] & beats[k, j] & beats[j, i]
        for t in np.flatnonzero(forward | backward):
            a, b, c = (i[t], j[t], k[t]) if forward[t] else (i[t], k[t], j[t])
            is_sig = bool(sig[a, b] and sig[b, c] and sig[c, a])
            significant += is_sig
            cycle_list.append({"models": [players[a], players[b], players[c]], "significant": is_sig})
    _, chains, wst, sst = (int(v) for v in _triad_totals(np.nan_to_num(share, nan=0.5)[None], met)[:, 0])
    return triads, len(cycle_list), significant, chains, wst, sst, cycle_list


def expected_rates(
    scores: np.ndarray,
    theta: np.ndarray,
    *,
    tie_rate: float = 0.0,
    draws: int = 200,
    seed: int = 0,
    observed: tuple[float, float | None, float | None] | None = None,
) -> dict[str, Any]:
    """Cycles and WST/SST violation rates under the fitted, transitive BT model: each pair plays
    its observed number of matches again, a match tied with probability `tie_rate`, else won by
    i with the probability that keeps i's expected share at σ(θ_i − θ_j)."""
    rng = np.random.default_rng(seed)
    games = np.rint(scores + scores.T)
    met = games > 0
    n = len(scores)
    p = expit(theta[:, None] - theta[None, :])
    tie = min(max(tie_rate, 0.0), 0.999)
    q = np.clip((p - tie / 2.0) / (1.0 - tie), 0.0, 1.0)
    iu, ju = np.triu_indices(n, 1)
    g = games[iu, ju].astype(int)
    shape = (draws, len(iu))
    ties = rng.binomial(g, tie, size=shape)
    wins = rng.binomial(g - ties, q[iu, ju], size=shape)
    pts = wins + ties / 2.0
    share = np.full((draws, n, n), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        share[:, iu, ju] = np.where(g > 0, pts / np.maximum(g, 1), np.nan)
        share[:, ju, iu] = np.where(g > 0, 1.0 - pts / np.maximum(g, 1), np.nan)
    rates = _triad_rates(np.nan_to_num(share, nan=0.5), met)
    out: dict[str, Any] = {"draws": draws, "tie_rate": tie}
    obs = dict(zip(("cycles", "wst", "sst"), observed or (None, None, None), strict=True))
    for key, name in (("cycles", "cycles"), ("wst", "wst_violations"), ("sst", "sst_violations")):
        v = rates[key][~np.isnan(rates[key])]
        if not len(v):
            out[name] = {"mean": None, "low": None, "high": None, "p_at_least_observed": None}
            continue
        o = obs[key]
        out[name] = {"mean": float(v.mean()), "low": float(np.percentile(v, 2.5)), "high": float(np.percentile(v, 97.5)),
                     "p_at_least_observed": None if o is None else float(np.mean(v >= o - 1e-12))}
    return out


def duel_edge_pvalues(net: np.ndarray, count: np.ndarray, rounds: int, n: int, *, seed: int = 0) -> np.ndarray:
    """One-sided p-value that i beats j, from the environments behind their matches.

    `net`, `count` (n_env, rounds·n·n) are the duel builder's per-environment author-minus-solver
    points and matched pairs at (round, author, solver). i's advantage on each of its environments
    that j played is X = net(i → j); on each of j's that i played, Y = −net(j → i). A match's
    expected net is proportional to E[X] + E[Y] = E[X] − E[−Y], tested by the exact permutation
    test of the pooled values X and −Y (`two_sample_pvalues`): exact when the two models are alike
    (then X and −Y are exchangeable), where Welch's t reference was optimistic in the far tail
    (0.09 false significant edges at 9 × 10 × 1 against a nominal 0.05). A side with fewer than
    two environments gives p = 1 (not testable). `seed` only matters for values off the grid of
    ½ points (Monte Carlo).

    An environment's value is its points per slot times the typical slots of an environment (the
    median count): a missing or `error` pair removes its slot instead of moving the value toward
    0, so a solver with many `error` episodes does not look different (where every slot was
    played the value is the plain sum, on the ½ grid, tested exactly)."""
    has = count > 0
    typical = float(np.median(count[has])) if has.any() else 1.0
    net = np.where(has, net / np.where(has, count, 1.0), 0.0) * typical
    net3 = net.reshape(len(net), rounds, n, n)
    cnt3 = count.reshape(len(count), rounds, n, n)
    p = np.ones((n, n))
    rng = np.random.default_rng(seed)
    for i in range(n):
        for j in range(i + 1, n):
            x = net3[:, :, i, j][cnt3[:, :, i, j] > 0]
            y = net3[:, :, j, i][cnt3[:, :, j, i] > 0]  # = −Y
            if len(x) < 2 or len(y) < 2:
                continue
            # off the ½ grid (some slot missing) the test is Monte Carlo: 1,999 splits, and the
            # full 19,999 fresh ones only where that p is small (valid: below a level < 0.01 only
            # when the second, independent p-value is)
            p[i, j], p[j, i] = two_sample_pvalues(x, y, rng=rng, permutations=1_999)
            if min(p[i, j], p[j, i]) <= 0.01:
                p[i, j], p[j, i] = two_sample_pvalues(x, y, rng=rng)
    return p
