"""A joint item-response view: logit P(success) = ability(solver) − difficulty(env) + effect(env)·hinted.

Fitted by L2-regularised maximum likelihood (L-BFGS with the analytic gradient) on binomial
counts per (solver, environment, condition), self-play excluded. Per author, the mean difficulty
of its environments and the mean hint effect (its *teaching*) are a second view of authoring.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit

from envduels.analysis._ties import ESTIMATE_TOLERANCE, order

IRT_RIDGE = 0.05


def fit_irt(pairs: pd.DataFrame, *, ridge: float = IRT_RIDGE) -> dict[str, Any]:
    """Fit the model to matched pairs; returns abilities, difficulties, effects and per-author
    means. Abilities are centred to mean 0 (the model is identified only up to a shift)."""
    if pairs.empty:
        return {"solvers": [], "authors": [], "environments": []}
    long = pd.concat(
        [
            pairs[["solver", "env_id"]].assign(h=0, y=pairs["y0"]),
            pairs[["solver", "env_id"]].assign(h=1, y=pairs["yh"]),
        ]
    )
    agg = long.groupby(["solver", "env_id", "h"])["y"].agg(["sum", "size"]).reset_index()
    solvers, s_idx = np.unique(agg["solver"].to_numpy(), return_inverse=True)
    envs, e_idx = np.unique(agg["env_id"].to_numpy(), return_inverse=True)
    h = agg["h"].to_numpy(float)
    k = agg["sum"].to_numpy(float)
    n = agg["size"].to_numpy(float)
    ns, ne = len(solvers), len(envs)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        a, d, t = x[:ns], x[ns : ns + ne], x[ns + ne :]
        eta = a[s_idx] - d[e_idx] + t[e_idx] * h
        p = expit(eta)
        nll = np.sum(n * np.logaddexp(0, eta) - k * eta) + 0.5 * ridge * np.sum(x * x)
        r = n * p - k
        g = ridge * x.copy()
        g[:ns] += np.bincount(s_idx, r, ns)
        g[ns : ns + ne] -= np.bincount(e_idx, r, ne)
        g[ns + ne :] += np.bincount(e_idx, r * h, ne)
        return float(nll), g

    res = minimize(objective, np.zeros(ns + 2 * ne), jac=True, method="L-BFGS-B")
    a, d, t = res.x[:ns], res.x[ns : ns + ne], res.x[ns + ne :]
    shift = a.mean()
    a, d = a - shift, d - shift
    ability = dict(zip(solvers, a, strict=True))
    info = pairs.groupby("env_id")["author"].first()
    env_frame = pd.DataFrame({"env_id": envs, "difficulty": d, "hint_effect": t})
    env_frame["author"] = env_frame["env_id"].map(info)
    per_author = env_frame.groupby("author").agg(
        difficulty=("difficulty", "mean"), teaching=("hint_effect", "mean"), environments=("env_id", "size")
    )
    return {
        "converged": bool(res.success),
        # highest first, estimates within ESTIMATE_TOLERANCE by name (_ties.py)
        "solvers": [{"model": s, "ability": float(ability[s])} for s in order(list(solvers), a, tol=ESTIMATE_TOLERANCE)],
        "authors": [
            {"model": m, "difficulty": float(r.difficulty), "teaching": float(r.teaching), "environments": int(r.environments)}
            for m, r in per_author.loc[order(list(per_author.index), per_author["teaching"].to_numpy(),
                                             tol=ESTIMATE_TOLERANCE)].iterrows()
        ],
        "environments": [
            {"id": r.env_id, "difficulty": float(r.difficulty), "hint_effect": float(r.hint_effect)}
            for r in env_frame.itertuples(index=False)
        ],
    }
