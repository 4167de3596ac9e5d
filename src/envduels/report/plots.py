"""Matplotlib figures for the HTML report, returned as inline `data:image/png;base64,...` URIs.

PNG (not SVG) on purpose: model-written names end up in labels, and a raster image cannot carry
markup into the page. Every function returns None when there is nothing to draw.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
COLORS = plt.get_cmap("tab20").colors


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _short(name: Any, n: int = 24) -> str:
    s = str(name)
    return s if len(s) <= n else s[: n - 1] + "…"


def ratings_plot(rows: list[dict[str, Any]], title: str) -> str | None:
    """Horizontal bars: each model's rating with its 95% interval, best at the top."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["rating"])
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(rows) + 1.0))
    y = np.arange(len(rows))
    ratings = np.array([r["rating"] for r in rows])
    lo = np.array([r["ci_low"] if r["ci_low"] is not None else r["rating"] for r in rows])
    hi = np.array([r["ci_high"] if r["ci_high"] is not None else r["rating"] for r in rows])
    ax.hlines(y, lo, hi, color="#4c72b0", lw=3, alpha=0.5)
    ax.plot(ratings, y, "o", color="#1f3b73")
    ax.set_yticks(y, [f"{_short(r['model'])} (#{r['rank'] or '–'})" for r in rows])
    ax.axvline(1000, color="#999", lw=0.8, ls=":")
    ax.set_xlabel("rating (Elo scale, 1000 = average; bars: 95% bootstrap interval)")
    ax.set_title(title)
    return _png(fig)


def heatmap(matrix: pd.DataFrame, title: str, *, cmap: str = "RdBu", center: float = 0.0,
            label: str = "", highlight: set[tuple[str, str]] | None = None) -> str | None:
    """A labelled heatmap of a square or rectangular table; `highlight` outlines (row, col) cells."""
    if matrix is None or matrix.empty:
        return None
    vals = matrix.to_numpy(dtype=float)
    span = np.nanmax(np.abs(vals - center)) if np.isfinite(vals).any() else 1.0
    span = span or 1.0
    n_r, n_c = vals.shape
    fig, ax = plt.subplots(figsize=(0.42 * n_c + 2.4, 0.36 * n_r + 1.6))
    im = ax.imshow(np.ma.masked_invalid(vals), cmap=cmap, vmin=center - span, vmax=center + span, aspect="auto")
    ax.set_xticks(range(n_c), [_short(c, 14) for c in matrix.columns], rotation=60, ha="right")
    ax.set_yticks(range(n_r), [_short(r, 18) for r in matrix.index])
    if n_r * n_c <= 400:
        for i in range(n_r):
            for j in range(n_c):
                if np.isfinite(vals[i, j]):
                    dark = abs(vals[i, j] - center) > 0.6 * span
                    ax.text(j, i, f"{vals[i, j]:.2f}", ha="center", va="center", fontsize=6.5,
                            color="white" if dark else "black")
    rows, cols = list(matrix.index), list(matrix.columns)
    for r, c in highlight or ():
        if r in rows and c in cols:
            ax.add_patch(plt.Rectangle((cols.index(c) - 0.5, rows.index(r) - 0.5), 1, 1, fill=False, ec="black", lw=2))
    fig.colorbar(im, ax=ax, shrink=0.8, label=label)
    ax.set_title(title)
    return _png(fig)


def scatter_ratings(author: list[dict[str, Any]], solver: list[dict[str, Any]]) -> str | None:
    """Author rating against solver rating for models rated in both roles."""
    a = {r["model"]: r for r in author}
    pts = [(m, a[m], r) for m, r in ((r["model"], r) for r in solver) if m in a]
    if len(pts) < 2:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    for k, (m, ar, sr) in enumerate(pts):
        c = COLORS[k % len(COLORS)]
        ax.errorbar(sr["rating"], ar["rating"],
                    xerr=[[sr["rating"] - (sr["ci_low"] or sr["rating"])], [(sr["ci_high"] or sr["rating"]) - sr["rating"]]],
                    yerr=[[ar["rating"] - (ar["ci_low"] or ar["rating"])], [(ar["ci_high"] or ar["rating"]) - ar["rating"]]],
                    fmt="o", color=c, alpha=0.8, capsize=2)
        ax.annotate(_short(m, 16), (sr["rating"], ar["rating"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("solver rating")
    ax.set_ylabel("author rating")
    ax.set_title("Authoring vs solving skill")
    return _png(fig)


def learning_plot(learning: dict[str, Any]) -> str | None:
    """Lift per round, one line per author."""
    authors = [a for a in learning.get("authors", []) if any(r["lift"] is not None for r in a["rounds"])]
    if not authors:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for k, a in enumerate(authors):
        pts = [(r["round"], r["lift"]) for r in a["rounds"] if r["lift"] is not None]
        ax.plot(*zip(*pts, strict=True), "o-", color=COLORS[k % len(COLORS)], label=_short(a["model"], 16))
    ax.set_xlabel("round")
    ax.set_ylabel("hint lift of the author's environments")
    ax.axhline(0, color="#999", lw=0.8)
    ax.legend(fontsize=6.5, ncol=2, frameon=False, loc="best")
    ax.set_title("Do authors write better hints over rounds?")
    return _png(fig)


def runs_plot(comparison: dict[str, Any]) -> str | None:
    """Mean author lift per round, one line per compared run."""
    runs = [r for r in comparison.get("runs", []) if r["lift_by_round"]]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for k, r in enumerate(runs):
        xs = [int(x) for x in r["lift_by_round"]]
        ax.plot(xs, list(r["lift_by_round"].values()), "o-", color=COLORS[k % len(COLORS)],
                label=f"{_short(r['run'])} (history: {r['history'] or '?'})")
    ax.set_xlabel("round")
    ax.set_ylabel("mean author lift")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title("Runs compared")
    return _png(fig)


def design_map(points: list[dict[str, Any]]) -> str | None:
    """The 2-D projection of environment designs, coloured by author."""
    if len(points) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    authors = sorted({p["author"] for p in points})
    for k, a in enumerate(authors):
        pts = [p for p in points if p["author"] == a]
        ax.scatter([p["x"] for p in pts], [p["y"] for p in pts], s=22, color=COLORS[k % len(COLORS)],
                   label=_short(a, 16), alpha=0.85)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=6.5, ncol=2, frameon=False, loc="best")
    ax.set_title("Design map (nearby points: similar environments)")
    return _png(fig)


def cost_plot(costs: list[dict[str, Any]]) -> str | None:
    """Cost in USD per player (tokens when no prices were given)."""
    rows = [c for c in costs if c.get("cost_usd") is not None or c.get("input_tokens")]
    if not rows:
        return None
    use_cost = any((c.get("cost_usd") or 0) > 0 for c in rows)
    vals = [float((c.get("cost_usd") if use_cost else (c.get("input_tokens") or 0) + (c.get("output_tokens") or 0)) or 0) for c in rows]
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(rows) + 1.0))
    names = [_short(c["model"]) for c in rows]
    ax.barh(names, vals, color="#55a868", label="billed")
    saved = [max(0.0, float(c.get("saved_usd") or 0)) for c in rows]
    if use_cost and any(saved):
        # what the bill would have added without the provider's prompt cache
        ax.barh(names, saved, left=vals, color="#c9e4d0", label="saved by prompt caching")
        ax.legend(fontsize=7, frameon=False, loc="best")
    ax.set_xlabel("cost (USD)" if use_cost else "tokens (no prices configured)")
    ax.set_title("What each player cost")
    return _png(fig)


def scale_plot(scale: dict[str, Any]) -> str | None:
    """Player size against author and solver rating."""
    kinds = [k for k in ("author", "solver") if len(scale.get(k, {}).get("points", [])) >= 2]
    if not kinds:
        return None
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.4 * len(kinds), 3.2), squeeze=False)
    for ax, k in zip(axes[0], kinds, strict=True):
        pts = scale[k]["points"]
        ax.scatter([p["params_b"] for p in pts], [p["rating"] for p in pts], color="#c44e52")
        ax.set_xscale("log")
        ax.set_xlabel("parameters (billions)")
        ax.set_ylabel(f"{k} rating")
    fig.suptitle("Does size predict skill?")
    return _png(fig)
