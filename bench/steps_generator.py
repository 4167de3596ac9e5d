"""A second generator of uneven tournaments, written apart from `envduels.analysis.simulate`, to
check the divergence test on environments it was not designed on (docs/analysis.md, "The
divergence test").

Different mechanics from the package's uneven simulator (which adds logit effects): a puzzle
takes k steps, a solver completes each with its own reliability (its skill, jittered per
environment), so success is reliability^k; a hint acts by its kind: useless (20%), misleading
(10%, two more steps), decisive (30%, it fills in the answer with the author's hint quality as
probability) or moderate (40%, it removes the author's quality times the solver's uptake of
the steps). 25% of environments nobody solves and 12% everybody solves, in both conditions.
Per run 5–15% of episodes are lost (absent, `incomplete` or `error`, a third each), more for
the solvers with flaky endpoints. Authors differ by hint quality (0–1) and by how many steps
their puzzles take. At 9 models × 10 environments with hint quality 1.0 → 0.1 and steps 6 → 1.5
against skill −1.5 → 1.5 (the strong divergence of docs/analysis.md) the authors' mean lifts
run from 0.23 down to 0.01 (the issue's generator: 0.28 to −0.01).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import expit

from envduels.analysis.simulate import DOMAINS, FrameTables

UNSOLVABLE, TRIVIAL = 0.25, 0.12
HINTS = ("useless", "misleading", "decisive", "moderate")
HINT_SHARES = (0.20, 0.10, 0.30, 0.40)


def steps_tournament(*, skill: list[float], hint_quality: list[float], steps: list[float], envs_per_author: int,
                     seeds: int = 4, seed: int = 0) -> FrameTables:
    """One round: every player writes `envs_per_author` environments and solves every other's on
    `seeds` seeds in both conditions. `skill` (logits) sets each solver's per-step reliability
    σ(1.5 + skill); `hint_quality` (0–1) and `steps` (the mean number of steps of a puzzle) are
    each author's."""
    rng = np.random.default_rng(seed)
    n = len(skill)
    names = [f"m{i:02d}" for i in range(n)]
    uptake = rng.uniform(0.5, 1.0, n)  # how much of a moderate hint a solver uses
    flaky = rng.uniform(0.5, 1.5, n)  # a solver's share of lost episodes, relative to the run's
    lost = rng.uniform(0.05, 0.15)
    env_rows, rows = [], []
    for a, author in enumerate(names):
        for k in range(envs_per_author):
            env_id = f"{author}-r1-e{k}"
            domain = DOMAINS[(a + k) % len(DOMAINS)]
            env_rows.append({"env_id": env_id, "author": author, "round": 1, "domain": domain,
                             "title": f"Steps {k} by {author}", "valid": True, "invalid_reason": None,
                             "hint": "a hint", "source": f"# steps puzzle {env_id}\n", "source_sha256": "",
                             "class_name": "Env", "max_turns": 20, "fixed_pool": False,
                             "benchmark_seeds": list(range(seeds))})
            u = rng.random()
            fixed = 0.0 if u < UNSOLVABLE else 1.0 if u < UNSOLVABLE + TRIVIAL else None
            k_steps = 1 + rng.poisson(steps[a])
            kind = HINTS[rng.choice(len(HINTS), p=HINT_SHARES)]
            affinity = rng.normal(0.0, 0.6, n)
            for s, solver in enumerate(names):
                if s == a:
                    continue
                q = expit(1.5 + skill[s] + affinity[s])
                for sd in range(seeds):
                    k_seed = max(1, k_steps + int(rng.integers(-1, 2)))
                    base = q ** k_seed
                    if kind == "useless":
                        hinted = base
                    elif kind == "misleading":
                        hinted = q ** (k_seed + 2)
                    elif kind == "decisive":
                        hinted = 1.0 - (1.0 - base) * (1.0 - hint_quality[a])
                    else:
                        hinted = q ** max(0, round(k_seed * (1.0 - hint_quality[a] * uptake[s])))
                    for h, p in ((False, base), (True, hinted)):
                        p = p if fixed is None else fixed
                        rows.append((env_id, author, solver, domain, sd, h, bool(rng.random() < p), s))
    eps = pd.DataFrame(rows, columns=["env_id", "author", "solver", "domain", "seed", "hinted", "won", "s"])
    v = rng.random(len(eps))
    share = lost * flaky[eps["s"].to_numpy()]
    outcome = np.where(eps["won"], "success", "failure").astype(object)
    outcome[v < share * 2 / 3] = "error"
    outcome[v < share / 3] = "incomplete"
    keep = ~((v >= share * 2 / 3) & (v < share))  # the last third: never recorded
    eps = eps.assign(outcome=outcome)[keep].drop(columns=["won", "s"]).reset_index(drop=True)
    eps["round"], eps["trial"], eps["turns"], eps["self_play"] = 1, 0, 3, False
    eps["reason"] = [("step timed out" if o == "incomplete" else None) for o in eps["outcome"]]
    eps["episode_key"] = [f"{e}:{s}:{sd}:0:{int(h)}" for e, s, sd, h in
                          zip(eps["env_id"], eps["solver"], eps["seed"], eps["hinted"], strict=True)]
    eps["transcript"] = [[] for _ in range(len(eps))]
    players = pd.DataFrame({"name": names, "provider": "openai", "model": names, "params_b": 1.0,
                            "roles": [["author", "solver"] for _ in names], "cost_usd": 1.0,
                            "input_tokens": 1000, "output_tokens": 100})
    return FrameTables(players, pd.DataFrame(env_rows), eps)
