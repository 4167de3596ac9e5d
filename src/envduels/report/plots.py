"""Matplotlib figures for the HTML report, returned as inline `data:image/png;base64,...` URIs.

PNG (not SVG) on purpose: model-written names end up in labels, and a raster image cannot carry
markup into the page. Every function returns None when there is nothing to draw; the
`*_figure` variants return the matplotlib Figure itself (for tests that check what was drawn).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from envduels._text import one_line, printable  # noqa: E402
from envduels.analysis.result import CostRow, Learning, MapPoint, RatingRow, Scale  # noqa: E402

plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
COLORS = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]  # a ListedColormap; the stubs say Colormap
STRONG = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]  # few points with bars: full-strength colours


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plot_label(name: object, n: int = 24) -> str:
    """A model-written name (a model, an environment, a run) as a plot label: made printable
    (`envduels._text.printable`: a control character such as ESC or BEL would otherwise reach
    the terminal raw, through matplotlib's "Glyph missing" warning), cut to `n` characters, with
    `$` escaped (matplotlib reads `$…$` as math, and a name such as `a$\\frac{$` would crash the
    report). Every name that reaches a figure goes through here."""
    return one_line(printable(str(name)), n).replace("$", r"\$")


def ratings_plot_figure(rows: Sequence[RatingRow], title: str) -> plt.Figure | None:
    """Horizontal bars: each model's rating with its 95% interval, best at the top (rows are
    given best first). An open interval end (a model that won or lost everything) runs to the
    edge of the plot and ends in an arrow; a model without an interval shows only its dot."""
    if not rows:
        return None
    rows = list(reversed(rows))  # drawn bottom-up
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(rows) + 1.1))
    y = np.arange(len(rows))
    ratings = np.array([r.rating for r in rows])
    has_ci = [r.ci_low is not None or r.ci_high is not None for r in rows]
    finite = [v for r in rows for v in (r.ci_low, r.ci_high, r.rating) if v is not None]
    left, right = min(finite), max(finite)
    pad = 0.08 * (right - left or 200.0)
    left, right = left - pad, right + pad
    for k, r in enumerate(rows):
        if not has_ci[k]:
            continue
        lo = left if r.ci_low is None else r.ci_low
        hi = right if r.ci_high is None else r.ci_high
        ax.hlines(k, lo, hi, color="#4c72b0", lw=3, alpha=0.5)
        for end, open_end, marker in ((lo, r.ci_low is None, "<"), (hi, r.ci_high is None, ">")):
            if open_end:
                ax.plot(end, k, marker, color="#4c72b0", ms=6)
    ax.plot(ratings, y, "o", color="#1f3b73")
    ax.set_xlim(left - pad / 2, right + pad / 2)
    ax.set_yticks(y, [f"{plot_label(r.model)} (#{r.rank or '–'})" for r in rows])
    ax.axvline(1000, color="#999", lw=0.8, ls=":")
    ax.set_xlabel("rating (Elo scale, 1000 = average; bars: 95% interval, arrow: no bound on that side)")
    ax.set_title(title)
    return fig


def ratings_plot(rows: Sequence[RatingRow], title: str) -> str | None:
    """`ratings_plot_figure` as a PNG data URI (None: nothing to draw)."""
    fig = ratings_plot_figure(rows, title)
    return None if fig is None else _png(fig)


def heatmap_figure(matrix: pd.DataFrame, title: str, *, cmap: str = "RdBu", center: float = 0.0,
            label: str = "", limits: tuple[float, float] | None = None,
            highlight: set[tuple[str, str]] | None = None) -> plt.Figure | None:
    """A labelled heatmap of a square or rectangular table; `highlight` outlines (row, col) cells.

    `limits`: the colour scale's fixed range (a share is 0 to 1, a lift −1 to 1), so colours mean
    the same in every report; without it the scale is symmetric about `center` over the data.
    """
    if matrix is None or matrix.empty:
        return None
    vals = matrix.to_numpy(dtype=float)
    if limits is not None:
        vmin, vmax = limits
    else:
        span = np.nanmax(np.abs(vals - center)) if np.isfinite(vals).any() else 1.0
        vmin, vmax = center - (span or 1.0), center + (span or 1.0)
    n_r, n_c = vals.shape
    # wide enough for the title and the colour bar's label even with one column
    fig, ax = plt.subplots(figsize=(max(5.6, 0.42 * n_c + 2.8), 0.36 * n_r + 1.8))
    im = ax.imshow(np.ma.masked_invalid(vals), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_c), [plot_label(c, 14) for c in matrix.columns], rotation=60 if n_c > 3 else 0,
                  ha="right" if n_c > 3 else "center")
    ax.set_yticks(range(n_r), [plot_label(r, 18) for r in matrix.index])
    if n_r * n_c <= 400:
        for i in range(n_r):
            for j in range(n_c):
                if np.isfinite(vals[i, j]):
                    dark = abs(vals[i, j] - (vmin + vmax) / 2) > 0.3 * (vmax - vmin)
                    ax.text(j, i, f"{vals[i, j]:.2f}", ha="center", va="center", fontsize=6.5,
                            color="white" if dark else "black")
    rows, cols = list(matrix.index), list(matrix.columns)
    for r, c in highlight or ():
        if r in rows and c in cols:
            ax.add_patch(plt.Rectangle((cols.index(c) - 0.5, rows.index(r) - 0.5), 1, 1, fill=False, ec="black", lw=2))
    bar = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.03)
    bar.set_label(label)
    ax.set_title(title, loc="left")
    return fig


def heatmap(matrix: pd.DataFrame, title: str, *, cmap: str = "RdBu", center: float = 0.0,
            label: str = "", limits: tuple[float, float] | None = None,
            highlight: set[tuple[str, str]] | None = None) -> str | None:
    """`heatmap_figure` as a PNG data URI (None: nothing to draw)."""
    fig = heatmap_figure(matrix, title, cmap=cmap, center=center, label=label, limits=limits, highlight=highlight)
    return None if fig is None else _png(fig)


def _label_points(ax: plt.Axes, xs: list[float], ys: list[float], labels: list[str]) -> None:
    """Name every point without two names (or a name and a point) overlapping: adjustText
    moves the labels apart and draws a thin leader line where a label had to move far."""
    from adjustText import adjust_text

    texts = [ax.text(x, y, plot_label(m, 16), fontsize=7) for x, y, m in zip(xs, ys, labels, strict=True)]
    adjust_text(texts, x=xs, y=ys, ax=ax, expand=(1.2, 1.4),
                arrowprops={"arrowstyle": "-", "color": "#888", "lw": 0.5})


def scatter_ratings_figure(author: Sequence[RatingRow], solver: Sequence[RatingRow]) -> plt.Figure | None:
    """Author rating against solver rating for models rated in both roles, with 95% intervals
    (the axes always hold the whole of every bar) and every point named."""
    a = {r.model: r for r in author}
    pts = [(r.model, a[r.model], r) for r in solver if r.model in a]
    if len(pts) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.0, 4.8))

    def bounds(r: RatingRow) -> tuple[float, float]:
        lo, hi = r.ci_low, r.ci_high
        return (r.rating if lo is None else lo, r.rating if hi is None else hi)

    for k, (_m, ar, sr) in enumerate(pts):
        (xl, xh), (yl, yh) = bounds(sr), bounds(ar)
        ax.errorbar(sr.rating, ar.rating, xerr=[[sr.rating - xl], [xh - sr.rating]],
                    yerr=[[ar.rating - yl], [yh - ar.rating]], fmt="o", color=STRONG[k % len(STRONG)],
                    alpha=0.8, capsize=2, lw=1)
    xs = [b for _m, _a, sr in pts for b in bounds(sr)]
    ys = [b for _m, ar, _s in pts for b in bounds(ar)]
    for lim, vals in ((ax.set_xlim, xs), (ax.set_ylim, ys)):
        lo, hi = min(vals), max(vals)
        pad = 0.06 * (hi - lo or 100.0)
        lim(lo - pad, hi + pad)
    _label_points(ax, [sr.rating for _m, _a, sr in pts], [ar.rating for _m, ar, _s in pts], [m for m, _a, _s in pts])
    ax.set_xlabel("solver rating (bars: 95% interval)")
    ax.set_ylabel("author rating (bars: 95% interval)")
    ax.set_title("Authoring vs solving skill")
    return fig


def scatter_ratings(author: Sequence[RatingRow], solver: Sequence[RatingRow]) -> str | None:
    """`scatter_ratings_figure` as a PNG data URI (None: nothing to draw)."""
    fig = scatter_ratings_figure(author, solver)
    return None if fig is None else _png(fig)


def learning_plot_figure(learning: Learning) -> plt.Figure | None:
    """Lift per round, one line per author."""
    authors = [a for a in learning.authors if any(r.lift is not None for r in a.rounds)]
    rounds = sorted({r.round for a in authors for r in a.rounds if r.lift is not None})
    if len(rounds) < 2:  # one round: nothing to compare across rounds
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for k, a in enumerate(authors):
        pts = [(r.round, r.lift) for r in a.rounds if r.lift is not None]
        ax.plot(*zip(*pts, strict=True), "o-", color=COLORS[k % len(COLORS)], label=plot_label(a.model, 16))
    ax.set_xticks(rounds)  # rounds are whole numbers
    ax.set_xlabel("round")
    ax.set_ylabel("hint lift of the author's environments")
    ax.axhline(0, color="#999", lw=0.8)
    ax.legend(fontsize=6.5, ncol=2, frameon=False, loc="best")
    ax.set_title("Do authors write better hints over rounds?")
    return fig


def learning_plot(learning: Learning) -> str | None:
    """`learning_plot_figure` as a PNG data URI (None: nothing to draw)."""
    fig = learning_plot_figure(learning)
    return None if fig is None else _png(fig)


def runs_plot(comparison: dict[str, Any]) -> str | None:
    """Mean author lift per round, one line per compared run."""
    runs = [r for r in comparison.get("runs", []) if r["lift_by_round"]]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for k, r in enumerate(runs):
        xs = [int(x) for x in r["lift_by_round"]]
        ax.plot(xs, list(r["lift_by_round"].values()), "o-", color=COLORS[k % len(COLORS)],
                label=f"{plot_label(r['run'])} (history: {r['history'] or '?'})")
    ax.set_xticks(sorted({int(x) for r in runs for x in r["lift_by_round"]}))
    ax.set_xlabel("round")
    ax.set_ylabel("mean author lift")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title("Runs compared")
    return _png(fig)


def design_map(points: Sequence[MapPoint]) -> str | None:
    """The 2-D projection of environment designs, coloured by author."""
    if len(points) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    authors = sorted({p.author for p in points})
    for k, a in enumerate(authors):
        pts = [p for p in points if p.author == a]
        ax.scatter([p.x for p in pts], [p.y for p in pts], s=22, color=COLORS[k % len(COLORS)],
                   label=plot_label(a, 16), alpha=0.85)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=6.5, ncol=2, frameon=False, loc="best")
    ax.set_title("Design map (nearby points: similar environments)")
    return _png(fig)


def cost_plot(costs: Sequence[CostRow]) -> str | None:
    """Cost in USD per player (tokens when no prices were given)."""
    rows = [c for c in costs if c.cost_usd is not None or c.input_tokens]
    if not rows:
        return None
    use_cost = any((c.cost_usd or 0) > 0 for c in rows)
    vals = [float((c.cost_usd if use_cost else (c.input_tokens or 0) + (c.output_tokens or 0)) or 0) for c in rows]
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(rows) + 1.0))
    names = [plot_label(c.model) for c in rows]
    ax.barh(names, vals, color="#55a868", label="billed")
    saved = [max(0.0, float(c.saved_usd or 0)) for c in rows]
    if use_cost and any(saved):
        # what the bill would have added without the provider's prompt cache
        ax.barh(names, saved, left=vals, color="#c9e4d0", label="saved by prompt caching")
        ax.legend(fontsize=7, frameon=False, loc="best")
    ax.set_xlabel("cost (USD)" if use_cost else "tokens (no prices configured)")
    ax.set_title("What each player cost")
    return _png(fig)


def scale_plot_figure(scale: Scale) -> plt.Figure | None:
    """Player size (log axis, plain-number ticks) against author and solver rating, every point named."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    by_kind = {"author": scale.author, "solver": scale.solver}
    kinds = [k for k, v in by_kind.items() if len(v.points) >= 2]
    if not kinds:
        return None
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 3.6), squeeze=False)
    for ax, k in zip(axes[0], kinds, strict=True):
        pts = by_kind[k].points
        xs, ys = [p.params_b for p in pts], [p.rating for p in pts]
        ax.scatter(xs, ys, color="#c44e52")
        ax.set_xscale("log")
        lo, hi = min(xs), max(xs)
        ax.set_xlim(lo / 1.6, hi * 1.6)
        # ticks at 1, 2, 5 × powers of ten inside the data's range: never two labels on top of each other
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
                 for m in (1, 2, 5) if lo / 1.6 <= m * 10.0 ** e <= hi * 1.6]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        _label_points(ax, xs, ys, [p.model for p in pts])
        rho = by_kind[k].spearman
        ax.set_title(f"{k}" + ("" if rho is None else f" (Spearman ρ {rho:.2f})"), fontsize=9)
        ax.set_xlabel("parameters (billions)")
        ax.set_ylabel(f"{k} rating")
    fig.suptitle("Does size predict skill?")
    fig.tight_layout()
    return fig



def scale_plot(scale: Scale) -> str | None:
    """`scale_plot_figure` as a PNG data URI (None: nothing to draw)."""
    fig = scale_plot_figure(scale)
    return None if fig is None else _png(fig)
