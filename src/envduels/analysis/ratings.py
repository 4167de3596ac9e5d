"""Duel, author and solver ratings: Bradley–Terry with ties as halves, bootstrap over environments.

All three ratings share one machinery. A *comparison builder* turns a matrix of environment
weights (one row per bootstrap draw; the observed data is a row of ones) into a stack of score
matrices `S[b, i, j]` = points of i against j (a win 1, a tie ½). Bradley–Terry is then fitted to
every draw at once by batched Newton steps with a small ridge, warm-started from the observed
fit. Environments are the resampling unit because the episodes inside one environment (seeds,
solvers, conditions) share its difficulty and are not independent; they are resampled within
each author's stratum so every author keeps the number of environments they wrote. The duel
draws its own (`duel_draws`: an author's environments redrawn across its rounds) only to measure
how much its matches depend on each other through them (`duel_overdispersion`); its intervals
are profile-likelihood ones over matches widened by that, its ranks environment rearrangement
tests (`rank_tests.duel_pair_pvalues`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.linalg import null_space
from scipy.special import expit
from scipy.stats import chi2, norm
from scipy.stats import t as student_t

from envduels.analysis._ties import RATING_TOLERANCE, snap
from envduels.analysis.lifts import EnvironmentLifts, environment_lifts
from envduels.analysis.metrics import TablesLike, author_names, solver_names
from envduels.analysis.rank_tests import author_pair_pvalues, duel_pair_pvalues, solver_pair_pvalues
from envduels.analysis.transitivity import duel_edge_pvalues
from envduels.duel.outcomes import Outcome

RIDGE = 0.1
"""Ridge on θ (logit units): the MLE stays finite under perfect separation; prior sd ≈ 3.2."""
ELO_SCALE = 400.0 / np.log(10.0)
ELO_CENTER = 1000.0
"""Ratings are `ELO_CENTER + ELO_SCALE · θ` with θ centred on the mean of the rated models."""


def _bt_objective(s: np.ndarray, theta: np.ndarray, ridge: float) -> np.ndarray:
    """Penalised log-likelihood Σ S_ij log σ(θ_i − θ_j) − ridge/2 Σ θ², one value per draw."""
    d = theta[:, :, None] - theta[:, None, :]
    return (s * -np.logaddexp(0.0, -d)).sum(axis=(1, 2)) - 0.5 * ridge * (theta * theta).sum(axis=1)


def fit_bradley_terry(
    scores: np.ndarray, *, ridge: float = RIDGE, theta0: np.ndarray | None = None, max_iter: int = 100
) -> np.ndarray:
    """Ridge-penalised BT maximum likelihood for a stack of score matrices.

    `scores[b, i, j]` is i's points against j (ties already split in halves); a 2-D matrix is one
    draw. Returns θ of shape (B, n) (or (n,)), each row centred to mean 0. Newton's method with a
    backtracking line search on a strictly concave objective: every accepted step increases the
    objective, so it converges from any start (plain Newton can overshoot on a near-separated
    draw and settle nowhere near the optimum), in a few steps from a warm one.
    """
    single = scores.ndim == 2
    s = scores[None] if single else scores
    B, n, _ = s.shape
    games = s + np.swapaxes(s, 1, 2)
    theta = np.zeros((B, n)) if theta0 is None else np.broadcast_to(theta0, (B, n)).copy()
    eye = np.eye(n)
    value = _bt_objective(s, theta, ridge)
    for _ in range(max_iter):
        p = expit(theta[:, :, None] - theta[:, None, :])
        grad = (s - games * p).sum(axis=2) - ridge * theta
        h = games * p * (1.0 - p)
        hess = h - eye * (h.sum(axis=2)[:, :, None] + ridge)
        step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        t = np.ones(B)
        for _ in range(40):  # halve the step of each draw until its objective does not fall
            trial = theta - t[:, None] * step
            new = _bt_objective(s, trial, ridge)
            worse = new < value - 1e-12 * np.abs(value)
            if not worse.any():
                break
            t = np.where(worse, t / 2.0, t)
        theta, value = trial, new
        if np.max(np.abs(t[:, None] * step)) < 1e-10:
            break
    theta -= theta.mean(axis=1, keepdims=True)
    return theta[0] if single else theta


@dataclass
class Strata:
    """Environments as resampling units: ids and the stratum (author) of each (the bootstrap's
    design; `duel.design.Design` is a tournament's).

    A stratum of one environment cannot vary under resampling (a draw of one out of one is the
    same environment), so it would give every draw the same data and zero-width intervals: such
    strata are pooled into one stratum, and a pool of one joins the smallest other stratum.
    With fewer than two environments nothing can be resampled (`resamplable` is False).
    """

    env_ids: list[str]
    strata: np.ndarray

    def __post_init__(self) -> None:
        strata = np.asarray(self.strata, dtype=int)
        if len(strata):
            _, strata = np.unique(strata, return_inverse=True)
            sizes = np.bincount(strata)
            small = sizes < 2
            if small.any() and not small.all():
                pool = int(np.flatnonzero(small)[0])
                strata = np.where(small[strata], pool, strata)
                sizes = np.bincount(strata, minlength=len(sizes))
                if sizes[pool] < 2:  # the only small stratum: join the smallest other one
                    others = np.flatnonzero((sizes >= 2) & (np.arange(len(sizes)) != pool))
                    strata = np.where(strata == pool, others[np.argmin(sizes[others])], strata)
            elif small.all():
                strata = np.zeros_like(strata)
            _, strata = np.unique(strata, return_inverse=True)
        self.strata = strata

    @property
    def resamplable(self) -> bool:
        """At least two environments: a bootstrap draw can differ from the data."""
        return len(self.env_ids) >= 2

    @property
    def inflation(self) -> float:
        """sqrt(m / (m − 1)) · t₀.₉₇₅(n − H) / z₀.₉₇₅, m the (harmonic) mean stratum size, n the
        environments, H the strata. Resampling m units within a stratum shrinks the variance by
        (m − 1)/m, which the first factor undoes; the second is the small-sample allowance of a
        t interval with the degrees of freedom the stratified design leaves (1.04 at 40
        environments in 5 strata, 1.09 at 20): without it the intervals cover 92–94% at 20–50
        environments (docs/analysis.md)."""
        sizes = np.bincount(self.strata) if len(self.strata) else np.array([])
        sizes = sizes[sizes > 1]
        if not len(sizes):
            return 1.0
        m = float(len(sizes) / np.sum(1.0 / sizes))
        df = int(sizes.sum()) - len(sizes)
        return float(np.sqrt(m / (m - 1)) * student_t.ppf(0.975, df) / norm.ppf(0.975))

    def weights(self, draws: int, rng: np.random.Generator) -> np.ndarray:
        """(draws + 1, n_env) multiplicities; row 0 is the observed data (all ones). Without two
        environments there is nothing to resample: only row 0."""
        if not self.resamplable:
            draws = 0
        w = np.ones((draws + 1, len(self.env_ids)))
        for st in np.unique(self.strata):
            idx = np.flatnonzero(self.strata == st)
            w[1:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1.0 / len(idx)), size=draws)
        return w


def make_strata(tables: TablesLike) -> Strata:
    """Every environment of the run, stratified by author (rounds pooled, so that a run with one
    environment per author and round still has something to resample; authors with a single
    environment share one pooled stratum)."""
    envs = tables.environments
    _, strata = np.unique(envs["author"].astype(str).to_numpy(), return_inverse=True)
    return Strata(list(envs["env_id"]), strata)


def _score(diff: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Points from a signed difference: 1 if > 0, ½ if = 0, 0 if < 0; only where present."""
    return np.where(present, np.where(diff > 1e-12, 1.0, np.where(diff < -1e-12, 0.0, 0.5)), 0.0)


@dataclass
class DuelBuilder:
    """Duels (SPEC §5): per round, a match between A and B adds A-as-author-vs-B and the reverse;
    the side with more points *per slot played* wins, equal rates tie. A half (A's environments
    of the round, solved by B) scores author points minus solver points over its matched pairs,
    divided by their number: a pair that is missing or `error` on one side removes that slot
    without scoring against anyone (summed points made the side with fewer pairs score less, so
    `error` episodes cost a solver its rating). A match is played only when every half the
    design expects (the author wrote environments that round, the other solves) has a slot; a
    solver whose episodes all errored has no match, not a lost one. An invalid environment of A
    gives each panel solver B the win on every pair it would have had: the median number of
    (seed, trial) slots that a solver played on a valid environment of the run. A (seed, trial)
    slot with an `incomplete` episode (the environment broke) is likewise a win for the solver."""

    players: list[str]
    net: np.ndarray  # (n_env, R*n*n): author points minus solver points, placed at (round, author, solver)
    count: np.ndarray  # (n_env, R*n*n): slots (matched pairs and forfeits) placed likewise
    rounds: int
    expected: np.ndarray | None = None  # (R, n, n) bool: the design has a half (round, author, solver)
    env_half: np.ndarray | None = None  # (n_env,) round·n + author of each environment, −1 if unrated

    def _expected(self) -> np.ndarray:
        n, R = len(self.players), self.rounds
        if self.expected is not None:
            return self.expected
        return (self.count.sum(axis=0) > 0).reshape(R, n, n)

    def scores(self, w: np.ndarray) -> np.ndarray:
        """(draws, n, n) match points from environment weights (row = one draw)."""
        n, R = len(self.players), self.rounds
        net = (w @ self.net).reshape(-1, R, n, n)
        cnt = (w @ self.count).reshape(-1, R, n, n)
        return match_points(net, cnt, self._expected())


def match_points(net: np.ndarray, cnt: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Points of each match, summed over rounds: (…, R, n, n) half sums and slot counts at
    (round, author, solver) → (…, n, n). A half's value is its points per slot; a match exists
    when at least one half is expected and every expected half has a slot."""
    n = net.shape[-1]
    has = cnt > 0
    rate = np.where(has, net / np.where(has, cnt, 1.0), 0.0)
    match_net = rate - np.swapaxes(rate, -1, -2)
    exp_t = np.swapaxes(expected, -1, -2)
    present = (has | ~expected) & (np.swapaxes(has, -1, -2) | ~exp_t) & (expected | exp_t)
    present &= ~np.eye(n, dtype=bool)
    return _score(match_net, present).sum(axis=-3)


def duel_builder(tables: TablesLike, pairs: pd.DataFrame, design: Strata) -> DuelBuilder:
    players = list(dict.fromkeys(author_names(tables) + solver_names(tables)))
    index = {p: i for i, p in enumerate(players)}
    envs = tables.environments
    rounds = sorted(envs["round"].unique()) if len(envs) else [1]
    r_index = {r: i for i, r in enumerate(rounds)}
    n, R = len(players), len(rounds)
    env_index = {e: i for i, e in enumerate(design.env_ids)}
    net = np.zeros((len(design.env_ids), R * n * n))
    count = np.zeros_like(net)

    def slot(rnd: object, a: str, s: str) -> int:
        return (r_index[rnd] * n + index[a]) * n + index[s]

    p = pairs[pairs["author"].isin(index) & pairs["solver"].isin(index)]
    p = p.assign(pt=np.where((p["y0"] == 0) & (p["yh"] == 1), 1, np.where(p["y0"] == 1, -1, 0)))
    per = p.groupby(["env_id", "solver"]).agg(pt=("pt", "sum"), k=("pt", "size")).reset_index()
    env_round = dict(zip(envs["env_id"], envs["round"], strict=False))
    env_author = dict(zip(envs["env_id"], envs["author"], strict=False))
    for e, s, pt, k in per.itertuples(index=False):
        if e in env_index:
            col = slot(env_round[e], env_author[e], s)
            net[env_index[e], col] += pt
            count[env_index[e], col] += k
    played = tables.episodes[~tables.episodes["self_play"].astype(bool)]
    # an incomplete episode is the environment's fault (SPEC §4): its (seed, trial) slot is a
    # solver win, like a forfeit, so an environment that crashes where the solver would win
    # does not escape the loss (solver metrics still leave such pairs out)
    broken = played[played["outcome"] == Outcome.INCOMPLETE][["env_id", "solver", "seed", "trial"]].drop_duplicates()
    for (e, s), k in broken.groupby(["env_id", "solver"]).size().items():
        if e in env_index and s in index and env_author.get(e) in index:
            col = slot(env_round[e], env_author[e], s)
            net[env_index[e], col] -= k
            count[env_index[e], col] += k
    slots = played[["env_id", "solver", "seed", "trial"]].drop_duplicates().groupby(["env_id", "solver"]).size()
    typical = float(slots.median()) if len(slots) else 1.0
    solvers = solver_names(tables)
    expected = np.zeros((R, n, n), dtype=bool)
    solver_idx = [index[s] for s in solvers if s in index]
    for row in envs.itertuples(index=False):
        if row.author in index and row.env_id in env_index:
            expected[r_index[row.round], index[row.author], solver_idx] = True
    expected[:, np.arange(n), np.arange(n)] = False
    for row in envs[~envs["valid"].astype(bool)].itertuples(index=False):
        if row.author not in index:
            continue
        for s in solvers:
            if s != row.author and s in index:
                col = slot(row.round, row.author, s)
                net[env_index[row.env_id], col] -= typical
                count[env_index[row.env_id], col] += typical
    env_half = np.full(len(design.env_ids), -1)
    for row in envs.itertuples(index=False):
        if row.author in index and row.env_id in env_index:
            env_half[env_index[row.env_id]] = r_index[row.round] * n + index[row.author]
    return DuelBuilder(players, net, count, R, expected, env_half)


def duel_draws(b: DuelBuilder, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Environment bootstrap of the duel: (draws + 1, n, n) match points (row 0 observed) and the
    (draws + 1, R, n, n) slot counts. Each environment position of an author (its round kept) is
    refilled by one of that author's environments drawn with replacement from all its rounds,
    carrying its results against every solver. Rounds are pooled because a round with one
    environment per author (9 × 1 × 2) could not vary otherwise, and every one of an author's
    matches in a round rests on those few environments: it is their draw that moves a duel."""
    n, R = len(b.players), b.rounds
    half = b.env_half if b.env_half is not None else np.full(len(b.net), -1)
    rows = np.flatnonzero(half >= 0)
    cols = half[rows][:, None] * n + np.arange(n)[None, :]
    net_e = b.net[rows[:, None], cols]  # (m, n): each environment's half against each solver
    cnt_e = b.count[rows[:, None], cols]
    author = half[rows] % n
    pick = np.tile(np.arange(len(rows)), (draws + 1, 1))
    for a in np.unique(author):
        own = np.flatnonzero(author == a)
        if len(own) > 1:
            pick[1:, own] = own[rng.integers(0, len(own), size=(draws, len(own)))]
    place = np.zeros((len(rows), R * n))
    place[np.arange(len(rows)), half[rows]] = 1.0
    net = np.einsum("bpn,pq->bqn", net_e[pick], place).reshape(-1, R, n, n)
    cnt = np.einsum("bpn,pq->bqn", cnt_e[pick], place).reshape(-1, R, n, n)
    return match_points(net, cnt, b._expected()), cnt


def duel_overdispersion(stacked: np.ndarray, theta: np.ndarray, keep: np.ndarray) -> float:
    """How much the environments shared by a model's matches widen its duel rating: the trace
    of the sandwich I⁻¹ Cov*(U) I⁻¹ over the trace of the same with the matches independent
    (each pair's own bootstrap variance, no covariance), at least 1. U is the BT score at the
    fit, Σ_j (S_ij − G_ij p_ij), per environment-bootstrap draw (`duel_draws`); the bootstrap's
    shrinkage of each match's variance cancels in the ratio, the dependence does not."""
    if stacked.shape[0] < 3 or len(keep) < 2:
        return 1.0
    s = stacked[:, keep][:, :, keep]
    g = s + np.swapaxes(s, 1, 2)
    p = expit(theta[:, None] - theta[None, :])
    resid = s[1:] - g[1:] * p  # (B, k, k)
    u = resid.sum(axis=2)
    info = np.linalg.pinv(_laplacian(g[0] * p * (1.0 - p)), hermitian=True)
    cov = np.cov(u, rowvar=False)
    iu, ju = np.triu_indices(len(keep), 1)
    var_pair = resid[:, iu, ju].var(axis=0, ddof=1)
    x = np.zeros((len(iu), len(keep)))
    x[np.arange(len(iu)), iu], x[np.arange(len(iu)), ju] = 1.0, -1.0
    ind = (x * var_pair[:, None]).T @ x
    num, den = np.trace(info @ cov @ info), np.trace(info @ ind @ info)
    return float(max(1.0, num / den)) if den > 0 else 1.0


@dataclass
class AuthorBuilder:
    """Author vs author on each common panel solver s: the higher lift on s wins.

    The solver axis holds every solver of the run, solver-only players included (a run where
    three authors write for one target model compares the authors on that model alone); s is
    a common panel solver of a and a′ when s ∉ {a, a′} and both have matched pairs with s.
    """

    players: list[str]
    solvers: list[str]
    num: np.ndarray  # (n_env, n_authors*n_solvers): Σ (yh − y0) placed at (author, solver)
    den: np.ndarray  # matched pairs likewise
    same: np.ndarray  # (n_authors, n_solvers) bool: the solver is the author

    def scores(self, w: np.ndarray, budget: int = 1 << 22) -> np.ndarray:
        # (draws, n, n, m) boolean intermediates: as many draws at a time as keep them near
        # `budget` elements (4 MiB each), so memory grows with the model pairs, not their cube
        # (a fixed 128 draws held 1 GiB per float intermediate at 100 models)
        chunk = max(1, budget // max(1, len(self.players) ** 2 * len(self.solvers)))
        return np.concatenate([self._scores(w[k : k + chunk]) for k in range(0, len(w), chunk)])

    def _scores(self, w: np.ndarray) -> np.ndarray:
        n, m = len(self.players), len(self.solvers)
        num = (w @ self.num).reshape(-1, n, m)
        den = (w @ self.den).reshape(-1, n, m)
        has = den > 0
        lift = np.where(has, num / np.where(has, den, 1.0), 0.0)
        # (a, a', s) pairs that may compare: two different authors, neither of them the solver
        allowed = ~np.eye(n, dtype=bool)[:, :, None] & ~self.same[:, None, :] & ~self.same[None, :, :]
        present = has[:, :, None, :] & has[:, None, :, :] & allowed[None]  # (B, a, a', s)
        # `_score` summed over solvers, on booleans compared in place (no (B, a, a', s) floats)
        above = lift[:, :, None, :] > (lift + 1e-12)[:, None, :, :]
        below = lift[:, :, None, :] < (lift - 1e-12)[:, None, :, :]
        wins = (present & above).sum(axis=3)
        level = (present & ~(above | below)).sum(axis=3)
        return wins + 0.5 * level


def author_builder(tables: TablesLike, pairs: pd.DataFrame, design: Strata) -> AuthorBuilder:
    players = author_names(tables)
    solvers = list(dict.fromkeys(solver_names(tables) + list(pairs["solver"].unique())))
    a_index = {p: i for i, p in enumerate(players)}
    s_index = {p: i for i, p in enumerate(solvers)}
    n, m = len(players), len(solvers)
    env_index = {e: i for i, e in enumerate(design.env_ids)}
    num = np.zeros((len(design.env_ids), n * m))
    den = np.zeros_like(num)
    p = pairs[pairs["author"].isin(a_index) & pairs["solver"].isin(s_index)]
    per = p.assign(d=p["yh"] - p["y0"]).groupby(["env_id", "author", "solver"])["d"].agg(["sum", "size"])
    for (e, a, s), row in per.iterrows():
        if e in env_index:
            num[env_index[e], a_index[a] * m + s_index[s]] += row["sum"]
            den[env_index[e], a_index[a] * m + s_index[s]] += row["size"]
    same = np.array([[a == s for s in solvers] for a in players], dtype=bool).reshape(n, m)
    return AuthorBuilder(players, solvers, num, den, same)


@dataclass
class SolverBuilder:
    """Solver vs solver on each common environment: the higher no-hint success rate wins."""

    players: list[str]
    points: np.ndarray  # (n_env, n*n): per environment, points of i against j

    def scores(self, w: np.ndarray) -> np.ndarray:
        n = len(self.players)
        return (w @ self.points).reshape(-1, n, n)


def solver_builder(tables: TablesLike, pairs: pd.DataFrame, design: Strata) -> SolverBuilder:
    players = solver_names(tables)
    index = {p: i for i, p in enumerate(players)}
    n = len(players)
    env_index = {e: i for i, e in enumerate(design.env_ids)}
    points = np.zeros((len(design.env_ids), n * n))
    rates = pairs[pairs["solver"].isin(index)].groupby(["env_id", "solver"])["y0"].mean().unstack("solver")
    for e, row in rates.iterrows():
        if e not in env_index:
            continue
        r = np.full(n, np.nan)
        for s, v in row.dropna().items():
            r[index[s]] = v
        played = ~np.isnan(r)
        present = played[:, None] & played[None, :] & ~np.eye(n, dtype=bool)
        points[env_index[e]] = _score(np.nan_to_num(r[:, None] - r[None, :]), present).ravel()
    return SolverBuilder(players, points)


LEVEL = 0.95
"""Nominal level of every rating interval and of the family-wise rank rule."""
PROFILE_REACH = 10.0
"""Logits (≈ 1,700 Elo) from the estimate within which a profile bound is searched; a bound
further out is reported as open (null), like the bound of a model that won every match."""
MIN_AUTHOR_ENVS = 4
DUEL_RANK_TEST_MAX_MODELS = 40
"""Above this many duellists the duel's environment rearrangement rank test is not run (its
pairs grow with the square of the models, each a test of its own: at 100 models it ran for more
than five minutes of CPU); intervals are still given, and the rank note says why ranks are not."""
"""Environments (with matched pairs) every author needs for author intervals: an author's lift
on a solver cannot vary when its only environment is redrawn, and with two per author (9 × 1 × 2)
the intervals covered 0.88 (docs/analysis.md, coverage table)."""


def _laplacian(w: np.ndarray) -> np.ndarray:
    """The information matrix of BT from pair weights w = games · p(1 − p): diag(Σ w) − w."""
    return np.eye(w.shape[-1]) * w.sum(axis=-1)[..., None, :] - w


def bt_covariance(scores: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Inverse Fisher information of θ (pseudo-inverse: θ is identified up to a constant), so
    var(θ_i − θ_j) = C_ii + C_jj − 2 C_ij."""
    games = scores + scores.T
    p = expit(theta[:, None] - theta[None, :])
    return np.linalg.pinv(_laplacian(games * p * (1.0 - p)), hermitian=True)


def fit_firth(scores: np.ndarray, *, max_iter: int = 200, tol: float = 1e-9) -> np.ndarray:
    """Bias-reduced Bradley–Terry (Firth 1993): the maximiser of the likelihood penalised by
    ½ log det I(θ), the Jeffreys prior. Always finite, also for a model that won or lost every
    match, and with O(1/n²) instead of O(1/n) bias. Computed as for logistic regression: each
    pair gets half its hat value h_ij added to both sides' points, refitted until the hat values
    settle. Returns θ (n,) centred to mean 0 (models without a game stay at 0)."""
    n = len(scores)
    games = scores + scores.T
    rated = games.sum(axis=1) > 0
    theta = np.zeros(n)
    keep = np.flatnonzero(rated)
    if len(keep) < 2:
        return theta
    s, g = scores[np.ix_(keep, keep)], games[np.ix_(keep, keep)]
    th = np.zeros(len(keep))
    for _ in range(max_iter):
        p = expit(th[:, None] - th[None, :])
        w = g * p * (1.0 - p)
        cov = np.linalg.pinv(_laplacian(w), hermitian=True)
        d = np.diag(cov)
        h = w * (d[:, None] + d[None, :] - 2.0 * cov)  # hat value of each pair (symmetric)
        new = fit_bradley_terry(s + h / 2.0, ridge=1e-8, theta0=th)
        done = np.max(np.abs(new - th)) < tol
        th = new
        if done:
            break
    theta[keep] = th - th.mean()
    return theta


def _firth_value_grad(s: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Jeffreys-penalised BT log-likelihood ℓ + ½ log det I and its gradient, per problem.

    I = L(w), the Laplacian of pair weights w = games · p(1 − p), has one zero eigenvalue (the
    common constant); det of L + 11ᵀ/n is the product of the others. ∂/∂θ_k ½ log det I =
    ½ Σ_j ∂w_kj/∂d · r_kj with r the effective resistances of L⁺ and ∂w/∂d = w(1 − 2p)."""
    n = theta.shape[-1]
    games = s + np.swapaxes(s, 1, 2)
    d = theta[:, :, None] - theta[:, None, :]
    p = expit(d)
    w = games * np.maximum(p * (1.0 - p), 1e-12)  # far out: keep the information invertible
    a = _laplacian(w) + 1.0 / n
    _, logdet = np.linalg.slogdet(a)
    r = np.linalg.inv(a) - 1.0 / n
    dg = np.diagonal(r, axis1=1, axis2=2)
    resist = dg[:, :, None] + dg[:, None, :] - 2.0 * r
    loglik = (s * -np.logaddexp(0.0, -d)).sum(axis=(1, 2))
    grad = (s - games * p).sum(axis=2) + 0.5 * (w * (1.0 - 2.0 * p) * resist).sum(axis=2)
    return loglik + 0.5 * logdet, grad, w * resist


def profile_bounds(scores: np.ndarray, *, level: float = LEVEL, reach: float = PROFILE_REACH,
                   scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Profile penalised-likelihood interval of each θ_i − mean(θ) (Heinze & Schemper 2002):
    the values w whose constrained maximum of the Jeffreys-penalised BT likelihood (ties as
    halves) stays within χ²₁(level)/2 of its maximum, the Firth fit. The penalty keeps every
    bound finite where the plain likelihood has none (a model that won every match, and then
    everyone's centred value, since the centre moves with that model); a side whose bound lies
    beyond `reach` logits is NaN, an open bound. All n models must have played; returns
    (low, high) in logits on the centred scale. `scale` multiplies the critical value (a
    quasi-likelihood interval: the deviance divided by an overdispersion factor).

    Each side's bound is a root of D(w) = χ²₁ with D the profile deviance; D′(w) = −2 ∇ℓ*·u at
    the constrained optimum (envelope theorem), so a safeguarded Newton iteration in w, with a
    warm-started constrained fit inside (Newton steps on the plain likelihood's Hessian, step
    halving on the penalised value), finds all 2n bounds at once."""
    n = len(scores)
    crit = float(chi2.ppf(level, 1)) * scale
    top = fit_firth(scores)
    l_sup = float(_firth_value_grad(scores[None], top[None])[0][0])
    center = np.eye(n) - 1.0 / n
    basis = np.stack([null_space(center[i][None]) for i in range(n)])  # (n, n, n−1)
    unit = center / np.einsum("ij,ij->i", center, center)[:, None]
    K = 2 * n
    idx = np.tile(np.arange(n), 2)
    sign = np.repeat([-1.0, 1.0], n)
    P, u = basis[idx], unit[idx]
    PT = np.swapaxes(P, 1, 2)
    s = np.broadcast_to(scores, (K, n, n))
    games = s + np.swapaxes(s, 1, 2)
    eye = np.eye(n)
    eps = 1e-9  # only fixes the free constant direction

    def solve(w: np.ndarray, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Constrained maximum at θ_i − mean = w: (φ, deviance, dD/dw)."""
        th = w[:, None] * u + (P @ phi[:, :, None])[:, :, 0]
        value, g, hat = _firth_value_grad(s, th)
        value = value - 0.5 * eps * (phi * phi).sum(axis=1)
        for _ in range(60):
            # Hessian of the pseudo-data likelihood (each pair's games plus its hat value): the
            # Firth iteration's own curvature, close to the penalised one
            p = expit(th[:, :, None] - th[:, None, :])
            h = (games + hat) * p * (1.0 - p)
            hess = PT @ (h - eye * h.sum(axis=2)[:, None, :]) @ P - eps * np.eye(n - 1)
            grad = (PT @ g[:, :, None])[:, :, 0] - eps * phi
            step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
            t = np.ones(K)
            for _ in range(30):  # halve until no problem's value falls
                trial = phi - t[:, None] * step
                th_t = w[:, None] * u + (P @ trial[:, :, None])[:, :, 0]
                new, g_t, hat_t = _firth_value_grad(s, th_t)
                new = new - 0.5 * eps * (trial * trial).sum(axis=1)
                worse = new < value - 1e-13 * np.abs(value)
                if not worse.any():
                    break
                t = np.where(worse, t / 2.0, t)
            phi, value, th, g, hat = trial, new, th_t, g_t, hat_t
            if np.max(np.abs(t[:, None] * step)) < 1e-6:
                break
        dev = 2.0 * (l_sup - _firth_value_grad(s, th)[0])
        return phi, dev, -2.0 * (g * u).sum(axis=1)

    w_hat = top[idx]
    phi = np.einsum("n,knm->km", top, P)
    far = w_hat + sign * reach
    # D < crit at `inner`; `outer` is taken as ≥ crit until seen otherwise (a bound that ends
    # at `far` is open)
    inner, outer = w_hat.copy(), far.copy()
    w = w_hat + sign * 2.0 * np.sqrt(np.maximum(np.diag(bt_covariance(scores, top))[idx], 1e-6))
    w = np.where((w - inner) * (outer - w) > 0, w, (inner + outer) / 2.0)
    for _ in range(50):
        phi, dev, slope = solve(w, phi)
        beyond = dev >= crit
        outer = np.where(beyond, w, outer)
        inner = np.where(beyond, inner, w)
        with np.errstate(divide="ignore", invalid="ignore"):
            nxt = w + (crit - dev) / slope
        bad = ~np.isfinite(nxt) | ((nxt - inner) * (outer - nxt) <= 0)
        nxt = np.where(bad, (inner + outer) / 2.0, nxt)
        done = (np.abs(dev - crit) < 1e-4) | (np.abs(outer - inner) < 1e-4)
        if done.all():
            break
        w = np.where(done, w, nxt)
    open_ = np.abs(w - far) < 1e-3
    bound = np.where(open_, np.nan, w)
    return bound[:n], bound[n:]


@dataclass
class Rating:
    """One rating kind: observed scores, the fitted and bootstrapped θ, and report rows.

    `interval` names how the rows' intervals were made ("profile likelihood", "bootstrap" or
    "none"); `note` says why a rating has no intervals (and then no ranks), else None.
    `above[i, j]` is True when i is distinguishably above j under the family-wise rank rule."""

    kind: str
    players: list[str]
    scores: np.ndarray  # (n, n) observed points
    theta: np.ndarray  # (n,) observed fit, centred over rated players
    draws: np.ndarray  # (B, n) bootstrap fits, centred likewise
    rated: np.ndarray  # (n,) bool: took part in at least one comparison
    rows: list[dict[str, Any]] = field(default_factory=list)
    score_draws: np.ndarray | None = None  # (B, n, n) the bootstrap draws' score matrices
    interval: str = "bootstrap"
    note: str | None = None
    above: np.ndarray | None = None
    rank_note: str | None = None  # why ranks are withheld while intervals are given (`duel_rank_note`)
    edge_p: np.ndarray | None = None  # duel only: one-sided p that i beats j (`duel_edge_pvalues`)
    pair_p: np.ndarray | None = None  # the rank test's p-values, as `holm_above` reads them (None: no test)
    lifts: EnvironmentLifts | None = None  # author only: each environment's lift per solver (`analysis.lifts`)
    overdispersion: float = 1.0  # duel only: the factor its profile intervals were widened by
    tie_rate: float = 0.0  # duel only: share of matches that ended level

    def elo(self, theta: np.ndarray) -> np.ndarray:
        return ELO_CENTER + ELO_SCALE * theta

    def by_model(self) -> dict[str, dict[str, Any]]:
        return {r["model"]: r for r in self.rows}


def holm_above(
    diff: np.ndarray, se: np.ndarray, keep: np.ndarray, level: float = LEVEL, *, p: np.ndarray | None = None
) -> np.ndarray:
    """The family-wise rank rule: Holm's step-down over every pair of rated models, each pair
    tested by z = (θ_i − θ_j)/se_ij (two-sided), or by the given two-sided p-values: `p[i, j]`
    where the test's own statistic favours i, NaN where it favours j (then a claim in θ̂'s order
    would contradict the test: not testable) or the pair cannot be tested. Returns above[i, j] = i is distinguishably above j (the order is the
    sign of `diff`); the chance of any false claim among all pairs is at most 1 − `level`. A
    pair with no finite positive standard error (or no p-value) is never distinguished."""
    n = len(diff)
    diff = np.where(np.abs(diff) <= RATING_TOLERANCE, 0.0, diff)  # a tie is never ordered (_ties.py)
    above = np.zeros((n, n), dtype=bool)
    pairs = [(i, j) for a, i in enumerate(keep) for j in keep[a + 1:]]
    if p is None:
        ok = [(i, j) for i, j in pairs if np.isfinite(se[i, j]) and se[i, j] > 0]
        pv = np.array([2.0 * norm.sf(abs(diff[i, j]) / se[i, j]) for i, j in ok])
    else:  # p[i, j] is given where the test's statistic favours i: a claim must agree with θ̂
        directed = [(i, j, p[i, j] if diff[i, j] > 0 else p[j, i] if diff[i, j] < 0 else np.nan) for i, j in pairs]
        ok = [(i, j) for i, j, v in directed if np.isfinite(v)]
        pv = np.array([v for _, _, v in directed if np.isfinite(v)])
    if not ok:
        return above
    m = len(pairs)  # untestable pairs still count in the family: never a looser threshold
    for rank, k in enumerate(np.argsort(pv, kind="stable")):
        if pv[k] > (1.0 - level) / (m - rank):
            break
        i, j = ok[k]
        if diff[i, j] > 0:
            above[i, j] = True
        elif diff[i, j] < 0:
            above[j, i] = True
    return above


def _rows(rating: Rating, lo: np.ndarray, hi: np.ndarray, notes: list[str | None], ranked: bool) -> list[dict[str, Any]]:
    players, keep = rating.players, np.flatnonzero(rating.rated)
    games = rating.scores + rating.scores.T
    elo = rating.elo(rating.theta)
    above = rating.above if rating.above is not None else np.zeros((len(players), len(players)), bool)
    rows: list[dict[str, Any]] = []
    for i in keep:
        up = [players[j] for j in keep if above[j, i]]
        down = [players[j] for j in keep if above[i, j]]
        rows.append(
            {
                "model": players[i],
                "rating": float(elo[i]),
                "ci_low": None if np.isnan(lo[i]) else float(lo[i]),
                "ci_high": None if np.isnan(hi[i]) else float(hi[i]),
                "ci_note": notes[i],
                # rank = 1 + the models distinguishably above (family-wise, see holm_above)
                "rank": 1 + len(up) if ranked else None,
                "above": down if ranked else None,
                "below": up if ranked else None,
                "tied_with": [players[j] for j in keep if j != i and players[j] not in up + down] if ranked else None,
                "points": float(rating.scores[i].sum()),
                "games": float(games[i].sum()),
            }
        )
    rows.sort(key=lambda r: (r["rank"] or 0, -r["rating"], str(r["model"])))  # ratings are snapped: ties by name
    return rows


def _rate(
    kind: str,
    players: list[str],
    stacked: np.ndarray,
    ridge: float,
    inflation: float = 1.0,
    *,
    note: str | None = None,
    pair_p: np.ndarray | None = None,
    bias_allowance: bool = False,
) -> Rating:
    """Fit observed and bootstrap scores; 95% *percentile* bootstrap intervals (q2.5, q97.5) of
    the ridge-penalised fits, each side's distance from θ̂ multiplied by `inflation` (see
    `Strata.inflation`), and never excluding θ̂ itself. Ranks by `holm_above` with the pairwise
    differences' bootstrap standard errors (times `inflation`), or with the two-sided p-values
    `pair_p` where given (`solver_pair_pvalues`). With `note` (why no honest interval exists for
    this design) the rows carry no interval and no rank. With `bias_allowance` each bound moves
    out by |mean of the draws − θ̂|, the bootstrap's measure of how far the fit's nonlinearity
    moves a strength (the author rating: see `compute_ratings`).

    Percentile, not basic (2θ̂ − q): under near-separation the bootstrap distribution is skewed
    against a bound (a model that lost every match cannot lose more in a draw), and reflecting it
    through θ̂ puts the interval where no draw ever was. Percentile bounds stay inside the range of
    the ridge-penalised draws."""
    n = len(players)
    games = stacked[0] + stacked[0].T
    rated = games.sum(axis=1) > 0
    keep = np.flatnonzero(rated)
    theta = np.zeros(n)
    draws = np.zeros((stacked.shape[0] - 1, n))
    if len(keep) >= 2:
        sub = stacked[:, keep][:, :, keep]
        obs = snap(fit_bradley_terry(sub[0], ridge=ridge))  # tied strengths identical (_ties.py)
        theta[keep] = obs
        if len(sub) > 1:
            fit = fit_bradley_terry(sub[1:], ridge=ridge, theta0=obs)
            # a model absent from a draw (all its environments left out) says nothing there:
            # NaN, and the draw is centred over the models it does contain
            absent = (sub[1:] + np.swapaxes(sub[1:], 1, 2)).sum(axis=2) == 0
            fit[absent] = np.nan
            present = (~absent).sum(axis=1, keepdims=True)
            draws[:, keep] = fit - np.nansum(fit, axis=1, keepdims=True) / np.maximum(present, 1)
    rating = Rating(kind, players, stacked[0], theta, draws, rated, score_draws=stacked[1:])
    lo = hi = np.full(n, np.nan)
    if note is None and draws.shape[0] == 0:
        note = "fewer than two environments: nothing to resample, so no interval and no rank"
    if len(keep) >= 2 and note is None:
        with warnings.catch_warnings():  # a model absent from every draw: NaN, no interval
            warnings.simplefilter("ignore", RuntimeWarning)
            q_lo, q_hi = np.nanpercentile(draws, [2.5, 97.5], axis=0)
            diffs = draws[:, :, None] - draws[:, None, :]
            se = inflation * np.nanstd(diffs, axis=0, ddof=1)
            shift = np.abs(np.nanmean(draws, axis=0) - theta) if bias_allowance else np.zeros(n)
        lo = rating.elo(np.minimum(theta, theta - inflation * (theta - q_lo)) - shift)
        hi = rating.elo(np.maximum(theta, theta + inflation * (q_hi - theta)) + shift)
        rating.above = holm_above(theta[:, None] - theta[None, :], se, keep, p=pair_p)
        rating.pair_p = pair_p
    rating.interval = "bootstrap" if note is None else "none"
    rating.note = note
    rating.rows = _rows(rating, lo, hi, [None] * n, note is None) if len(keep) >= 2 else []
    return rating


def _rate_duel(players: list[str], stacked: np.ndarray, ridge: float, *, builder: DuelBuilder | None = None,
               rank_note: str | None = None, seed: int = 0) -> Rating:
    """The duel rating: the bias-reduced (Firth) fit; profile-likelihood intervals widened by the
    environments' overdispersion (`duel_overdispersion`, from `stacked`, the `duel_draws`); ranks
    from environment rearrangement tests (`duel_pair_pvalues`) under Holm, unless `rank_note`
    says why the design cannot support them.

    A match is one bit, and an author's matches of a round all rest on the same environments:
    treating matches as independent gave intervals covering 0.76–0.87 on uneven environments,
    and a Wald test ordered two models whose two environments everybody solved. The matches
    stay the units of the fit (so a model that won (lost) every match gets an open upper (lower)
    bound, which no resampling of environments can give), the environments carry the variance.
    Without `builder` (a bare score stack) there is no environment to test ranks over."""
    rating = _rate("duel", players, stacked, ridge)
    keep = np.flatnonzero(rating.rated)
    n = len(players)
    if len(keep) < 2:
        return rating
    s = stacked[0][np.ix_(keep, keep)]
    theta = np.zeros(n)
    theta[keep] = snap(fit_firth(s))  # tied strengths identical (_ties.py)
    rating.theta = theta
    rating.overdispersion = duel_overdispersion(stacked, theta[keep], keep)
    lo_t, hi_t = profile_bounds(s, scale=rating.overdispersion * _cluster_allowance(builder))
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    lo[keep] = rating.elo(np.minimum(lo_t, theta[keep]))
    hi[keep] = rating.elo(np.maximum(hi_t, theta[keep]))
    lo[keep] = np.where(np.isnan(lo_t), np.nan, lo[keep])
    hi[keep] = np.where(np.isnan(hi_t), np.nan, hi[keep])
    games = s + s.T
    notes: list[str | None] = [None] * n
    for a, i in enumerate(keep):
        won, total = s[a].sum(), games[a].sum()
        side = "won" if won >= total else "lost" if won <= 0 else None
        # the data put no limit on how much stronger (weaker) such a model is: only the Jeffreys
        # penalty makes that bound finite, so it is reported open
        if side == "won":
            hi[i] = np.nan
        elif side == "lost":
            lo[i] = np.nan
        if np.isnan(lo[i]) or np.isnan(hi[i]):
            which = "upper" if np.isnan(hi[i]) else "lower"
            notes[i] = (f"{side} every match: no finite {which} bound" if side
                        else f"the {which} bound lies beyond ±{PROFILE_REACH * ELO_SCALE:.0f} Elo")
    if builder is None:
        rank_note = rank_note or "no environments behind the matches were given, so no rank test"
    elif n > DUEL_RANK_TEST_MAX_MODELS:
        rank_note = rank_note or (f"the duel rank test is limited to {DUEL_RANK_TEST_MAX_MODELS} "
                                  f"models and this run has {n}: intervals are given, ranks are "
                                  "not; report a subset of the models' episodes for ranks")
    elif stacked.shape[0] > 1:  # no draws (bootstrap = 0): the cheap refit of a caller, no rank test
        # (run where the design withholds ranks too: the coverage bench measures the test alone)
        b = builder
        half = b.env_half if b.env_half is not None else np.full(len(b.net), -1)
        rating.pair_p = duel_pair_pvalues(b.net, b.count, half, b._expected(), b.rounds, n, seed=seed)
        rating.above = holm_above(theta[:, None] - theta[None, :], np.zeros((n, n)), keep, p=rating.pair_p)
    else:
        rank_note = rank_note or "no bootstrap draws were made (bootstrap = 0), so no rank test"
    if rank_note is not None:
        rating.above = None
    rating.interval = "profile likelihood"
    rating.note = None
    rating.rank_note = rank_note
    rating.rows = _rows(rating, lo, hi, notes, rank_note is None)
    return rating


def author_env_counts(pairs: pd.DataFrame) -> dict[str, int]:
    """Environments with at least one matched pair, per author (rounds pooled)."""
    if pairs.empty:
        return {}
    return {str(a): int(k) for a, k in pairs.groupby("author")["env_id"].nunique().items()}


def _cluster_allowance(b: DuelBuilder | None) -> float:
    """t²₀.₉₇₅(G − 1) / χ²₁(0.95), G the author-rounds with environments (the clusters whose shared
    environments make matches dependent): an interval whose variance is estimated from G clusters
    takes the t critical value of G − 1 degrees of freedom (Cameron & Miller 2015), 1.38 at
    9 × 10 × 1 (9 clusters), 1.16 at 9 × 1 × 2 (18). 1 without environments (a bare score stack)."""
    if b is None or b.env_half is None:
        return 1.0
    g = len(np.unique(b.env_half[b.env_half >= 0]))
    if g < 2:
        return 1.0
    return float(student_t.ppf(0.5 + LEVEL / 2, g - 1) ** 2 / chi2.ppf(LEVEL, 1))


def duel_rank_note(tables: TablesLike, pairs: pd.DataFrame) -> str | None:
    """Why duel ranks are withheld, or None: when an author wrote fewer than `MIN_AUTHOR_ENVS`
    environments with results, each of its matches rests on those few environments, and a rank
    claim about it would be a claim about them (at 9 × 1 × 2 a Wald test ordered two models in
    13% of tournaments of identical players, because their two environments happened to be ones
    everybody solves)."""
    counts = author_env_counts(pairs)
    short = sorted(a for a in author_names(tables) if 0 < counts.get(a, 0) < MIN_AUTHOR_ENVS)
    if not short:
        return None
    return (f"{len(short)} author(s) ({', '.join(short[:3])}{', ...' if len(short) > 3 else ''}) wrote fewer than "
            f"{MIN_AUTHOR_ENVS} environments with results: every duel match of an author rests on them, too few "
            "to tell a model's strength from its environments' luck; write more environments per author")


def compute_ratings(
    tables: TablesLike,
    pairs: pd.DataFrame,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    ridge: float = RIDGE,
    kinds: tuple[str, ...] = ("duel", "author", "solver"),
) -> dict[str, Rating]:
    """The duel, author and solver ratings with `bootstrap` environment-resampling draws each.

    All three use the same draws, so per-draw statistics across them (the divergence
    correlation) are valid bootstrap replicates too. Duel intervals are profile-likelihood
    intervals over matches (`_rate_duel`); author and solver intervals come from the draws.
    Author intervals need every rated author to have `MIN_AUTHOR_ENVS` environments, and carry a
    bias allowance (each bound moved out by |draws' mean − estimate|). Solver ranks come from
    exact sign-flip tests over common environments (`solver_pair_pvalues`), duel ranks from
    environment rearrangement tests (`duel_pair_pvalues`), author ranks from permutation tests of
    environments between the two authors on their mean environment lift (`author_pair_pvalues`),
    all under Holm. The author rating carries its environments' lifts (`Rating.lifts`), which
    the divergence test reads. `kinds` limits the ratings built (the same draws either way: a
    simulation that needs only the author and solver ratings skips the duel's rank test).
    """
    design = make_strata(tables)
    w = design.weights(bootstrap, np.random.default_rng(seed))
    make: dict[str, Callable[[TablesLike, pd.DataFrame, Strata], DuelBuilder | AuthorBuilder | SolverBuilder]] = {
        "duel": duel_builder, "author": author_builder, "solver": solver_builder}
    builders = {k: make[k](tables, pairs, design) for k in kinds}
    out = {}
    for kind, b in builders.items():
        if not b.players:
            out[kind] = Rating(kind, [], np.zeros((0, 0)), np.zeros(0), np.zeros((bootstrap, 0)), np.zeros(0, bool),
                               interval="none", note="no models in this role")
            continue
        if isinstance(b, DuelBuilder):
            stacked, _ = duel_draws(b, bootstrap if design.resamplable else 0, np.random.default_rng(seed + 1))
            duel = _rate_duel(b.players, stacked, ridge, builder=b, rank_note=duel_rank_note(tables, pairs), seed=seed)
            n, R = len(b.players), b.rounds
            duel.edge_p = duel_edge_pvalues(b.net, b.count, R, n, seed=seed)
            net = b.net.sum(axis=0).reshape(R, n, n)
            played = (b.count.sum(axis=0).reshape(R, n, n) > 0)
            played = played | np.swapaxes(played, 1, 2)
            match = (net - np.swapaxes(net, 1, 2))[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]]
            met = played[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]]
            duel.tie_rate = float(np.mean(np.abs(match[met]) < 1e-12)) if met.any() else 0.0
            out[kind] = duel
            continue
        stacked = b.scores(w)
        note = None
        if bootstrap <= 0 and design.resamplable:
            note = "no bootstrap draws were made (bootstrap = 0), so no interval and no rank"
        elif kind == "author":
            counts = author_env_counts(pairs)
            games = stacked[0] + stacked[0].T
            short = sorted(p for i, p in enumerate(b.players) if games[i].sum() > 0 and counts.get(p, 0) < MIN_AUTHOR_ENVS)
            if short:
                note = (f"{len(short)} author(s) ({', '.join(short[:3])}{', ...' if len(short) > 3 else ''}) wrote fewer "
                        f"than {MIN_AUTHOR_ENVS} environments with results: an author's lift cannot vary within its "
                        "own work, so no honest interval or rank exists; write more environments per author")
        pair_p = None
        lifts = None
        if isinstance(b, AuthorBuilder):
            env_author = dict(zip(tables.environments["env_id"], tables.environments["author"], strict=False))
            index = {a: k for k, a in enumerate(b.players)}
            lifts = environment_lifts(b.players, b.solvers, [index.get(str(env_author.get(e)), -1) for e in design.env_ids],
                                      b.num, b.den)
        if isinstance(b, SolverBuilder) and note is None and design.resamplable:
            pair_p = solver_pair_pvalues(b.points, len(b.players), seed=seed)
        elif lifts is not None and note is None and design.resamplable:
            pair_p = author_pair_pvalues(lifts, seed=seed)
        # an author comparison keeps only the sign of a noisy lift difference, and the BT fit of
        # such signs is moved by the noise: at 9 x 10 x 1, +-1.5 logits the draws sat up to ~0.45
        # logits (about one standard error) inside the estimate, the estimate up to ~0.3 outside
        # the truth, and the plain intervals covered 0.88; the allowance |draws' mean - estimate|
        # on each side brought it to 0.95 (docs/analysis.md, coverage table)
        out[kind] = _rate(kind, b.players, stacked, ridge, design.inflation, note=note, pair_p=pair_p,
                          bias_allowance=kind in ("author", "solver"))
        out[kind].lifts = lifts
    return out
