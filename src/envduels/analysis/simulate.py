"""Simulated tournaments with known truth, for validating the analysis (tests, bench, demos).

Model: P(success | solver s, environment e, hinted h) = σ(ability_s − difficulty_e + effect_e·h),
with difficulty_e ~ N(author_difficulty_a, spread) and effect_e ~ N(author_teaching_a, spread).
Every episode is an independent draw; nothing touches the global random state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

DOMAINS = ("logic", "planning", "math", "language", "search")


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
) -> SimulatedRun:
    """A round-robin run: every player authors `envs_per_author` environments per round and
    solves every other player's environments on `seeds` seeds × `trials`, in both conditions.

    `matchup[(author, solver)]` (logits, both conditions) is added to that solver's success on
    that author's environments: a way to plant structure no single ability explains, such as
    a cycle in the duels."""
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
                        "domain": DOMAINS[(a + k) % len(DOMAINS)], "title": f"Puzzle {k} by {name}",
                        "valid": valid, "invalid_reason": None if valid else "oracle failed on seed 1",
                        "hint": f"Try the {DOMAINS[k % len(DOMAINS)]} trick number {k}.",
                        "source": f"class Env{k}:\n    # {name} {DOMAINS[(a + k) % 5]} puzzle round {r}\n"
                        f"    def reset(self, seed=None):\n        return 'state {k}', {{}}\n",
                        "source_sha256": "", "class_name": f"Env{k}", "max_turns": 20,
                        "fixed_pool": False, "benchmark_seeds": list(range(seeds)),
                    }
                )
    envs = pd.DataFrame(env_rows)
    valid_envs = envs[envs["valid"]]
    idx = {n: i for i, n in enumerate(names)}
    rows: dict[str, list[Any]] = {c: [] for c in ("env_id", "author", "solver", "round", "domain", "seed", "trial", "hinted")}
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
    prob = expit(solver_ab - d + offset + eff * eps["hinted"].to_numpy())
    success = rng.random(len(eps)) < prob
    u = rng.random(len(eps))
    outcome = np.where(success, "success", "failure").astype(object)
    outcome[u < p_incomplete + p_error] = "error"
    outcome[u < p_incomplete] = "incomplete"
    eps["outcome"] = outcome
    eps["reason"] = np.where(outcome == "incomplete", "step timed out", None)
    eps["turns"] = 3
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
