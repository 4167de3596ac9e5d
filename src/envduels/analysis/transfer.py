"""The transfer check: do duel statistics predict measured training gains?

Pure functions, no I/O. `unit_predictors` turns a run's tables into one row of candidate
predictors per author pool (or per environment); `correlate_gains` correlates each predictor with
user-measured gains: Pearson and Spearman, Fisher-z 95% intervals (Bonett–Wright variance for
Spearman), permutation p-values (every permutation when n <= 8, else seeded Monte Carlo), the critical |r|
at alpha = 0.05 for n units, and one plain sentence saying what may be concluded.

Multiplicity: four predictors tested at 0.05 each would print at least one "higher X gained
higher" on pure noise in about 19% of runs. `mean_hint_lift` is the primary predictor (the
paper's claim) and is tested at alpha; the other three only when it is significant, and then
with Holm's step-down among themselves (serial gatekeeping). A secondary's adjusted p is
max(primary p, its Holm-adjusted p); a verdict is printed when the adjusted p < alpha. The
chance of any false verdict stays at most alpha.

Definitions (panel = solvers other than the environment's author; self-play, `incomplete` and
`error` episodes excluded; matched pair = the no-hint and hinted episode of one
(environment, solver, seed, trial), both success/failure):

- `mean_hint_lift`: per environment mean(yh - y0) over its panel pairs; a pool averages its
  environments (each environment counts once).
- `learnability`: p(1 - p) with p a panel solver's no-hint pass rate on an environment; averaged
  over (environment, solver) cells.
- `rescue_rate`: P(yh = 1 | y0 = 0) pooled over the unit's pairs.
- `all_fail_fraction`: share of (environment, seed) groups whose panel no-hint episodes all
  fail: the prompts a hint-resampled trainer would replay with the hint.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from envduels.analysis.pairs import matched_pairs as _analysis_pairs

Unit = Literal["author", "env_id"]
PREDICTORS: tuple[str, ...] = ("mean_hint_lift", "learnability", "rescue_rate", "all_fail_fraction")
PRIMARY = "mean_hint_lift"
ALPHA = 0.05
MIN_UNITS = 4
EXACT_PERMUTATION_MAX_N = 8


def panel_pairs(episodes: pd.DataFrame) -> pd.DataFrame:
    """Panel matched pairs: `envduels.analysis.pairs.matched_pairs` (self-play dropped, both
    episodes success/failure, the last row of a repeated (key, condition) wins) without any
    pair whose solver authored the environment, in the columns
    env_id, author, solver, seed, trial, y0, yh (ints).

    One definition for the report and the transfer check, so both count the same pairs.
    """
    cols = ["env_id", "author", "solver", "seed", "trial", "y0", "yh"]
    if episodes.empty:
        return pd.DataFrame(columns=cols)
    pairs = _analysis_pairs(episodes)
    pairs = pairs[pairs["solver"] != pairs["author"]][cols].reset_index(drop=True)
    return pairs.astype({"y0": int, "yh": int})


def env_solver_rates(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (env_id, solver): `no_hint_rate`, `hinted_rate`, `learnability` = p(1-p), `pairs`."""
    if pairs.empty:
        return pd.DataFrame(
            columns=["env_id", "solver", "no_hint_rate", "hinted_rate", "learnability", "pairs"]
        )
    g = pairs.groupby(["env_id", "solver"])
    out = g.agg(no_hint_rate=("y0", "mean"), hinted_rate=("yh", "mean"), pairs=("y0", "size"))
    out["learnability"] = out["no_hint_rate"] * (1.0 - out["no_hint_rate"])
    return out.reset_index()


def unit_predictors(episodes: pd.DataFrame, unit: Unit) -> pd.DataFrame:
    """One row per unit (index: author or env_id) with the columns of `PREDICTORS`; NaN = no data."""
    pairs = panel_pairs(episodes)
    if pairs.empty:
        return pd.DataFrame(columns=list(PREDICTORS), index=pd.Index([], name=unit))
    env_lift = pairs.assign(d=pairs["yh"] - pairs["y0"]).groupby(["env_id", "author"])["d"].mean()
    env_lift = env_lift.reset_index()
    rates = env_solver_rates(pairs).merge(
        pairs[["env_id", "author"]].drop_duplicates(), on="env_id"
    )
    seed_groups = pairs.groupby(["env_id", "author", "seed"])["y0"].max().reset_index()
    seed_groups["all_fail"] = (seed_groups["y0"] == 0).astype(float)
    cold_fail = pairs[pairs["y0"] == 0]

    result = pd.DataFrame(
        {
            "mean_hint_lift": env_lift.groupby(unit)["d"].mean(),
            "learnability": rates.groupby(unit)["learnability"].mean(),
            "rescue_rate": cold_fail.groupby(unit)["yh"].mean(),
            "all_fail_fraction": seed_groups.groupby(unit)["all_fail"].mean(),
        }
    )
    result.index.name = unit
    return result[list(PREDICTORS)].astype(float)


@dataclass(frozen=True)
class Correlation:
    """One coefficient with its Fisher-z 95% interval and two-sided permutation p-value.

    `r` is None when undefined (n < 3 or a constant variable); the interval is None where
    `fisher_interval` gives none (n < 4 for Pearson, n < 10 for Spearman, |r| = 1).
    """

    method: Literal["pearson", "spearman"]
    r: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    permutation: Literal["exact", "monte_carlo", "none"]


@dataclass(frozen=True)
class PredictorResult:
    """A predictor against the gains over the units where both are known."""

    predictor: str
    n: int
    pearson: Correlation
    spearman: Correlation
    critical_r: float | None
    conclusion: str
    p_adjusted: float | None = None  # the family-wise adjusted permutation p that decides the verdict
    primary: bool = False


@dataclass
class TransferResult:
    """Everything `envduels correlate` prints and saves."""

    unit: Unit
    n_units: int
    alpha: float
    bootstrap: int
    seed: int
    results: list[PredictorResult]
    points: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; NaN never appears (missing values are null)."""
        return _nan_to_none(asdict(self))


def critical_r(n: int, alpha: float = ALPHA) -> float | None:
    """Smallest |r| that is significant at `alpha` (two-sided t test) for n units; None if n < 3."""
    if n < 3:
        return None
    t = stats.t.ppf(1.0 - alpha / 2.0, n - 2)
    return float(t / math.sqrt(t * t + n - 2))


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of each row of x with the same row of y; NaN where a row is constant."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    sxx = (xc * xc).sum(axis=-1)
    syy = (yc * yc).sum(axis=-1)
    # a row whose spread is rounding noise is constant: r is undefined there, not +-1
    flat = (sxx <= 1e-24 * (x * x).sum(axis=-1) + 1e-300) | (syy <= 1e-24 * (y * y).sum(axis=-1) + 1e-300)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=-1) / np.sqrt(sxx * syy)
    r = np.where(flat, np.nan, r)
    return np.clip(r, -1.0, 1.0)


def _coefficient(x: np.ndarray, y: np.ndarray, method: str) -> np.ndarray:
    if method == "spearman":
        x = stats.rankdata(x, axis=-1)
        y = stats.rankdata(y, axis=-1)
    return _rowwise_pearson(x, y)


SPEARMAN_INTERVAL_MIN_N = 10


def fisher_interval(r: float, n: int, method: Literal["pearson", "spearman"]) -> tuple[float, float] | None:
    """95% interval for a correlation on Fisher's z = atanh(r) scale: standard error
    1/sqrt(n − 3) for Pearson, sqrt((1 + r²/2)/(n − 3)) for Spearman (Bonett & Wright, 2000).

    None when it cannot be trusted: n < 4 (Pearson) or n < 10 (Spearman, whose small-sample
    distribution piles up at ±1), or |r| = 1 (z is infinite). Over bivariate normal samples it
    covers 95–96% (Pearson, n ≥ 4) and 95–96% (Spearman, n ≥ 10); the percentile bootstrap it
    replaces covered 89–91%.
    """
    if n < (MIN_UNITS if method == "pearson" else SPEARMAN_INTERVAL_MIN_N) or abs(r) >= 1.0 - 1e-12:
        return None
    var = 1.0 if method == "pearson" else 1.0 + r * r / 2.0
    half = float(stats.norm.ppf(1.0 - ALPHA / 2.0)) * math.sqrt(var / (n - 3))
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half)


def correlation(
    x: np.ndarray,
    y: np.ndarray,
    method: Literal["pearson", "spearman"],
    *,
    bootstrap: int,
    permutations: int,
    rng: np.random.Generator,
) -> Correlation:
    """r of x with y, a Fisher-z 95% interval (`fisher_interval`), a permutation p-value.

    The p-value is two-sided: the share of permutations of y whose |r| reaches the observed |r|
    (all n! permutations when n <= 8, else (1 + hits) / (1 + draws) over seeded random ones).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = len(x)
    if n < 3:
        return Correlation(method, None, None, None, None, "none")
    r = float(_coefficient(x[None, :], y[None, :], method)[0])
    if math.isnan(r):
        return Correlation(method, None, None, None, None, "none")

    ci_low = ci_high = None
    if bootstrap > 0:  # 0 keeps its CLI meaning: no intervals
        interval = fisher_interval(r, n, method)
        if interval is not None:
            ci_low, ci_high = interval

    tol = 1e-12
    if n <= EXACT_PERMUTATION_MAX_N:
        perms = np.array(list(itertools.permutations(range(n))))
        rs = _coefficient(np.broadcast_to(x, perms.shape), y[perms], method)
        p = float(np.mean(np.abs(np.nan_to_num(rs)) >= abs(r) - tol))
        kind: Literal["exact", "monte_carlo", "none"] = "exact"
    else:
        perms = rng.permuted(np.broadcast_to(np.arange(n), (permutations, n)), axis=1)
        rs = _coefficient(np.broadcast_to(x, perms.shape), y[perms], method)
        hits = int(np.sum(np.abs(np.nan_to_num(rs)) >= abs(r) - tol))
        p = (1 + hits) / (1 + permutations)
        kind = "monte_carlo"
    return Correlation(method, r, ci_low, ci_high, p, kind)


def adjusted_p_values(p: dict[str, float | None], primary: str = PRIMARY) -> dict[str, float | None]:
    """Serial gatekeeping: the primary keeps its p; each secondary gets max(primary p, Holm-
    adjusted p among the secondaries). A predictor without a p-value stays None (and does not
    count in Holm's family)."""
    out: dict[str, float | None] = {k: None for k in p}
    gate = p.get(primary)
    out[primary] = gate
    second = sorted((v, k) for k, v in p.items() if k != primary and v is not None)
    m, running = len(second), 0.0
    for rank, (v, k) in enumerate(second):
        running = max(running, min(1.0, (m - rank) * v))
        out[k] = max(running, 1.0 if gate is None else gate)
    return out


def conclusion(
    predictor: str, n: int, pearson: Correlation, crit: float | None, unit: Unit, p_adjusted: float | None = None
) -> str:
    """One plain sentence: what the data allows a reader to say about this predictor.

    The permutation p-value it prints decides (the family-wise `p_adjusted` < alpha when given,
    see `adjusted_p_values`); the critical |r| of the t test is quoted beside it for reference.
    The two can disagree near the boundary, and the verdict must follow the number shown, not a
    second test.
    """
    units = "author pools" if unit == "author" else "environments"
    if n < MIN_UNITS:
        return (
            f"{'No' if n == 0 else f'Only {n}'} {units if n != 1 else units[:-1]} {'has' if n == 1 else 'have'} "
            f"both a gain and a value of {predictor}: too few to conclude anything; "
            f"measure gains on at least {MIN_UNITS} (better 10 or more)."
        )
    if pearson.r is None or pearson.p_value is None:
        return f"{predictor} (or the gain) does not vary across the {n} {units}: no correlation can be computed."
    assert crit is not None
    ci = (
        f" (95% CI {pearson.ci_low:.2f} to {pearson.ci_high:.2f})"
        if pearson.ci_low is not None and pearson.ci_high is not None
        else ""
    )
    decide = pearson.p_value if p_adjusted is None else p_adjusted
    adj = ("" if p_adjusted is None or predictor == PRIMARY
           else f", adjusted p = {p_adjusted:.3g} ({PRIMARY} first, then Holm over the others)")
    test = (f"permutation p = {pearson.p_value:.3g}{adj} {'<' if decide < ALPHA else '>='} alpha = {ALPHA} "
            f"(the permutation test decides; critical |r| = {crit:.2f} for n = {n})")
    if decide >= ALPHA:
        return f"Pearson r = {pearson.r:.2f}{ci}, {test}: no evidence that {predictor} predicts training gain."
    direction = "higher" if pearson.r > 0 else "lower"
    return (
        f"Pearson r = {pearson.r:.2f}{ci}, {test}: {units} with higher {predictor} gained {direction} "
        "in training."
    )


def correlate_gains(
    predictors: pd.DataFrame,
    gains: pd.Series,
    *,
    unit: Unit,
    bootstrap: int = 2000,
    permutations: int = 10000,
    seed: int = 0,
) -> TransferResult:
    """Correlate every predictor column with `gains` (indexed by unit) over the units both know.

    Deterministic for a given seed: each predictor draws from its own Generator derived from
    (seed, predictor position).
    """
    joined = predictors.join(gains.rename("gain"), how="right")
    results = []
    found = []
    for i, name in enumerate(PREDICTORS):
        both = joined[[name, "gain"]].dropna()
        n = len(both)
        x = both[name].to_numpy(dtype=float)
        y = both["gain"].to_numpy(dtype=float)
        corr = {}
        methods: list[Literal["pearson", "spearman"]] = ["pearson", "spearman"]
        for j, method in enumerate(methods):
            rng = np.random.default_rng([seed, i, j])
            corr[method] = correlation(
                x, y, method, bootstrap=bootstrap, permutations=permutations, rng=rng
            )
        found.append((name, n, corr))
    usable = {name: (c["pearson"].p_value if n >= MIN_UNITS else None) for name, n, c in found}
    adjusted = adjusted_p_values(usable)
    for name, n, corr in found:
        crit = critical_r(n)
        results.append(
            PredictorResult(
                predictor=name,
                n=n,
                pearson=corr["pearson"],
                spearman=corr["spearman"],
                critical_r=crit,
                conclusion=conclusion(name, n, corr["pearson"], crit, unit, adjusted[name]),
                p_adjusted=adjusted[name],
                primary=name == PRIMARY,
            )
        )
    points = [
        {"unit": str(key), "gain": float(row["gain"]), **{p: row[p] for p in PREDICTORS}}
        for key, row in joined.iterrows()
    ]
    return TransferResult(
        unit=unit,
        n_units=len(joined),
        alpha=ALPHA,
        bootstrap=bootstrap,
        seed=seed,
        results=results,
        points=points,
    )


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_to_none(v) for v in value]
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
