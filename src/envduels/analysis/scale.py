"""Scale: does a player's size (`params_b`) predict its author or solver rating?"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from envduels.analysis.ratings import Rating


def scale(players: pd.DataFrame, ratings: dict[str, Rating]) -> dict[str, Any]:
    """Per rating kind: the (params_b, rating) points and Spearman ρ when ≥ 3 sizes are known."""
    sizes = {r.name: float(r.params_b) for r in players.itertuples(index=False)
             if "params_b" in players.columns and r.params_b is not None and not pd.isna(r.params_b)}
    out: dict[str, Any] = {"models_with_size": len(sizes)}
    for kind in ("author", "solver", "duel"):
        rows = ratings[kind].by_model() if kind in ratings else {}
        pts = [{"model": m, "params_b": sizes[m], "rating": rows[m]["rating"]} for m in sizes if m in rows]
        rho = None
        xs, ys = {p["params_b"] for p in pts}, {p["rating"] for p in pts}
        if len(pts) >= 3 and len(xs) > 1 and len(ys) > 1:  # a constant side has no correlation
            val = spearmanr([p["params_b"] for p in pts], [p["rating"] for p in pts]).statistic
            rho = None if np.isnan(val) else float(val)
        out[kind] = {"points": pts, "spearman": rho}
    return out
