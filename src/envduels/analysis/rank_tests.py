"""Tests behind the rank rule of the solver and author ratings: exact or permutation p-values
for each pair of models, which `ratings.holm_above` turns into family-wise rank claims.

The bootstrap z of a strength difference, used before, was optimistic in the far tail that Holm
needs (0.05/36 at 9 models): identical solvers were ordered in 8% of runs at 9 × 10 × 1, and
identical authors in 16–53% (so author ranks were withheld). Every test here is exact when the
two models are alike, whatever the environments' values.
"""

from __future__ import annotations

import numpy as np

from envduels.analysis.lifts import EnvironmentLifts
from envduels.analysis.randomization import sign_flip_pvalue

AUTHOR_PERMUTATIONS = 999
"""Random splits per author pair in a first pass; pairs with p ≤ `REFINE_BELOW` get more."""
REFINE_BELOW = 0.05


def _split_pvalue(values: np.ndarray, first: int, observed: float, count: int, rng: np.random.Generator) -> float:
    """(1 + #{|T*| ≥ |T|}) / (1 + count) over `count` random splits of `values` into a group of
    `first` and the rest, T the difference of the two groups' means; in chunks of 2,000."""
    hits, total = 0, float(values.sum())
    rest = len(values) - first
    for start in range(0, count, 2000):
        k = min(2000, count - start)
        split = np.argsort(rng.random((k, len(values))), axis=1) < first
        inside = split.astype(float) @ values
        t = inside / first - (total - inside) / rest
        hits += int(np.sum(np.abs(t) >= observed))
    return (1 + hits) / (1 + count)


def solver_pair_pvalues(points: np.ndarray, n: int, *, seed: int = 0) -> np.ndarray:
    """Two-sided p-value that solvers i and j differ, in p[i, j] where Σ d favours i and in p[j, i]
    where it favours j (NaN in the other; both when Σ d = 0), by a sign-flip test over the environments
    both played (`sign_flip_pvalue`). On such an environment, d = i's points minus j's against
    every other solver there, plus i's points against j minus j's against i; swapping the two
    names on that environment flips the sign of d, so when the two solve alike d is symmetric
    about 0 and flipping signs environment by environment is exact. The bootstrap z it replaces
    claimed an order among identical solvers in 8% of runs at 9 × 10 × 1 under Holm at 0.05.
    NaN where the pair shares no environment. `points` is `SolverBuilder.points`."""
    pts = points.reshape(len(points), n, n)
    played = (pts + np.swapaxes(pts, 1, 2)).sum(axis=2) > 0  # (env, solver)
    p = np.full((n, n), np.nan)
    rng = np.random.default_rng(seed)
    for i in range(n):
        for j in range(i + 1, n):
            both = played[:, i] & played[:, j]
            if not both.any():
                continue
            e = pts[both]
            others = np.ones(n, dtype=bool)
            others[[i, j]] = False
            d = (e[:, i, others] - e[:, j, others]).sum(axis=1) + e[:, i, j] - e[:, j, i]
            value, total = sign_flip_pvalue(d, rng=rng), float(d.sum())
            p[i, j] = value if total >= 0 else np.nan
            p[j, i] = value if total <= 0 else np.nan
    return p


def author_pair_pvalues(lifts: EnvironmentLifts, *, seed: int = 0, level: float = 0.95) -> np.ndarray:
    """Two-sided p-value that authors i and j differ, in p[i, j] where the statistic favours i and
    in p[j, i] where it favours j (NaN in the other), by a permutation test of environments
    between them. The statistic is the difference of the two authors' **mean environment lift**:
    each environment's lift (Σ (yh − y0) / matched pairs) over the panel solvers other than the
    two, averaged over each author's environments (rounds pooled). When the two write alike,
    their environments are exchangeable and so are these values (every one is measured on the
    same panel): any split of the pooled environments into groups of their sizes is as likely as
    the observed one, and the test is exact. An environment without pairs on that panel says
    nothing and is left out. Monte Carlo: `AUTHOR_PERMUTATIONS` random splits, and max(1,999,
    2 · pairs / 0.05) fresh ones (to resolve Holm's smallest level) for pairs whose first p-value
    is ≤ `REFINE_BELOW` (still a valid p-value: below any level < 0.05 only when the second,
    independent one is). NaN for a pair without an environment each.

    The statistic was each author's points against the other and the other authors, solver by
    solver (the sign of each lift difference): the same exact test, with a fifth to a third
    fewer claims at 9 models × 10–20 environments per author (docs/analysis.md, "How much the
    author statistic matters")."""
    n = len(lifts.authors)
    pairs = n * (n - 1) // 2
    # p can reach half of Holm's smallest level, 0.05/pairs
    refine = max(1_999, int(np.ceil(2.0 * pairs / (1.0 - level))))
    rng = np.random.default_rng(seed)
    p = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1, n):
            panel = lifts.panel_without(i, j)
            g_i, g_j = lifts.environment_lift(i, panel), lifts.environment_lift(j, panel)
            if not len(g_i) or not len(g_j):
                continue
            pooled = np.concatenate([g_i, g_j])
            signed = float(g_i.mean() - g_j.mean())
            # lifts are ratios of counts: a rearrangement that equals the observed difference
            # up to rounding counts as "as extreme"
            observed = abs(signed) - 1e-9
            value = _split_pvalue(pooled, len(g_i), observed, AUTHOR_PERMUTATIONS, rng)
            if value <= REFINE_BELOW:
                value = _split_pvalue(pooled, len(g_i), observed, refine, rng)
            p[i, j] = value if signed >= 0 else np.nan
            p[j, i] = value if signed <= 0 else np.nan
    return p


_CHUNK = 8
"""Third-party environments per lookup table of the duel rank test (2^8 subset sums each)."""
DUEL_PERMUTATIONS = 999
"""Random rearrangements per duel pair in a first pass; pairs with p ≤ `REFINE_BELOW` get more."""


def duel_pair_pvalues(
    net: np.ndarray,
    count: np.ndarray,
    env_half: np.ndarray,
    expected: np.ndarray,
    rounds: int,
    n: int,
    *,
    seed: int = 0,
    level: float = 0.95,
) -> np.ndarray:
    """Two-sided p-value that duel players i and j differ, in p[i, j] where the statistic favours
    i and in p[j, i] where it favours j (NaN in the other), by rearranging the environments
    behind their matches. The statistic is i's match points minus j's against every third model
    (their own matches left out). When i and j are alike as authors and as solvers, (1) in each
    round the environments the two wrote are exchangeable: any split of them into groups of
    their sizes is as likely as the observed one; and (2) on each third model's environment,
    i's results and j's are exchangeable: swapping them is as likely as not. Each rearrangement
    does both, so a claim needs evidence from several environments: two authors whose one
    environment per round everybody solves lose their author halves, but swapping that one
    environment is one of only 2^rounds splits, so the test cannot order them on it. Monte
    Carlo: `DUEL_PERMUTATIONS` rearrangements, and max(1,999, 2 · pairs / 0.05) fresh ones for
    pairs at p ≤ `REFINE_BELOW` (valid as in `author_pair_pvalues`).

    `net`, `count`, `env_half`, `expected` are the duel builder's (`ratings.DuelBuilder`)."""
    half = np.asarray(env_half)
    rows = np.flatnonzero(half >= 0)
    cols = half[rows][:, None] * n + np.arange(n)[None, :]
    vals = np.stack([net[rows[:, None], cols], count[rows[:, None], cols]], axis=-1)  # (m, n, 2)
    refine = max(1_999, int(np.ceil(2.0 * (n * (n - 1) // 2) / (1.0 - level))))
    rng = np.random.default_rng(seed)
    p = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1, n):
            pair = _DuelPair(vals, half[rows] % n, half[rows] // n, expected, rounds, i, j)
            if not pair.testable:
                continue
            value = pair.pvalue(DUEL_PERMUTATIONS, rng)
            if value <= REFINE_BELOW:
                value = pair.pvalue(refine, rng)
            p[i, j] = value if pair.observed >= 0 else np.nan
            p[j, i] = value if pair.observed <= 0 else np.nan
    return p


class _DuelPair:
    """The rearrangements of `duel_pair_pvalues` for one pair (i, j)."""

    def __init__(self, vals: np.ndarray, author: np.ndarray, rnd: np.ndarray, expected: np.ndarray, rounds: int,
                 i: int, j: int) -> None:
        n = vals.shape[1]
        third = np.array([k for k in range(n) if k not in (i, j)], dtype=int)
        self.R, self.K = rounds, len(third)
        own = np.flatnonzero((author == i) | (author == j))
        other = np.flatnonzero(np.isin(author, third))
        self.testable = bool(len(third)) and bool(len(own) or len(other))
        self.exp_ik = expected[:, [i, j]][:, :, third].transpose(1, 0, 2)  # (2, R, K): i/j author vs k
        self.exp_ki = expected[:, third][:, :, [i, j]].transpose(2, 0, 1)  # (2, R, K): k author vs i/j
        self.own_round = rnd[own]
        self.own_flat = vals[own][:, third].reshape(len(own), self.K * 2)  # own env's half vs each k
        k_pos = np.full(n, -1)
        k_pos[third] = np.arange(self.K)
        cell = rnd[other] * self.K + k_pos[author[other]]  # a third model's env → (its round, its author)
        order = np.argsort(cell, kind="stable")
        other, cell = other[order], cell[order]
        t_vals = vals[other][:, [i, j]]  # (t, 2, 2): i's and j's results there (net, slots)
        self.solver_i = np.zeros((rounds * self.K, 2))
        self.solver_j = np.zeros((rounds * self.K, 2))
        np.add.at(self.solver_i, cell, t_vals[:, 0])
        np.add.at(self.solver_j, cell, t_vals[:, 1])
        # swapping i and j on a third model's environment moves (net, slots) of both halves by its
        # `swap`; the environments of one (round, author) go in chunks of ≤ `_CHUNK`, and every
        # subset sum of a chunk is tabulated, so a rearrangement draws one integer per chunk (its
        # bits: which environments are swapped, each with probability ½) instead of a bit each
        swap = t_vals[:, 1] - t_vals[:, 0]
        chunks = [(c, idx[k:k + _CHUNK]) for c in np.unique(cell) for idx in [np.flatnonzero(cell == c)]
                  for k in range(0, len(idx), _CHUNK)]
        self.table = np.zeros((len(chunks), 2 ** _CHUNK, 2))
        self.sizes = np.array([2 ** len(idx) for _, idx in chunks], dtype=np.int64)
        self.place = np.zeros((len(chunks), rounds * self.K))
        for q, (c, idx) in enumerate(chunks):
            bits = (np.arange(2 ** len(idx))[:, None] >> np.arange(len(idx))[None, :]) & 1
            self.table[q, : 2 ** len(idx)] = bits @ swap[idx]
            self.place[q, c] = 1.0
        self.groups = [(np.flatnonzero(self.own_round == r), int(np.sum(author[own][self.own_round == r] == i)))
                       for r in range(rounds)]
        # the flat forms `stat` works on (every sum below is of integers or halves, so exact in any
        # order: the statistic is the same number, bit for bit, as summing round by round)
        cells = rounds * self.K
        self.own_w = np.zeros((len(own), cells * 2))  # own env → its round's (K, 2) block
        for e, r in enumerate(self.own_round):
            self.own_w[e, r * self.K * 2:(r + 1) * self.K * 2] = self.own_flat[e]
        self.own_tot = self.own_w.sum(axis=0)
        self.flat_table = self.table.reshape(-1, 2)
        self.base = (np.arange(len(chunks)) * 2 ** _CHUNK)[None, :]
        chunk_cell = np.array([c for c, _ in chunks], dtype=np.int64)
        self.direct = bool(np.array_equal(chunk_cell, np.arange(cells)))  # one chunk per cell, in order
        self.exp_flat = [(self.exp_ik[s].reshape(-1), self.exp_ki[s].reshape(-1)) for s in (0, 1)]
        self.n_own, self.n_other = len(own), len(other)
        self.observed = float(self.stat((author[own] == i)[None, :], np.zeros((1, len(chunks)), np.int64))[0])

    def stat(self, first: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """first (P, own): the environment counts as i's; codes (P, chunks): which environments
        of each chunk have i and j swapped (bit k: its k-th)."""
        P, cells = len(first), self.R * self.K
        a_i = (first.astype(float) @ self.own_w).reshape(P, cells, 2)
        a_j = self.own_tot.reshape(cells, 2)[None] - a_i
        moved = self.flat_table[codes + self.base]  # (P, chunks, 2)
        change = moved if self.direct else (moved.transpose(0, 2, 1) @ self.place).transpose(0, 2, 1)
        s_i = self.solver_i[None] + change
        s_j = self.solver_j[None] - change
        return _points(a_i, s_i, *self.exp_flat[0]) - _points(a_j, s_j, *self.exp_flat[1])

    def pvalue(self, count: int, rng: np.random.Generator) -> float:
        """(1 + #{|T*| ≥ |T|}) / (1 + count) over `count` random rearrangements."""
        hits = 0
        for start in range(0, count, 1000):
            k = min(1000, count - start)
            first = np.zeros((k, self.n_own), bool)
            for idx, n_i in self.groups:
                if len(idx):
                    first[:, idx] = np.argsort(rng.random((k, len(idx))), axis=1) < n_i
            codes = rng.integers(0, self.sizes[None, :], size=(k, len(self.sizes)))
            hits += int(np.sum(np.abs(self.stat(first, codes)) >= abs(self.observed) - 1e-9))
        return (1 + hits) / (1 + count)


def _points(author: np.ndarray, solver: np.ndarray, exp_a: np.ndarray, exp_s: np.ndarray) -> np.ndarray:
    """Match points of one model against each third model, summed: `author` (P, cells, 2) net
    and slots of its author half in each (round, third model) cell, `solver` those of the third
    model's half against it, `exp_*` (cells,) whether the design has each half (an expected half
    needs a slot, as in `ratings.match_points`). A half without slots has net 0 and rate 0.

    The per-slot rates are compared by cross-multiplying (slots > 0): net and slots are integers
    or halves (a forfeit's median slot count), so the products are exact and the sign is the
    sign of the rate difference that `ratings.match_points` takes with its 1e-12 tolerance
    (distinct rates over a few hundred slots differ by far more)."""
    a_net, a_cnt = author[..., 0], author[..., 1]
    s_net, s_cnt = solver[..., 0], solver[..., 1]
    a_has, s_has = a_cnt > 0, s_cnt > 0
    sign = np.sign(a_net * np.where(s_has, s_cnt, 1.0) - s_net * np.where(a_has, a_cnt, 1.0))
    present = (a_has | ~exp_a) & (s_has | ~exp_s) & (exp_a | exp_s)
    # 1 / ½ / 0 points for a higher / equal / lower rate: ½ (1 + sign) over the present matches
    return 0.5 * (np.where(present, sign, 0.0).sum(axis=1) + present.sum(axis=1))
