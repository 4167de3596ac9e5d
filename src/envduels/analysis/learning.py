"""Learning across rounds: per-author lift and validity by round, with OLS slopes and intervals.

Units are environments (each environment's panel lift, or its validity 0/1) regressed on the
round number; the 95% interval uses the t distribution with n − 2 degrees of freedom.

Many authors mean many slopes: with no learning at all, some author's 95% interval excluded 0
in 0.205 of simulated runs (issue 20). So each slope also carries the t test's two-sided `p`
and `p_holm`, Holm-adjusted across the authors (per kind: lift slopes among themselves,
validity slopes among themselves); "this author's lift changed over rounds" is a claim only
where `p_holm` < 0.05, which keeps the chance of any false claim at 5%. The intervals stay
per author and are *not* corrected (Holm has no interval of its own; Bonferroni intervals, the
closest, would be wider than Holm's claims need), and the JSON and the report say so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from envduels.analysis.metrics import env_lift

CORRECTION = ("p_holm: Holm-adjusted across authors (lift and validity slopes separately); a change over "
              "rounds is claimed only where p_holm < 0.05. The 95% intervals are per author, not corrected "
              "for the number of authors.")


def ols_slope(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """Slope of y on x with a 95% interval and the two-sided t test's `p` of slope 0; None where
    x has no spread, or (interval and p) n < 3. `p_holm` is filled in by `learning_curves`."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out: dict[str, float | None] = {"slope": None, "ci_low": None, "ci_high": None, "p": None, "p_holm": None}
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
        # a perfect fit (se 0): no doubt about a nonzero slope, none about a zero one
        out["p"] = float(2.0 * student_t.sf(abs(slope) / se, len(x) - 2)) if se > 0 else float(slope == 0.0)
    return out


def holm(p: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and does not count in the family)."""
    given = sorted((v, i) for i, v in enumerate(p) if v is not None)
    out: list[float | None] = [None] * len(p)
    running = 0.0
    for rank, (v, i) in enumerate(given):
        running = max(running, min(1.0, (len(given) - rank) * v))
        out[i] = running
    return out


def learning_curves(environments: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, Any]:
    """Per author: lift and validity per round, and their slopes over rounds (with `p` and the
    Holm-adjusted `p_holm` across authors; `correction` says what is and is not corrected)."""
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
    for kind in ("lift_slope", "validity_slope"):
        for a, adjusted in zip(authors, holm([a[kind]["p"] for a in authors]), strict=True):
            a[kind]["p_holm"] = adjusted
    return {"rounds": rounds, "authors": authors, "correction": CORRECTION}


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
