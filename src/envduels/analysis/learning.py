"""Learning across rounds: per-author lift and validity by round, with OLS slopes and intervals.

Units are environments (each environment's panel lift, or its validity 0/1) regressed on the
round number; the 95% interval uses the t distribution with n − 2 degrees of freedom.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from envduels.analysis.metrics import env_lift


def ols_slope(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """Slope of y on x with a 95% interval; None where x has no spread or n < 3 for the interval."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out: dict[str, float | None] = {"slope": None, "ci_low": None, "ci_high": None}
    if len(x) < 2 or np.ptp(x) == 0:
        return out
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    out["slope"] = slope
    if len(x) >= 3:
        resid = y - y.mean() - slope * xc
        se = np.sqrt((resid @ resid) / (len(x) - 2) / (xc @ xc))
        half = float(student_t.ppf(0.975, len(x) - 2) * se)
        out["ci_low"], out["ci_high"] = slope - half, slope + half
    return out


def learning_curves(environments: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, Any]:
    """Per author: lift and validity per round, and their slopes over rounds."""
    lifts = env_lift(pairs)
    authors = []
    rounds = sorted(int(r) for r in environments["round"].unique()) if len(environments) else []
    for a, envs in environments.groupby("author", sort=True):
        by_round = []
        for r in rounds:
            er = envs[envs["round"] == r]
            lv = lifts[lifts.index.isin(er["env_id"])]["lift"]
            by_round.append({
                "round": r,
                "environments": len(er),
                "lift": None if lv.empty else float(lv.mean()),
                "validity": None if er.empty else float(er["valid"].astype(bool).mean()),
            })
        lv = lifts[lifts.index.isin(envs["env_id"])]
        authors.append({
            "model": a,
            "rounds": by_round,
            "lift_slope": ols_slope(lv["round"].to_numpy(), lv["lift"].to_numpy()),
            "validity_slope": ols_slope(envs["round"].to_numpy(), envs["valid"].astype(float).to_numpy()),
        })
    return {"rounds": rounds, "authors": authors}


def compare_runs(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs side by side (e.g. history modes none / own / all): mean author lift per
    round and the mean per-author lift slope of each run."""
    rows = []
    for s in summaries:
        learning = s.get("learning", {})
        per_round: dict[int, list[float]] = {}
        slopes = []
        for a in learning.get("authors", []):
            for r in a["rounds"]:
                if r["lift"] is not None:
                    per_round.setdefault(r["round"], []).append(r["lift"])
            if a["lift_slope"]["slope"] is not None:
                slopes.append(a["lift_slope"]["slope"])
        rows.append({
            "run": s["run"]["name"],
            "history": s["run"].get("history"),
            "lift_by_round": {str(r): float(np.mean(v)) for r, v in sorted(per_round.items())},
            "mean_lift_slope": float(np.mean(slopes)) if slopes else None,
        })
    return {"runs": rows}
