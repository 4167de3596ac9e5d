"""The HTML report: one self-contained file (inline CSS and PNG plots, no scripts, no links out).

Everything model-written (code, hints, titles, transcripts, even model names) goes through
Jinja's autoescaping; plots are PNG data URIs, so no model text reaches the page as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from jinja2 import Environment, FileSystemLoader, select_autoescape

from envduels.analysis import Analysis
from envduels.report import plots

TEMPLATES = Path(__file__).parent / "templates"
MESSAGE_CHARS = 1500
TRANSCRIPTS_PER_ENV = 4


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _level_with_top(rows: list[dict[str, Any]]) -> list[str]:
    """Models whose rating equals the top one (within half a rating point): a shared lead."""
    top = rows[0]["rating"]
    return [r["model"] for r in rows if abs(r["rating"] - top) < 0.5]


def headline(j: dict[str, Any]) -> list[str]:
    """Plain sentences for the top of the report."""
    out = []
    d = j["divergence"]
    ratings = j["ratings"]
    if d.get("best_solver") and d.get("best_author"):
        verb = "is also" if d["best_solver_is_best_author"] else "is not"
        s = f"The best solver, {d['best_solver']}, {verb} the best author"
        s += "." if d["best_solver_is_best_author"] else f" (that is {d['best_author']})."
        if d.get("spearman") is not None:
            s += f" Spearman ρ between author and solver ratings: {d['spearman']:.2f}"
            if d.get("ci_low") is not None:
                s += f" (95% interval {d['ci_low']:.2f} to {d['ci_high']:.2f})"
            s += "."
        out.append(s)
    elif ratings["solver"]:
        top = ratings["solver"][0]
        level = _level_with_top(ratings["solver"])
        lead = (f"Best solver: {top['model']} (solver rating {top['rating']:.0f})" if len(level) == 1
                else f"No solver stood out: {', '.join(level)} share the top solver rating "
                     f"({top['rating']:.0f})")
        out.append(f"{lead}; no model was rated as both author and solver, so authoring and "
                   "solving cannot be compared in this run.")
    if ratings["duel"]:
        top = ratings["duel"][0]
        tied = [r["model"] for r in ratings["duel"] if r["rank"] == 1]
        level = _level_with_top(ratings["duel"])
        s = f"Top of the duel table: {top['model']} ({top['rating']:.0f})"
        if len(level) > 1:
            s = f"No model leads the duel table: {', '.join(level)} are level ({top['rating']:.0f})."
        elif top["rank"] is None:
            s += ": fewer than two environments, so no interval and no rank."
        elif len(tied) > 1:
            s += f", statistically tied for first with {len(tied) - 1} other(s)."
        else:
            s += ", clear first."
        out.append(s)
    valid = sum(1 for e in j["environments"] if e["valid"])
    run = j["run"]
    cost = "" if run["cost_usd"] is None else f", ${run['cost_usd']:.2f}"
    out.append(f"{len(j['environments'])} environments ({valid} valid), {run['episodes']} episodes, "
               f"{run['matched_pairs']} matched pairs{cost}.")
    t = j["transitivity"]
    if t["triads"]:
        out.append(f"{t['cycles']} of {t['triads']} triads form a 3-cycle; {t['significant_cycles']} "
                   "survive Bonferroni-corrected intervals.")
    return out


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
    flags = {e["id"]: e["flags"] for e in a.json["environments"]}
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
                won, lost = c.get((h, "success"), 0), c.get((h, "failure"), 0)
                other = c.get((h, "incomplete"), 0) + c.get((h, "error"), 0)
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


def _cycle_cells(j: dict[str, Any]) -> set[tuple[str, str]]:
    cells = set()
    for c in j["transitivity"].get("cycle_list", []):
        a, b, d = c["models"]
        cells |= {(a, b), (b, d), (d, a)}
    return cells


def run_view(a: Analysis, prefix: str) -> dict[str, Any]:
    """Everything one run's part of the report shows."""
    j = a.json
    duel = a.ratings["duel"]
    win = None
    if duel.players:
        games = duel.scores + duel.scores.T
        share = np.where(games > 0, duel.scores / np.where(games > 0, games, 1), np.nan)
        win = pd.DataFrame(share, index=duel.players, columns=duel.players)
    conv = j["convergence"] or {}  # null for episodes from another harness
    sections = [
        {"id": f"{prefix}ratings", "title": "Ratings", "plots": [
            (plots.ratings_plot(j["ratings"]["duel"], "Duel rating"),
             "Head-to-head: a model wins a match when its environments stump the other more than the other's stump it. "
             "Dots are Bradley–Terry ratings; bars are 95% intervals from resampling environments. #rank counts only "
             "models that are certainly better."),
            (plots.ratings_plot(j["ratings"]["author"], "Author rating"),
             "As an author: on each solver both authors faced, whose hint helped that solver more?"),
            (plots.ratings_plot(j["ratings"]["solver"], "Solver rating"),
             "As a solver: on each environment both solvers played, who solved more without the hint?"),
        ]},
        {"id": f"{prefix}lift", "title": "Hint lift", "plots": [
            (plots.heatmap(a.lift, "Hint lift: author (rows) × solver (columns)", label="pass with hint − pass without"),
             "Each cell: how much the author's hints raised that solver's pass rate. Blue is help, red is harm, "
             "blank: never met (self-play is excluded)."),
        ]},
        {"id": f"{prefix}divergence", "title": "Authoring vs solving", "plots": [
            (plots.scatter_ratings(j["ratings"]["author"], j["ratings"]["solver"]),
             "If authoring and solving were the same skill, the points would line up on a rising diagonal."),
        ]},
        {"id": f"{prefix}transitivity", "title": "Transitivity", "plots": [
            (plots.heatmap(win, "Share of duel matches won (row vs column)", cmap="PuOr", center=0.5,
                           label="share won", highlight=_cycle_cells(j)) if win is not None else None,
             "Outlined cells are edges of a 3-cycle (A beats B beats C beats A): where a single ranking cannot tell "
             "the whole story."),
        ]},
        {"id": f"{prefix}learning", "title": "Learning across rounds", "plots": [
            (plots.learning_plot(j["learning"]),
             "Lift of each author's environments per round: rising lines mean authors learn from earlier duels."),
        ]},
        {"id": f"{prefix}design", "title": "Design convergence", "plots": [
            (plots.design_map(conv.get("map", [])),
             f"Environments placed by similarity; colours are authors. Clusters of many colours mean different "
             f"authors converged on the same design. Embedding: {conv.get('backend')} ({conv.get('backend_reason')}); "
             f"clusters cut at cosine {conv.get('cluster_similarity')}."),
        ]},
        {"id": f"{prefix}costs", "title": "Cost and scale", "plots": [
            (plots.cost_plot(j["costs"] or []), "Spend per player over the whole run (authoring and solving)."),
            (plots.scale_plot(j["scale"]), "Player size against its ratings, where sizes were given."),
        ]},
    ]
    for s in sections:
        s["plots"] = [{"src": src, "caption": cap} for src, cap in s["plots"] if src]
    return {
        "prefix": prefix, "json": j, "headline": headline(j), "sections": sections,
        "gallery": _gallery(a), "fmt": _fmt, "pct": _pct,
    }


def render_html(analyses: list[Analysis], comparison: dict[str, Any] | None = None) -> str:
    """The report for one run, or for several runs side by side with a comparison on top."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["fmt"] = _fmt
    env.filters["pct"] = _pct
    multi = len(analyses) > 1
    runs = [run_view(a, f"run{i + 1}-" if multi else "") for i, a in enumerate(analyses)]
    comp = None
    if comparison is not None and multi:
        comp = {"rows": comparison["runs"], "plot": plots.runs_plot(comparison)}
    return env.get_template("report.html.j2").render(runs=runs, comparison=comp,
                                                     title=" vs ".join(a.json["run"]["name"] for a in analyses))
