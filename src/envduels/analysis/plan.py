"""`envduels plan`: can a tournament design answer the question, before anyone pays for it?

Two parts. **Cost** is counted exactly from the design, the way the scheduler builds its work:
every author writes `envs_per_author` environments per round; every solver plays every valid
environment (and, in round 1, every fixed-pool environment) on its seeds × trials in both
conditions, its own environments only with self-play on. Model calls are an upper bound: every
authoring attempt (first try and repairs) and every solver turn up to the turn cap.

**Power** is measured by simulating the design (`simulate_tournament`) under stated truths and
rating each through `rating_entries`, the function `analyze` itself uses for a real run.
For each ability spread s (logits), the players' solving abilities are evenly spaced over
[−s, s] and their hint-writing skills over [1 − s, 1 + s] in the same order; environments vary
by `env_spread` around their author. Three truths per spread:

- *same order* (the one above): interval width and coverage of each rating, the chance that the
  truly best two come out in the right order, and the false-alarm rate of a divergence claim
  and of a significant 3-cycle;
- *reversed*: hint-writing skill in the opposite order (true author–solver Spearman −1): the
  power of the divergence test (its claim, p < 0.05, that authoring and solving rank the
  models differently; its false alarm is its claim under the same order);
- *cycle*: a planted 3-cycle among the three best (each of them does `cycle` logits worse on
  the environments of the one it should beat): the power to find that cycle significant.

The truth a rating estimates is the Bradley–Terry fit of the *expected* comparison matrix of the
design (what the rating would be with the design's comparisons averaged over endless
independent tournaments): estimated by summing the observed score matrices of `truth_replicates`
further independent tournaments of the same design and truth, then fitting BT. Coverage is the
share of (replicate, model) intervals that contain that truth (an open bound reaches infinity);
models without an interval are counted apart (`no_interval`), and the width is the mean over
closed intervals (`open_interval`: the share with an open bound).

Simulated players all author and solve; fixed pools and solver-only players count in the cost,
not in the simulation. Every replicate's seed is `replicate_seed(...)`, so a figure can be
reproduced by running that one tournament directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from envduels.analysis.pairs import matched_pairs
from envduels.analysis.ratings import (
    ELO_CENTER,
    ELO_SCALE,
    RIDGE,
    compute_ratings,
    fit_bradley_terry,
)
from envduels.analysis.simulate import SimulatedRun, simulate_tournament

KINDS = ("duel", "author", "solver")
SCENARIOS = ("same", "reversed", "cycle")
NOMINAL = 0.95
ENVIRONMENTS = "uneven"
"""The simulator's environments (`simulate_tournament(environments=...)`): "uneven" by default, the
heterogeneous environments real authors write (docs/analysis.md); "alike" the earlier ±0.5 logits."""




@dataclass(frozen=True)
class SimDesign:
    """The shape of a tournament as simulated: `players` who all author and solve."""

    players: int
    envs_per_author: int
    rounds: int
    seeds: int
    trials: int = 1
    self_play: bool = False  # self-play pairs never enter a cross-model number, so never simulated


@dataclass
class PlanResult:
    """What `plan` found: one entry per spread, plus every replicate's raw figures."""

    design: SimDesign
    replicates: int
    bootstrap: int
    seed: int
    env_spread: float
    cycle: float
    spreads: list[dict[str, Any]]
    raw: dict[float, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    environments: str = ENVIRONMENTS

    def json(self) -> dict[str, Any]:
        """The plain-data form (no raw replicates)."""
        return {
            "simulation": {"players": self.design.players, "envs_per_author": self.design.envs_per_author,
                           "rounds": self.design.rounds, "seeds": self.design.seeds, "trials": self.design.trials,
                           "replicates": self.replicates, "bootstrap": self.bootstrap, "seed": self.seed,
                           "env_spread": self.env_spread, "environments": self.environments,
                           "nominal_coverage": NOMINAL},
            "spreads": self.spreads,
        }


def replicate_seed(seed: int, spread_index: int, scenario: str, replicate: int) -> int:
    """The simulator seed of one replicate; truth replicates use scenario "truth"."""
    code = {"same": 0, "reversed": 1, "cycle": 2, "truth": 3}[scenario]
    return int(np.random.SeedSequence([seed, spread_index, code, replicate]).generate_state(1)[0])


def truth_parameters(design: SimDesign, spread: float, scenario: str, cycle: float) -> dict[str, Any]:
    """Keyword arguments of `simulate_tournament` for one truth (see the module docstring)."""
    n = design.players
    names = [f"m{i:02d}" for i in range(n)]
    ability = np.linspace(-spread, spread, n)
    teaching = 1.0 + (ability[::-1] if scenario == "reversed" else ability)
    matchup: dict[tuple[str, str], float] = {}
    if scenario == "cycle" and n >= 3:
        a, b, c = names[-1], names[-2], names[-3]  # a beats b beats c beats a
        matchup = {(a, b): -cycle, (b, c): -cycle, (c, a): -cycle}
    return {"ability": ability.tolist(), "author_teaching": teaching.tolist(),
            "author_difficulty": [0.0] * n, "matchup": matchup}


def _simulate(design: SimDesign, spread: float, scenario: str, cycle: float, seed: int,
              env_spread: float, environments: str = ENVIRONMENTS) -> SimulatedRun:
    return simulate_tournament(
        players=design.players, envs_per_author=design.envs_per_author, rounds=design.rounds,
        seeds=design.seeds, trials=design.trials, seed=seed, spread=env_spread, self_play=design.self_play,
        transcripts=False, environments=environments, **truth_parameters(design, spread, scenario, cycle))


def replicate_figures(design: SimDesign, spread: float, scenario: str, *, cycle: float, seed: int,
                      bootstrap: int, env_spread: float, environments: str = ENVIRONMENTS) -> dict[str, Any]:
    """One simulated tournament through the run's analysis: each rating's rows, the divergence
    and the transitivity entries, exactly as `analyze` computes them."""
    from envduels.analysis.summary import rating_entries

    run = _simulate(design, spread, scenario, cycle, seed, env_spread, environments)
    ratings, transitive, diverge = rating_entries(run.tables, matched_pairs(run.tables.episodes),
                                                  bootstrap=bootstrap, seed=seed)
    return {"ratings": {k: ratings[k].by_model() for k in KINDS}, "divergence": diverge,
            "transitivity": transitive}


def truth_scores(design: SimDesign, spread: float, *, seed: int, env_spread: float,
                 environments: str = ENVIRONMENTS) -> dict[str, tuple[list[str], np.ndarray]]:
    """One same-order tournament's observed score matrix per rating kind (players, S)."""
    run = _simulate(design, spread, "same", 0.0, seed, env_spread, environments)
    ratings = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=0)
    return {k: (ratings[k].players, ratings[k].scores) for k in KINDS}


def true_ratings(samples: list[dict[str, tuple[list[str], np.ndarray]]]) -> dict[str, dict[str, float]]:
    """Per rating kind, each model's true Elo at this design: the BT fit of the score matrices
    of independent tournaments (`truth_scores`) summed."""
    out: dict[str, dict[str, float]] = {}
    for k in KINDS:
        players = samples[0][k][0]
        s = np.sum([sample[k][1] for sample in samples], axis=0)  # exact: scores are sums of halves
        rated = np.flatnonzero((s + s.T).sum(axis=1) > 0)
        if len(rated) < 2:
            out[k] = {}
            continue
        theta = fit_bradley_terry(s[np.ix_(rated, rated)], ridge=RIDGE)
        out[k] = {players[i]: float(ELO_CENTER + ELO_SCALE * t) for i, t in zip(rated, theta, strict=True)}
    return out


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarize(design: SimDesign, spread: float, truth: dict[str, dict[str, float]],
              raw: dict[str, list[dict[str, Any]]], cycle: float) -> dict[str, Any]:
    """The figures of one spread from its replicates (see the module docstring)."""
    names = [f"m{i:02d}" for i in range(design.players)]
    best, second = names[-1], names[-2]
    ratings: dict[str, Any] = {}
    for k in KINDS:
        widths, covered, missing, open_ended, ordered = [], [], 0, 0, []
        for rep in raw["same"]:
            rows = rep["ratings"][k]
            for m, t in truth[k].items():
                row = rows.get(m)
                if row is None or (row["ci_low"] is None and row["ci_high"] is None):
                    missing += 1
                    continue
                # an open bound (a model that won or lost everything) reaches to ±infinity
                lo = -np.inf if row["ci_low"] is None else row["ci_low"]
                hi = np.inf if row["ci_high"] is None else row["ci_high"]
                covered.append(lo <= t <= hi)
                if np.isfinite(lo) and np.isfinite(hi):
                    widths.append(hi - lo)
                else:
                    open_ended += 1
            if spread > 0 and best in rows and second in rows:
                ordered.append(rows[best]["rating"] > rows[second]["rating"])
        cells = len(raw["same"]) * len(truth[k])
        ratings[k] = {"width_elo": _mean(widths), "coverage": _mean(covered),
                      "no_interval": missing / cells if cells else None,
                      "open_interval": open_ended / cells if cells else None,
                      "top_two_ordered": _mean(ordered)}

    def claims(rep: dict[str, Any]) -> bool:
        return bool(rep["divergence"]["claim"])

    enough = design.players >= 3
    ordered_truth = enough and spread > 0  # identical players: no order for ranks to agree on
    top3 = set(names[-3:])

    def planted(rep: dict[str, Any]) -> bool:
        return any(c["significant"] and set(c["models"]) == top3 for c in rep["transitivity"]["cycle_list"])

    return {
        "spread": spread,
        "ratings": ratings,
        "divergence": {
            # the divergence test's claim (p < 0.05) that authoring and solving rank the models differently
            "power": _mean([claims(r) for r in raw["reversed"]]) if ordered_truth else None,
            "false_alarm": _mean([claims(r) for r in raw["same"]]) if ordered_truth else None,
            "no_test": _mean([r["divergence"]["p_value"] is None for r in raw["reversed"] + raw["same"]])
            if ordered_truth else None,
            # the Spearman interval is withheld when a rating is too noisy to correct for
            "no_interval": _mean([r["divergence"]["ci_high"] is None for r in raw["reversed"] + raw["same"]])
            if ordered_truth else None,
            "truth": "hint-writing skill in the reverse order of solving skill (Spearman -1)",
        },
        "cycle": {
            "size": cycle,
            "power": _mean([planted(r) for r in raw["cycle"]]) if enough else None,
            "false_alarm": _mean([r["transitivity"]["significant_cycles"] > 0 for r in raw["same"]]) if enough else None,
        },
    }


Job = tuple[str, SimDesign, float, str, int, float, int, float, str]
"""One tournament of `plan`: kind ("truth" or "figures"), design, spread, scenario, seed, cycle,
bootstrap, env_spread, environments."""
TruthScores = dict[str, tuple[list[str], np.ndarray]]


def _one(job: Job) -> TruthScores | dict[str, Any]:
    """One simulated tournament of `plan` (a top-level function, so worker processes can run it)."""
    kind, design, spread, scenario, seed, cycle, bootstrap, env_spread, environments = job
    if kind == "truth":
        return truth_scores(design, spread, seed=seed, env_spread=env_spread, environments=environments)
    return replicate_figures(design, spread, scenario, cycle=cycle, seed=seed, bootstrap=bootstrap,
                             env_spread=env_spread, environments=environments)


def plan(design: SimDesign, spreads: list[float], *, replicates: int = 20, bootstrap: int = 200,
         truth_replicates: int | None = None, cycle: float = 2.0, seed: int = 0, env_spread: float = 0.5,
         jobs: int = 1, progress: Callable[[int, int], None] | None = None,
         environments: str = ENVIRONMENTS) -> PlanResult:
    """Simulate `replicates` tournaments of `design` per spread and truth; summarize.

    Deterministic for a given `seed`, whatever `jobs` (worker processes; every tournament has its
    own seed, and results are gathered in order). `progress(done, total)` is called after each
    simulated tournament. `truth_replicates` defaults to `replicates` (at least 20).
    `environments` picks the simulator's environments ("uneven", the default, or "alike").
    """
    if design.players < 2:
        raise ValueError("a design needs at least 2 players")
    n_truth = truth_replicates if truth_replicates is not None else max(20, replicates)
    scenarios = SCENARIOS if design.players >= 3 else ("same",)
    plan_jobs: list[Job] = []
    for si, spread in enumerate(spreads):
        plan_jobs += [("truth", design, spread, "same", replicate_seed(seed, si, "truth", r), 0.0, 0, env_spread,
                       environments) for r in range(n_truth)]
        plan_jobs += [("figures", design, spread, scenario, replicate_seed(seed, si, scenario, r), cycle, bootstrap,
                       env_spread, environments) for scenario in scenarios for r in range(replicates)]
    results: list[TruthScores | dict[str, Any]] = []
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # fork: workers inherit the imported analysis instead of importing it again
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            for out in pool.map(_one, plan_jobs, chunksize=2):
                results.append(out)
                if progress:
                    progress(len(results), len(plan_jobs))
    else:
        for job in plan_jobs:
            results.append(_one(job))
            if progress:
                progress(len(results), len(plan_jobs))
    result = PlanResult(design, replicates, bootstrap, seed, env_spread, cycle, [], environments=environments)
    at = 0
    for spread in spreads:
        # the jobs were queued truth samples first, then each scenario's figures (see above)
        truth = true_ratings(cast(list[TruthScores], results[at:at + n_truth]))
        at += n_truth
        raw: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
        for scenario in scenarios:
            raw[scenario] = cast(list[dict[str, Any]], results[at:at + replicates])
            at += replicates
        result.raw[spread] = raw
        entry = summarize(design, spread, truth, raw, cycle)
        entry["truth_elo"] = truth
        result.spreads.append(entry)
    return result
