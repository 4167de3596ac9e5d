"""Coverage of the rating and divergence intervals, and null rates of the claims, on simulated
tournaments with known truth: the table in docs/analysis.md.

Designs are players × environments per author × rounds (4 seeds, 1 trial); abilities are evenly
spread over ±spread logits, teaching effects 1 ± spread in the same order ("correlated") or in
a fixed scrambled order ("uncorrelated"). The truth of each rating is the Bradley–Terry fit of
its *expected* comparison matrix at that design (averaged over `--truth-reps` simulated runs):
what the pooled fit estimates. An interval covers when truth ∈ [low, high] (an open bound is
infinite). Null rows use identical players: any rank claim (a rank > 1), any significant cycle
edge or cycle, and any `correlate` verdict on pure-noise gains count as false claims.

Run: `python bench/coverage_table.py [--reps 100] [--draws 200] [--jobs 2] [--designs 9x10x1]
[--nulls-only]` (prints markdown).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from envduels.analysis import matched_pairs, simulate_tournament
from envduels.analysis.divergence import _spearman_rows, divergence
from envduels.analysis.ratings import (
    ELO_CENTER,
    ELO_SCALE,
    author_builder,
    compute_ratings,
    duel_builder,
    fit_bradley_terry,
    make_design,
    solver_builder,
)
from envduels.analysis.transfer import correlate_gains, unit_predictors
from envduels.analysis.transitivity import transitivity

DESIGNS = [(6, 4, 2), (9, 10, 1), (9, 1, 2)]
RUN_ORDER = [(9, 1, 2), (6, 4, 2), (9, 10, 1)]  # the design most at risk first, to learn of it early
SPREADS = [0.4, 1.5]
KINDS = ("duel", "author", "solver")
SCRAMBLE = {6: [3, 0, 5, 1, 4, 2], 9: [4, 8, 1, 6, 0, 3, 7, 2, 5]}


def params(players: int, spread: float, skill: str) -> dict[str, Any]:
    ability = np.linspace(-spread, spread, players)
    if skill == "null":
        return {"ability": [0.0] * players, "author_difficulty": [0.0] * players, "author_teaching": [1.0] * players}
    order = np.arange(players) if skill == "correlated" else np.array(SCRAMBLE[players])
    return {"ability": list(ability), "author_difficulty": [0.0] * players,
            "author_teaching": list(1.0 + ability[order])}


def simulate(design: tuple[int, int, int], spread: float, skill: str, seed: int) -> Any:
    n, k, r = design
    return simulate_tournament(players=n, envs_per_author=k, rounds=r, seeds=4, seed=seed, transcripts=False,
                               **params(n, spread, skill))


def expected_scores(args: tuple) -> dict[str, np.ndarray]:
    design, spread, skill, seed = args
    run = simulate(design, spread, skill, seed)
    pairs = matched_pairs(run.tables.episodes)
    d = make_design(run.tables)
    ones = np.ones((1, len(d.env_ids)))
    return {"duel": duel_builder(run.tables, pairs, d).scores(ones)[0],
            "author": author_builder(run.tables, pairs, d).scores(ones)[0],
            "solver": solver_builder(run.tables, pairs, d).scores(ones)[0]}


def one_rep(args: tuple) -> dict[str, Any]:
    design, spread, skill, seed, draws = args
    run = simulate(design, spread, skill, seed)
    pairs = matched_pairs(run.tables.episodes)
    ratings = compute_ratings(run.tables, pairs, bootstrap=draws, seed=seed)
    out: dict[str, Any] = {}
    for kind in KINDS:
        rt = ratings[kind]
        out[kind] = {"note": rt.note, "rows": [(r["model"], r["ci_low"], r["ci_high"], r["rank"]) for r in rt.rows]}
    duel = ratings["duel"]
    t = transitivity(duel.scores, duel.players, duel.theta, edge_p=duel.edge_p, tie_rate=duel.tie_rate,
                     reference_draws=0)
    n = len(duel.players)
    m = max(int(np.triu((duel.scores + duel.scores.T) > 0, 1).sum()), 1)
    out["sig_edge"] = bool((duel.edge_p[~np.eye(n, dtype=bool)] <= 0.05 / m / 2).any())
    out["sig_cycle"] = t["significant_cycles"] > 0
    dv = divergence(ratings["author"], ratings["solver"])
    out["div"] = (dv["ci_low"], dv["ci_high"], dv["spearman"])
    if skill == "null":  # correlate on pure-noise gains, one row per author pool
        pred = unit_predictors(run.tables.episodes, "author")
        gains = pd.Series(np.random.default_rng(seed).normal(size=len(pred)), index=pred.index)
        res = correlate_gains(pred, gains, unit="author", bootstrap=0, permutations=999, seed=seed)
        out["verdict"] = any("gained" in r.conclusion for r in res.results)
    return out


def truth_for(pool: ProcessPoolExecutor, design, spread, skill, reps) -> dict[str, np.ndarray]:
    acc: dict[str, np.ndarray] = {}
    for s in pool.map(expected_scores, [(design, spread, skill, 10_000 + i) for i in range(reps)]):
        for k, v in s.items():
            acc[k] = acc.get(k, 0) + v / reps
    return {k: ELO_CENTER + ELO_SCALE * fit_bradley_terry(v, ridge=1e-9) for k, v in acc.items()}


def cover(rows: list, truth: dict[str, float]) -> tuple[int, int]:
    hit = tot = 0
    for model, lo, hi, _ in rows:
        if lo is None and hi is None:
            continue
        lo = -np.inf if lo is None else lo
        hi = np.inf if hi is None else hi
        tot += 1
        hit += lo <= truth[model] <= hi
    return hit, tot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--truth-reps", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", default=None, help="also save the raw cells here")
    ap.add_argument("--designs", default=None, help="only these, e.g. 9x1x2,6x4x2")
    ap.add_argument("--nulls-only", action="store_true", help="only the null rows (identical players)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    run_order = RUN_ORDER
    if args.designs:
        run_order = [tuple(int(x) for x in d.split("x")) for d in args.designs.split(",")]
    cells: list[dict[str, Any]] = []
    names = [f"m{i:02d}" for i in range(9)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for design in [] if args.nulls_only else run_order:
            for spread in SPREADS:
                cell: dict[str, Any] = {"design": "×".join(map(str, design)), "spread": spread}
                hits = {k: [0, 0] for k in KINDS}
                omitted = {k: 0 for k in KINDS}
                for skill in ("correlated", "uncorrelated"):
                    truth = truth_for(pool, design, spread, skill, args.truth_reps)
                    tmap = {k: dict(zip(names, truth[k], strict=False)) for k in KINDS}
                    rho = float(_spearman_rows(truth["author"], truth["solver"]))
                    reps = list(pool.map(one_rep, [(design, spread, skill, s, args.draws) for s in range(args.reps)]))
                    dh = dt = 0
                    for rep in reps:
                        for k in KINDS:
                            if rep[k]["note"]:
                                omitted[k] += 1
                                continue
                            h, t = cover(rep[k]["rows"], tmap[k])
                            hits[k][0] += h
                            hits[k][1] += t
                        lo, hi, _ = rep["div"]
                        if lo is not None:
                            dt += 1
                            dh += lo - 1e-9 <= rho <= hi + 1e-9
                    cell[f"div_{skill}"] = (dh / dt if dt else None, rho, dt)
                for k in KINDS:
                    cell[k] = (hits[k][0] / hits[k][1] if hits[k][1] else None, omitted[k])
                cells.append(cell)
                print(json.dumps(cell), flush=True)
        nulls = []
        for design in [d for d in DESIGNS if d in run_order]:
            reps = list(pool.map(one_rep, [(design, 0.0, "null", s, args.draws) for s in range(args.reps)]))
            row = {"design": "×".join(map(str, design))}
            for k in KINDS:
                live = [r for r in reps if not r[k]["note"]]
                row[k] = (np.mean([any((x[3] or 1) > 1 for x in r[k]["rows"]) for r in live]) if live else None)
            row["sig_edge"] = float(np.mean([r["sig_edge"] for r in reps]))
            row["sig_cycle"] = float(np.mean([r["sig_cycle"] for r in reps]))
            row["verdict"] = float(np.mean([r["verdict"] for r in reps]))
            nulls.append(row)
            print(json.dumps(row), flush=True)
    elapsed = time.perf_counter() - t0

    def fmt(v: Any) -> str:
        return "omitted" if v is None else f"{v:.3f}"

    def div(d: tuple) -> str:
        given = d[2] / args.reps
        if d[0] is None:
            return f"omitted (ρ {d[1]:.2f})"
        return f"{d[0]:.3f} (ρ {d[1]:.2f}; given in {given:.0%})"

    print(f"\n{args.reps} replicates per cell, {args.draws} bootstrap draws, truth from {args.truth_reps} runs; "
          f"{elapsed / 60:.1f} min with {args.jobs} processes\n")
    print("| design | spread | duel | author | solver | divergence, correlated skills | divergence, uncorrelated skills |")
    print("|---|---|---|---|---|---|---|")
    cells.sort(key=lambda c: (DESIGNS.index(tuple(int(x) for x in c["design"].split("×"))), c["spread"]))
    for c in cells:
        dc, du = c["div_correlated"], c["div_uncorrelated"]
        print(f"| {c['design']} | ±{c['spread']} | {fmt(c['duel'][0])} | {fmt(c['author'][0])} | {fmt(c['solver'][0])} "
              f"| {div(dc)} | {div(du)} |")
    print("\nNull (identical players): share of runs with a false claim\n")
    print("| design | rank claim: duel | author | solver | significant edge | significant cycle | correlate verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in nulls:
        print(f"| {r['design']} | {fmt(r['duel'])} | {fmt(r['author'])} | {fmt(r['solver'])} | {r['sig_edge']:.3f} "
              f"| {r['sig_cycle']:.3f} | {r['verdict']:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cells": cells, "nulls": nulls, "args": vars(args), "seconds": elapsed}, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
