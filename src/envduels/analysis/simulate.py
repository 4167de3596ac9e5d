"""Simulated tournaments with known truth, for validating the analysis (tests, bench, demos).

Two kinds of environments (`environments=`):

- `"alike"`: P(success | solver s, environment e, hinted h) = σ(ability_s − difficulty_e +
  effect_e·h), with difficulty_e ~ N(author_difficulty_a, spread) and effect_e ~
  N(author_teaching_a, spread); every episode is an independent draw given these.
- `"uneven"` (what authored environments look like; `uneven_probabilities`): a difficulty
  mixture (25% of environments nobody solves, 12% everybody solves, the rest heavy-tailed
  around the author's level), a hint effect of the author's quality times a mixture (30%
  useless, 10% harmful, 20% decisive, 40% moderate), a hint sensitivity per solver, noise per
  solver × environment and per seed, and 5–15% of episodes absent, `incomplete` or `error`.
  Matches of one author then depend on each other through the environments they share much
  more than under "alike", which is what the duel's environment-level uncertainty must carry.

Nothing touches the global random state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

from envduels.duel.outcomes import Outcome

_DOMAINS = ("logic", "planning", "math", "language", "search")
ENVIRONMENT_KINDS = ("alike", "uneven")
UNSOLVABLE_SHARE, TRIVIAL_SHARE = 0.25, 0.12
"""Shares of uneven environments that nobody solves and that everybody solves (both conditions)."""
HINT_MIX = ((0.30, 0.0), (0.10, -1.0), (0.20, 4.0), (0.40, 1.0))
"""Uneven hint effects: (share, multiple of the author's quality): useless, harmful, decisive,
moderate; the moderate and harmful ones also vary by ±0.5 of the quality."""


@dataclass
class FrameTables:
    """The three analysis tables (same columns as `envduels.store.Tables`)."""

    players: pd.DataFrame
    environments: pd.DataFrame
    episodes: pd.DataFrame


@dataclass
class SimulatedRun:
    tables: FrameTables
    ability: dict[str, float]
    author_difficulty: dict[str, float]
    author_teaching: dict[str, float]
    difficulty: dict[str, float] = field(default_factory=dict)
    effect: dict[str, float] = field(default_factory=dict)

    def true_lift(self, env_id: str, solver: str) -> float:
        """Expected yh − y0 for a solver on an environment under the model."""
        base = self.ability[solver] - self.difficulty[env_id]
        return float(expit(base + self.effect[env_id]) - expit(base))


def simulate_tournament(
    *,
    players: int = 6,
    envs_per_author: int = 4,
    rounds: int = 1,
    seeds: int = 4,
    trials: int = 1,
    seed: int = 0,
    ability: list[float] | None = None,
    author_difficulty: list[float] | None = None,
    author_teaching: list[float] | None = None,
    spread: float = 0.5,
    p_invalid: float = 0.0,
    p_incomplete: float = 0.0,
    p_error: float = 0.0,
    self_play: bool = False,
    transcripts: bool = True,
    matchup: dict[tuple[str, str], float] | None = None,
    environments: str = "alike",
    hint_sensitivity: list[float] | None = None,
) -> SimulatedRun:
    """A round-robin run: every player authors `envs_per_author` environments per round and
    solves every other player's environments on `seeds` seeds × `trials`, in both conditions.

    `matchup[(author, solver)]` (logits, both conditions) is added to that solver's success on
    that author's environments: a way to plant structure no single ability explains, such as
    a cycle in the duels. `environments="uneven"` draws the heterogeneous environments of the
    module docstring instead (then `spread` is the scale of the difficulty's heavy tail, and
    `p_incomplete`/`p_error` add to its own 5–15% of broken or absent episodes, and
    `hint_sensitivity` is each solver's multiplier of hint effects, by default `sensitivities`:
    a property of the solver like its ability, the same in every tournament, not redrawn)."""
    if environments not in ENVIRONMENT_KINDS:
        raise ValueError(f"environments must be one of {ENVIRONMENT_KINDS}, not {environments!r}")
    rng = np.random.default_rng(seed)
    names = [f"m{i:02d}" for i in range(players)]
    ab = np.asarray(ability if ability is not None else rng.normal(0, 1, players), float)
    ad = np.asarray(author_difficulty if author_difficulty is not None else rng.normal(0, 0.7, players), float)
    at = np.asarray(author_teaching if author_teaching is not None else rng.normal(1.0, 0.7, players), float)
    env_rows, diffs, effects = [], {}, {}
    for r in range(1, rounds + 1):
        for a, name in enumerate(names):
            for k in range(envs_per_author):
                env_id = f"{name}-r{r}-e{k}"
                valid = bool(rng.random() >= p_invalid)
                diffs[env_id] = float(rng.normal(ad[a], spread))
                effects[env_id] = float(rng.normal(at[a], spread))
                env_rows.append(
                    {
                        "env_id": env_id, "author": name, "round": r,
                        "domain": _DOMAINS[(a + k) % len(_DOMAINS)], "title": f"Puzzle {k} by {name}",
                        "valid": valid, "invalid_reason": None if valid else "oracle failed on seed 1",
                        "hint": f"Try the {_DOMAINS[k % len(_DOMAINS)]} trick number {k}.",
                        "source": f"class Env{k}:\n    # {name} {_DOMAINS[(a + k) % 5]} puzzle round {r}\n"
                        f"    def reset(self, seed=None):\n        return 'state {k}', {{}}\n",
                        "source_sha256": "", "class_name": f"Env{k}", "max_turns": 20,
                        "fixed_pool": False, "benchmark_seeds": list(range(seeds)),
                    }
                )
    envs = pd.DataFrame(env_rows)
    valid_envs = envs[envs["valid"]]
    idx = {n: i for i, n in enumerate(names)}
    rows: dict[str, list[object]] = {c: [] for c in ("env_id", "author", "solver", "round", "domain", "seed", "trial", "hinted")}
    for e in valid_envs.itertuples(index=False):
        for s in names:
            if s == e.author and not self_play:
                continue
            for sd in range(seeds):
                for t in range(trials):
                    for h in (False, True):
                        rows["env_id"].append(e.env_id)
                        rows["author"].append(e.author)
                        rows["solver"].append(s)
                        rows["round"].append(e.round)
                        rows["domain"].append(e.domain)
                        rows["seed"].append(sd)
                        rows["trial"].append(t)
                        rows["hinted"].append(h)
    eps = pd.DataFrame(rows)
    solver_ab = ab[eps["solver"].map(idx).to_numpy()]
    d = eps["env_id"].map(diffs).to_numpy()
    eff = eps["env_id"].map(effects).to_numpy()
    offset = np.zeros(len(eps))
    for (author, solver), value in (matchup or {}).items():
        offset[((eps["author"] == author) & (eps["solver"] == solver)).to_numpy()] += value
    hinted = eps["hinted"].to_numpy()
    if environments == "uneven":
        sens = np.asarray(hint_sensitivity if hint_sensitivity is not None else sensitivities(players), float)
        prob, d, e, broken = uneven_probabilities(eps, names, ab, ad, at, sens, offset, spread, rng)
        diffs.update(d)
        effects.update(e)
    else:
        prob, broken = expit(solver_ab - d + offset + eff * hinted), 0.0
    success = rng.random(len(eps)) < prob
    u = rng.random(len(eps))
    outcome = np.where(success, Outcome.SUCCESS.value, Outcome.FAILURE.value).astype(object)
    absent = np.zeros(len(eps), dtype=bool)
    if broken:  # a third each: absent (never recorded), incomplete, error
        v = rng.random(len(eps))
        outcome[v < broken * 2 / 3] = Outcome.ERROR.value
        outcome[v < broken / 3] = Outcome.INCOMPLETE.value
        absent = (v >= broken * 2 / 3) & (v < broken)
    outcome[u < p_incomplete + p_error] = Outcome.ERROR.value
    outcome[u < p_incomplete] = Outcome.INCOMPLETE.value
    eps["outcome"] = outcome
    eps["reason"] = ["step timed out" if o == Outcome.INCOMPLETE else None for o in outcome]
    eps["turns"] = 3
    eps = eps[~absent].reset_index(drop=True)
    eps["self_play"] = eps["author"] == eps["solver"]
    eps["episode_key"] = [f"{e}:{s}:{sd}:{t}:{int(h)}" for e, s, sd, t, h in zip(eps["env_id"], eps["solver"], eps["seed"], eps["trial"], eps["hinted"], strict=True)]
    if transcripts:
        eps["transcript"] = [
            [{"role": "user", "content": "Observation: start"},
             {"role": "assistant", "content": f"I think so. \\boxed{{move {sd % 3}}}"}]
            for sd in eps["seed"]
        ]
    else:
        eps["transcript"] = [[] for _ in range(len(eps))]
    players_df = pd.DataFrame(
        {
            "name": names, "provider": "openai", "model": names,
            "params_b": [float(2 ** (i % 6)) for i in range(players)],
            "roles": [["author", "solver"] for _ in names],
            "cost_usd": [round(0.5 + 0.1 * i, 2) for i in range(players)],
            "input_tokens": [100_000 + 1000 * i for i in range(players)],
            "output_tokens": [20_000 + 500 * i for i in range(players)],
        }
    )
    return SimulatedRun(
        FrameTables(players_df, envs, eps),
        dict(zip(names, ab.tolist(), strict=True)),
        dict(zip(names, ad.tolist(), strict=True)),
        dict(zip(names, at.tolist(), strict=True)),
        diffs,
        effects,
    )


def sensitivities(players: int) -> list[float]:
    """Default hint sensitivities of the uneven model: lognormal(0, 0.3) quantiles, in an order
    unrelated to the players' index (so to any ability spread evenly by index)."""
    z = norm.ppf((np.arange(players) + 0.5) / players)
    order = np.argsort((np.arange(players) * 7 + 3) % players if players > 1 else [0])
    return np.exp(0.3 * z[order]).tolist()


def uneven_probabilities(
    eps: pd.DataFrame,
    names: list[str],
    ability: np.ndarray,
    author_difficulty: np.ndarray,
    author_teaching: np.ndarray,
    sens: np.ndarray,
    offset: np.ndarray,
    spread: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, dict[str, float], dict[str, float], float]:
    """Success probability of each episode row under the uneven model, each environment's
    difficulty and mean hint effect, and the share of episodes to break or drop (5–15%).

    logit P = ability − difficulty_e + u_{s,e} + v_{e,seed} + hinted · (k_s · effect_e + w_{s,e}),
    u ~ N(0, 0.7), v ~ N(0, 0.5), w ~ N(0, 0.5), k_s = `sens` the solver's hint sensitivity; difficulty_e = author level + spread · t₃ except on the 25% (12%) of
    environments nobody (everybody) solves, whose success is 0 (1) in both conditions."""
    idx = {n: i for i, n in enumerate(names)}
    env_ids = list(dict.fromkeys(eps["env_id"]))
    author = {e: a for e, a in zip(eps["env_id"], eps["author"], strict=True)}
    kind = rng.random(len(env_ids))
    mix = rng.choice(len(HINT_MIX), size=len(env_ids), p=[m[0] for m in HINT_MIX])
    diffs, effects, fixed = {}, {}, {}
    for k, e in enumerate(env_ids):
        a = idx[author[e]]
        diffs[e] = float(author_difficulty[a] + spread * rng.standard_t(3))
        scale = HINT_MIX[mix[k]][1]
        jitter = rng.normal(0.0, 0.5) if scale in (1.0, -1.0) else 0.0
        effects[e] = float(author_teaching[a] * (scale + jitter))
        fixed[e] = (0.0 if kind[k] < UNSOLVABLE_SHARE else 1.0 if kind[k] < UNSOLVABLE_SHARE + TRIVIAL_SHARE
                    else np.nan)
    solver = eps["solver"].map(idx).to_numpy()
    env_code = eps["env_id"].map({e: k for k, e in enumerate(env_ids)}).to_numpy()
    cell = env_code * len(names) + solver
    u = rng.normal(0.0, 0.7, len(env_ids) * len(names))[cell]
    w = rng.normal(0.0, 0.5, len(env_ids) * len(names))[cell]
    seeds = eps["seed"].to_numpy().astype(int)
    v = rng.normal(0.0, 0.5, (len(env_ids), int(seeds.max()) + 1 if len(seeds) else 1))[env_code, seeds]
    hinted = eps["hinted"].to_numpy().astype(float)
    d = eps["env_id"].map(diffs).to_numpy()
    eff = eps["env_id"].map(effects).to_numpy()
    prob = expit(ability[solver] - d + u + v + offset + hinted * (sens[solver] * eff + w))
    fix = eps["env_id"].map(fixed).to_numpy()
    prob = np.where(np.isnan(fix), prob, fix)
    return prob, diffs, effects, float(rng.uniform(0.05, 0.15))
