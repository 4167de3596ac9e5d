"""The HTML report: one self-contained file (inline CSS and PNG plots, no scripts, no links out).

Everything model-written (code, hints, titles, transcripts, even model names) goes through
Jinja's autoescaping; plots are PNG data URIs, so no model text reaches the page as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd
from jinja2 import Environment, FileSystemLoader, select_autoescape

from envduels.analysis.result import RatingRow, RunReport
from envduels.analysis.summary import Analysis
from envduels.duel.outcomes import Flag, Outcome
from envduels.report import plots
from envduels.report.story import GLOSSARY, divergence_headline, findings, unrated_reason

TEMPLATES = Path(__file__).parent / "templates"
MESSAGE_CHARS = 1500
TRANSCRIPTS_PER_ENV = 4


def _fmt(v: object, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def headline(j: RunReport | Mapping[str, object]) -> list[str]:
    """Plain sentences for the top of the report (see `envduels.report.story.findings`)."""
    return findings(j)


def _group(records: list[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r[key], []).append(r)
    return out


def _gallery(a: Analysis) -> list[dict[str, Any]]:
    """Per environment: code, hint, flags, per-solver results and a few transcripts.

    Plain Python over records (one pass each): a pandas filter per environment costs seconds
    on a 30,000-episode run.
    """
    tables = a.tables
    flags: dict[str, list[Flag]] = {e.id: e.flags for e in a.result.environments}
    eps_by_env = _group(tables.episodes.to_dict("records"), "env_id")
    pairs_by_env = _group(a.pairs.to_dict("records"), "env_id")
    out = []
    for e in tables.environments.to_dict("records"):
        ep = eps_by_env.get(e["env_id"], [])
        counts: dict[str, dict[tuple[bool, str], int]] = {}
        for r in ep:
            c = counts.setdefault(r["solver"], {})
            k = (bool(r["hinted"]), r["outcome"])
            c[k] = c.get(k, 0) + 1
        results = []
        for solver in sorted(counts):
            c = counts[solver]
            row = {"solver": solver, "self_play": solver == e["author"]}
            for h, key in ((False, "no_hint"), (True, "hint")):
                won, lost = c.get((h, Outcome.SUCCESS), 0), c.get((h, Outcome.FAILURE), 0)
                other = c.get((h, Outcome.INCOMPLETE), 0) + c.get((h, Outcome.ERROR), 0)
                row[key] = f"{won}/{won + lost}" + (f" (+{other} not scored)" if other else "")
            results.append(row)
        reason = e.get("invalid_reason")
        out.append({
            "id": e["env_id"], "title": e.get("title") or e["env_id"], "author": e["author"],
            "round": e["round"], "domain": e.get("domain"), "valid": bool(e["valid"]),
            "invalid_reason": reason if isinstance(reason, str) else None,
            "hint": e.get("hint") or "", "source": e.get("source") or "", "flags": flags.get(e["env_id"], []),
            "results": results, "transcripts": _examples(ep, pairs_by_env.get(e["env_id"], [])),
        })
    return out


def _examples(ep: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A few telling transcripts: a rescued pair (both episodes) first, then a harmed one, then others."""
    by_slot = _group(ep, "solver")
    chosen: list[dict[str, Any]] = []
    for want in ((0, 1), (1, 0)):
        p = next((p for p in pairs if (p["y0"], p["yh"]) == want), None)
        if p is not None:
            chosen += [r for r in by_slot.get(p["solver"], []) if r["seed"] == p["seed"] and r["trial"] == p["trial"]]
    keys = {r["episode_key"] for r in chosen}
    for r in ep:
        if len(chosen) >= TRANSCRIPTS_PER_ENV:
            break
        if r["episode_key"] not in keys:
            chosen.append(r)
    out = []
    for r in chosen[:TRANSCRIPTS_PER_ENV]:
        msgs = []
        for m in r["transcript"] if isinstance(r["transcript"], list) else []:
            if not isinstance(m, dict):
                continue
            text = str(m.get("content") if m.get("content") is not None else m.get("action", ""))
            if m.get("role") == "env" and m.get("action"):
                text = f"action {m['action']} → {text}"
            msgs.append({"role": str(m.get("role", "?")),
                         "text": text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " …[clipped]"})
        out.append({"solver": r["solver"], "seed": r["seed"], "hinted": bool(r["hinted"]),
                    "outcome": r["outcome"], "reason": r.get("reason"), "messages": msgs})
    return out


def _cycle_cells(j: RunReport) -> set[tuple[str, str]]:
    cells = set()
    for c in j.transitivity.cycle_list:
        a, b, d = c.models
        cells |= {(a, b), (b, d), (d, a)}
    return cells


def _no_plot_reasons(j: RunReport) -> dict[str, str]:
    """One sentence per plot that has nothing to show: why it is left out."""
    rounds = sorted({e.round for e in j.environments if e.valid and not e.fixed_pool})
    common = j.divergence.models
    valid = sum(1 for e in j.environments if e.valid)
    return {
        "duel": f"No duel rating: {unrated_reason('duel', j)}.",
        "author": f"No author rating: {unrated_reason('author', j)}.",
        "solver": f"No solver rating: {unrated_reason('solver', j)}.",
        "lift": "No hint lift to show: no solver finished matched pairs on another author's environment.",
        "scatter": (f"Left out: it needs two or more models rated both as author and as solver; this run has "
                    f"{common}."),
        "win": "Left out: no duel was scored.",
        "learning": ("Left out: this run has one round of valid authored environments, so there is nothing to "
                     "compare across rounds." if len(rounds) <= 1 else
                     "Left out: no author has a measured lift in any round."),
        "design": ("Left out: these episodes carry no environment source to compare designs (recorded by "
                   "another harness, or simulated)." if j.convergence is None else
                   f"Left out: the design map needs two or more valid environments; this run has {valid}."),
        "cost": ("Left out: episodes recorded by another harness carry no costs." if j.costs is None
                 else "Left out: no cost or token counts were recorded for any player."),
        "scale": ("Left out: no player sizes were given (add params_b to the players in the config) or fewer than "
                  "two sized models were rated."),
    }


class _Named(Protocol):
    @property
    def model(self) -> str: ...


_Row = TypeVar("_Row", bound=_Named)


def _in_rating_order(records: Iterable[_Row], rows: list[RatingRow]) -> list[_Row]:
    """Metric rows in the rating's order (see `analysis.summary.ordered`), unrated models after, by name."""
    pos = {r.model: i for i, r in enumerate(rows)}
    return sorted(records, key=lambda r: (pos.get(r.model, len(pos)), str(r.model)))


def _note(j: RunReport, kind: str) -> str:
    """Why a rating shows no intervals, as a caption sentence ('' when it has them)."""
    rows: list[RatingRow] = getattr(j.ratings, kind)
    if not rows or rows[0].rank is not None:
        return ""
    if j.run.bootstrap == 0:
        return " No intervals: --bootstrap is 0."
    note = getattr(j.rating_methods, kind).note
    return f" No intervals: {note}." if note else ""


def _names_in_order(models: Iterable[str], rows: list[RatingRow]) -> list[str]:
    pos = {r.model: i for i, r in enumerate(rows)}
    return sorted(models, key=lambda m: (pos.get(m, len(pos)), str(m)))


def run_view(a: Analysis, prefix: str) -> dict[str, Any]:
    """Everything one run's part of the report shows (the template's variables)."""
    j = a.result
    duel = a.ratings["duel"]
    win = None
    if duel.players and duel.rated.sum() >= 2:
        games = duel.scores + duel.scores.T
        share = np.where(games > 0, duel.scores / np.where(games > 0, games, 1), np.nan)
        order = [r.model for r in j.ratings.duel]
        win = pd.DataFrame(share, index=duel.players, columns=duel.players).loc[order, order]
    conv = j.convergence  # None for episodes from another harness
    why = _no_plot_reasons(j)
    lift = a.lift
    if lift is not None and not lift.empty:
        lift = lift.loc[_names_in_order(lift.index, j.ratings.author),
                        _names_in_order(lift.columns, j.ratings.solver)]
    sections = [
        {"id": f"{prefix}ratings", "title": "Ratings", "plots": [
            (plots.ratings_plot(j.ratings.duel, "Duel rating"),
             "Head-to-head: on A's environments A scores when B needed the hint, B scores when it won without it. "
             "Dots are Bradley–Terry ratings; bars are 95% intervals from the matches (an arrow: no bound on that "
             "side); #rank counts only models that are certainly better, so several models can share #1. "
             "Best at the top; equal ratings are listed by name.", why["duel"]),
            (plots.ratings_plot(j.ratings.author, "Author rating"),
             "As an author: on each solver both authors faced, whose hints helped that solver more? Bars: 95% "
             "intervals from resampling environments." + _note(j, "author"), why["author"]),
            (plots.ratings_plot(j.ratings.solver, "Solver rating"),
             "As a solver: on each environment both solvers played, who solved more without the hint? Bars: 95% "
             "intervals from resampling environments." + _note(j, "solver"), why["solver"]),
        ]},
        {"id": f"{prefix}lift", "title": "Hint lift", "plots": [
            (plots.heatmap(lift, "Hint lift: author (rows) × solver (columns)", label="pass with hint − pass without",
                           limits=(-1.0, 1.0)),
             "Each cell: how much the author's hints raised that solver's pass rate (−1 to 1). Blue is help, red is "
             "harm, blank: never met (self-play is excluded). Rows and columns in rating order.", why["lift"]),
        ]},
        {"id": f"{prefix}divergence", "title": "Authoring vs solving", "plots": [
            (plots.scatter_ratings(j.ratings.author, j.ratings.solver),
             "If authoring and solving were the same skill, the points would line up on a rising diagonal. Bars are "
             "95% intervals.", why["scatter"]),
        ]},
        {"id": f"{prefix}transitivity", "title": "Transitivity", "plots": [
            (plots.heatmap(win, "Share of duel matches won (row vs column)", cmap="PuOr", center=0.5,
                           label="share won", limits=(0.0, 1.0), highlight=_cycle_cells(j)) if win is not None else None,
             "Outlined cells are edges of a 3-cycle (A beats B beats C beats A): where a single ranking cannot tell "
             "the whole story.", why["win"]),
        ]},
        {"id": f"{prefix}learning", "title": "Learning across rounds", "plots": [
            (plots.learning_plot(j.learning),
             "Lift of each author's environments per round: rising lines mean authors learn from earlier duels.",
             why["learning"]),
        ]},
        {"id": f"{prefix}design", "title": "Design convergence", "plots": [
            (plots.design_map(conv.map if conv else []),
             f"Environments placed by similarity; colours are authors. Clusters of many colours mean different "
             f"authors converged on the same design. Embedding: {conv and conv.backend} "
             f"({conv and conv.backend_reason}); clusters cut at cosine {conv and conv.cluster_similarity}.",
             why["design"]),
        ]},
        {"id": f"{prefix}costs", "title": "Cost and scale", "plots": [
            (plots.cost_plot(j.costs or []), "Spend per player over the whole run (authoring and solving); "
             "the lighter part of a bar is what prompt caching saved.", why["cost"]),
            (plots.scale_plot(j.scale), "Player size against its ratings, where sizes were given.", why["scale"]),
        ]},
    ]
    shown = [s | {"plots": [{"src": src, "caption": cap, "missing": None if src else miss}
                            for src, cap, miss in s["plots"]]} for s in sections]
    return {
        "prefix": prefix, "json": j, "headline": headline(j), "sections": shown,
        "divergence_headline": divergence_headline(j),
        "solvers": _in_rating_order(j.solvers, j.ratings.solver),
        "authors": _in_rating_order(j.authors, j.ratings.author),
        "gallery": _gallery(a), "fmt": _fmt, "pct": _pct,
    }


def render_html(analyses: list[Analysis], comparison: dict[str, Any] | None = None, *,
                preface: list[str] | None = None) -> str:
    """The report for one run, or for several runs side by side with a comparison on top.
    `preface`: sentences shown above everything else, under "About this report" (the demo
    says there that its players are simulated)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["fmt"] = _fmt
    env.filters["pct"] = _pct
    multi = len(analyses) > 1
    runs = [run_view(a, f"run{i + 1}-" if multi else "") for i, a in enumerate(analyses)]
    comp = None
    if comparison is not None and multi:
        comp = {"rows": comparison["runs"], "plot": plots.runs_plot(comparison)}
    return env.get_template("report.html.j2").render(runs=runs, comparison=comp, glossary=GLOSSARY,
                                                     preface=preface or [],
                                                     title=" vs ".join(a.result.run.name for a in analyses))
