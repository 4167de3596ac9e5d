"""Coverage of the rating and divergence intervals, and null rates of the claims, on simulated
tournaments with known truth: the table in docs/analysis.md.

Designs are players × environments per author × rounds (4 seeds, 1 trial); abilities are evenly
spread over ±spread logits, teaching effects 1 ± spread in the same order ("correlated") or in
a fixed scrambled order ("uncorrelated"). The truth of each rating is the Bradley–Terry fit of
its *expected* comparison matrix at that design (averaged over `--truth-reps` simulated runs):
what the pooled fit estimates. An interval covers when truth ∈ [low, high] (an open bound is
infinite). Null rows use identical players: any rank claim (a rank > 1), any significant cycle
edge or cycle, and any `correlate` verdict on pure-noise gains count as false claims.

`--simulator uneven` (the default) draws the heterogeneous environments of
`envduels.analysis.simulate` (difficulty and hint-effect mixtures, per-solver hint sensitivity,
interaction and seed noise, 5–15% of episodes absent, `incomplete` or `error`); `--simulator
alike` the earlier environments that differ only by ±0.5 logits. Every share comes with its
Wilson 95% interval (for coverage over intervals, which are not independent within a
tournament, so read it as a floor on the uncertainty). Duel ranks withheld by the design are
counted apart, and the rank test's own claims are shown beside them ("test alone").

Run: `python bench/coverage_table.py [--reps 100] [--draws 200] [--jobs 2] [--designs 9x10x1]
[--nulls-only] [--simulator uneven|alike]` (prints markdown).
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
from envduels.analysis.divergence import MIN_RELIABILITY, _spearman_rows, divergence
from envduels.analysis.ratings import (
    ELO_CENTER,
    ELO_SCALE,
    author_builder,
    compute_ratings,
    duel_builder,
    fit_bradley_terry,
    holm_above,
    make_design,
    solver_builder,
)
from envduels.analysis.transfer import correlate_gains, unit_predictors
from envduels.analysis.transitivity import transitivity, wilson

DESIGNS = [(6, 4, 2), (9, 10, 1), (9, 1, 2)]
RUN_ORDER = [(9, 1, 2), (6, 4, 2), (9, 10, 1)]  # the design most at risk first, to learn of it early
SPREADS = [0.4, 1.5]
KINDS = ("duel", "author", "solver")
SCRAMBLE = {6: [3, 0, 5, 1, 4, 2], 9: [4, 8, 1, 6, 0, 3, 7, 2, 5]}


def params(players: int, spread: float, skill: str) -> dict[str, Any]:
    ability = np.linspace(-spread, spread, players)
    if skill == "null":  # identical in every respect, hint sensitivity included (uneven environments)
        return {"ability": [0.0] * players, "author_difficulty": [0.0] * players, "author_teaching": [1.0] * players,
                "hint_sensitivity": [1.0] * players}
    order = np.arange(players) if skill == "correlated" else np.array(SCRAMBLE[players])
    return {"ability": list(ability), "author_difficulty": [0.0] * players,
            "author_teaching": list(1.0 + ability[order])}


SIMULATOR = ["uneven"]  # set by main() before the worker processes start (they fork)
GAIN_DRAWS = [1]  # likewise: pure-noise gain vectors per null tournament (`--gain-draws`)


def simulate(design: tuple[int, int, int], spread: float, skill: str, seed: int) -> Any:
    n, k, r = design
    return simulate_tournament(players=n, envs_per_author=k, rounds=r, seeds=4, seed=seed, transcripts=False,
                               environments=SIMULATOR[0], **params(n, spread, skill))


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
        out[kind] = {"note": rt.note, "rank_note": rt.rank_note,
                     "rows": [(r["model"], r["ci_low"], r["ci_high"], r["rank"]) for r in rt.rows]}
    duel = ratings["duel"]
    out["duel_phi"] = duel.overdispersion
    if duel.pair_p is not None:  # the duel rank test's claims, also where the design withholds ranks
        keep = np.flatnonzero(duel.rated)
        above = holm_above(duel.theta[:, None] - duel.theta[None, :], np.zeros((len(keep),) * 2), keep,
                           p=duel.pair_p)
        out["duel_test_claim"] = bool(above.any())
    t = transitivity(duel.scores, duel.players, duel.theta, edge_p=duel.edge_p, tie_rate=duel.tie_rate,
                     reference_draws=0)
    n = len(duel.players)
    m = max(int(np.triu((duel.scores + duel.scores.T) > 0, 1).sum()), 1)
    out["sig_edge"] = bool((duel.edge_p[~np.eye(n, dtype=bool)] <= 0.05 / m / 2).any())
    out["sig_cycle"] = t["significant_cycles"] > 0
    dv = divergence(ratings["author"], ratings["solver"])
    out["div"] = (dv["ci_low"], dv["ci_high"], dv["spearman"])
    if dv["ci_low"] is not None:  # each given interval, to read the misses one by one
        out["div_given"] = {"seed": seed, "rho": dv["spearman"], "low": dv["ci_low"], "high": dv["ci_high"],
                            "reliability": (dv["reliability_author"], dv["reliability_solver"])}
    out["div_excludes_0"] = dv["ci_low"] is not None and (dv["ci_low"] > 0 or dv["ci_high"] < 0)
    # every run's ungated interval with both reliabilities (the draws' variance alone, the gate
    # before 2026-12-01; and with their shift, today's), so one run compares the two gates
    old = divergence(ratings["author"], ratings["solver"], min_reliability=0.0, shift=False)
    if old["ci_low"] is not None:
        out["div_all"] = {"seed": seed, "rho": old["spearman"], "low": old["ci_low"], "high": old["ci_high"],
                          "variance_only": (old["reliability_author"], old["reliability_solver"]),
                          "with_shift": (dv["reliability_author"], dv["reliability_solver"])}
    if skill == "null":  # correlate on pure-noise gains, one row per author pool
        verdicts = noise_verdicts(run, seed, GAIN_DRAWS[0])
        out["verdict"] = verdicts[0]
        out["verdicts"] = (sum(verdicts), len(verdicts))
    return out


def noise_verdicts(run: Any, seed: int, draws: int) -> list[bool]:
    """Whether `correlate` prints a verdict ("... gained higher/lower") on each of `draws` pure-
    noise gain vectors (one gain per author pool) against the run's predictors; draw 0 is the
    one gain vector per run of the earlier tables."""
    pred = unit_predictors(run.tables.episodes, "author")
    verdicts = []
    for g in range(draws):
        gen = np.random.default_rng(seed if g == 0 else [seed, g])
        gains = pd.Series(gen.normal(size=len(pred)), index=pred.index)
        res = correlate_gains(pred, gains, unit="author", bootstrap=0, permutations=999, seed=seed)
        verdicts.append(any("gained" in r.conclusion for r in res.results))
    return verdicts


def correlate_only(args: tuple) -> tuple[int, int]:
    """(false verdicts, gain vectors) of one null tournament, without rating it."""
    design, seed, draws = args
    verdicts = noise_verdicts(simulate(design, 0.0, "null", seed), seed, draws)
    return sum(verdicts), len(verdicts)


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


def print_gates(cells: list[dict[str, Any]]) -> None:
    """The divergence interval's coverage under the two reliability gates, from the same runs'
    ungated intervals (`div_*_all`): the draws' variance alone (before 2026-12-01) and with their
    shift from the estimate (today's), both at MIN_RELIABILITY."""
    rows = []
    for c in cells:
        for skill in ("correlated", "uncorrelated"):
            got = c.get(f"div_{skill}_all")
            if not got:
                continue
            runs = c[f"div_{skill}"][4]
            line = f"| {c['design']} | ±{c['spread']} | {skill} | {runs:,} |"
            for gate in ("variance_only", "with_shift"):
                given = [g for g in got if min(g[gate]) >= MIN_RELIABILITY]
                hit = sum(g["low"] - 1e-9 <= g["truth"] <= g["high"] + 1e-9 for g in given)
                if given:
                    lo, hi = wilson(hit, len(given), 0.05)
                    line += f" {hit}/{len(given)} = {hit / len(given):.3f} [{max(lo, 0):.2f}, {min(hi, 1):.2f}] |"
                else:
                    line += " none given |"
            rows.append(line)
    if rows:
        print(f"\nDivergence interval by reliability gate (≥ {MIN_RELIABILITY}), the same runs: covered / given\n")
        print("| design | spread | skills | runs | variance alone (before) | with the shift (today) |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))


def print_tables(cells: list[dict[str, Any]], nulls: list[dict[str, Any]], gain_draws: int = 1) -> None:
    """The coverage and null tables in markdown, from cells and null rows (one run's or merged)."""

    def share(hit: int, tot: int) -> str:
        if not tot:
            return "omitted"
        lo, hi = wilson(hit, tot, 0.05)
        return f"{hit / tot:.3f} [{max(lo, 0):.2f}, {min(hi, 1):.2f}]"

    def cov(c: tuple) -> str:
        return "omitted" if c[0] is None else share(c[2], c[3])

    def div(d: tuple | None) -> str:
        if d is None:
            return "not run"
        given = d[2] / d[4]
        if d[0] is None:
            return f"omitted (ρ {d[1]:.2f})"
        return f"{share(d[3], d[2])} (ρ {d[1]:.2f}; given in {given:.0%})"

    print("| design | spread | duel | author | solver | duel φ (median) | divergence, correlated skills "
          "| divergence, uncorrelated skills |")
    print("|---|---|---|---|---|---|---|---|")
    cells.sort(key=lambda c: (DESIGNS.index(tuple(int(x) for x in c["design"].split("×"))), c["spread"]))
    for c in cells:
        dc, du = c.get("div_correlated"), c.get("div_uncorrelated")
        print(f"| {c['design']} | ±{c['spread']} | {cov(c['duel'])} | {cov(c['author'])} | {cov(c['solver'])} "
              f"| {np.median(c['duel_phi']):.2f} | {div(dc)} | {div(du)} |")
    print("\nNull (identical players; runs per design in the first column): share of runs with a false claim\n")
    print("| design | rank claim: duel | duel rank test alone | author | solver | significant edge "
          "| significant cycle | divergence excludes 0 | correlate verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in nulls:
        print(f"| {r['design']} ({r['reps']:,} runs) | {share(*r['duel']) if r['duel'][1] else 'withheld'} | {share(*r['duel_test'])} "
              f"| {share(*r['author'])} | {share(*r['solver'])} | {share(*r['sig_edge'])} | {share(*r['sig_cycle'])} "
              f"| {share(*r['div_excludes_0'])} | {share(*r['verdict'])} |")
    if gain_draws > 1:
        print(f"\n`correlate` verdicts over {gain_draws} pure-noise gain vectors per null tournament:\n")
        print("| design | gain vectors | false verdicts |")
        print("|---|---|---|")
        for r in nulls:
            print(f"| {r['design']} | {r['verdicts'][1]:,} | {share(*r['verdicts'])} |")

def merge(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Cells and null rows of several `--json` files (chunks of seeds) summed into one table.

    Counts add up; a cell's divergence ρ is its truth's, the same in every chunk (truth seeds do
    not move with `--seed-offset`). Returns the cells, the null rows and each file's arguments.
    """
    cells: dict[tuple[str, float], dict[str, Any]] = {}
    nulls: dict[str, dict[str, Any]] = {}
    runs = []
    for path in paths:
        with open(path) as fh:
            got = json.load(fh)
        runs.append(got["args"])
        for c in got["cells"]:
            into = cells.setdefault((c["design"], c["spread"]), {"design": c["design"], "spread": c["spread"]})
            into.setdefault("duel_phi", []).extend(c["duel_phi"])
            for k in KINDS:
                _, om, hit, tot = into.get(k, (None, 0, 0, 0))
                om, hit, tot = om + c[k][1], hit + c[k][2], tot + c[k][3]
                into[k] = (hit / tot if tot else None, om, hit, tot)
            for key in ("div_correlated_given", "div_uncorrelated_given", "div_correlated_all",
                        "div_uncorrelated_all"):
                into.setdefault(key, []).extend(c.get(key, []))
            for key in ("div_correlated", "div_uncorrelated"):
                if key not in c:
                    continue
                _, rho, dt, dh, n = into.get(key, (None, c[key][1], 0, 0, 0))
                dt, dh, n = dt + c[key][2], dh + c[key][3], n + c[key][4]
                into[key] = (dh / dt if dt else None, rho, dt, dh, n)
        for r in got["nulls"]:
            into = nulls.setdefault(r["design"], {"design": r["design"], "reps": 0})
            into["reps"] += r["reps"]
            for key, val in r.items():
                if key in ("design", "reps"):
                    continue
                old = into.get(key, (0,) * len(val))
                into[key] = tuple(a + b for a, b in zip(old, val, strict=True))
    order = {"×".join(map(str, d)): i for i, d in enumerate(DESIGNS)}
    merged = sorted(cells.values(), key=lambda c: (order[c["design"]], c["spread"]))
    return merged, sorted(nulls.values(), key=lambda r: order[r["design"]]), runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--truth-reps", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", default=None, help="also save the raw cells here")
    ap.add_argument("--designs", default=None, help="only these, e.g. 9x1x2,6x4x2")
    ap.add_argument("--nulls-only", action="store_true", help="only the null rows (identical players)")
    ap.add_argument("--spreads", default=None, help="only these spreads, e.g. 1.5 (coverage cells)")
    ap.add_argument("--skills", default=None, help="only these skill orders: correlated,uncorrelated")
    ap.add_argument("--no-nulls", action="store_true", help="skip the null rows")
    ap.add_argument("--correlate-only", action="store_true",
                    help="only the correlate verdicts on null tournaments (with --gain-draws), no ratings")
    ap.add_argument("--gain-draws", type=int, default=1,
                    help="null rows: pure-noise gain vectors per tournament for the correlate verdict")
    ap.add_argument("--seed-offset", type=int, default=0, help="first tournament seed (more runs of a cell or of the null rows)")
    ap.add_argument("--simulator", choices=("uneven", "alike"), default="uneven",
                    help="environments of envduels.analysis.simulate (default uneven)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                    help="print one table from the --json files of several runs (e.g. chunks of --seed-offset)")
    args = ap.parse_args()
    if args.merge:
        cells, nulls, runs = merge(args.merge)
        sims = sorted({r["simulator"] for r in runs})
        print(f"\n{', '.join(sims)} environments; {len(runs)} runs merged ({sum(r['reps'] for r in runs):,} "
              "replicates in all; the counts per cell are in the table); [Wilson 95%]\n")
        print_tables(cells, nulls)
        print_gates(cells)
        return
    SIMULATOR[0] = args.simulator
    GAIN_DRAWS[0] = max(1, args.gain_draws)
    t0 = time.perf_counter()
    run_order = RUN_ORDER
    if args.designs:
        run_order = [tuple(int(x) for x in d.split("x")) for d in args.designs.split(",")]
    cells: list[dict[str, Any]] = []
    names = [f"m{i:02d}" for i in range(9)]
    if args.correlate_only:
        with ProcessPoolExecutor(args.jobs) as pool:
            print(f"`correlate` on pure-noise gains, {args.reps} null tournaments per design ({args.simulator} "
                  f"environments), {args.gain_draws} gain vectors each; [Wilson 95%]\n")
            print("| design | gain vectors | false verdicts |")
            print("|---|---|---|")
            for design in [d for d in DESIGNS if d in run_order]:
                seeds = range(args.seed_offset, args.seed_offset + args.reps)
                got = list(pool.map(correlate_only, [(design, s, max(1, args.gain_draws)) for s in seeds]))
                hit, tot = sum(g[0] for g in got), sum(g[1] for g in got)
                lo, hi = wilson(hit, tot, 0.05)
                print(f"| {'×'.join(map(str, design))} | {tot:,} | {hit / tot:.3f} [{max(lo, 0):.3f}, "
                      f"{min(hi, 1):.3f}] |", flush=True)
        print(f"\n{(time.perf_counter() - t0) / 60:.1f} min")
        return
    with ProcessPoolExecutor(args.jobs) as pool:
        for design in [] if args.nulls_only else run_order:
            for spread in [float(x) for x in args.spreads.split(",")] if args.spreads else SPREADS:
                cell: dict[str, Any] = {"design": "×".join(map(str, design)), "spread": spread}
                hits = {k: [0, 0] for k in KINDS}
                omitted = {k: 0 for k in KINDS}
                for skill in args.skills.split(",") if args.skills else ("correlated", "uncorrelated"):
                    truth = truth_for(pool, design, spread, skill, args.truth_reps)
                    tmap = {k: dict(zip(names, truth[k], strict=False)) for k in KINDS}
                    rho = float(_spearman_rows(truth["author"], truth["solver"]))
                    seeds = range(args.seed_offset, args.seed_offset + args.reps)
                    reps = list(pool.map(one_rep, [(design, spread, skill, s, args.draws) for s in seeds]))
                    dh = dt = 0
                    phis = cell.setdefault("duel_phi", [])
                    for rep in reps:
                        phis.append(rep["duel_phi"])
                        for k in KINDS:
                            if rep[k]["note"]:
                                omitted[k] += 1
                                continue
                            h, t = cover(rep[k]["rows"], tmap[k])
                            hits[k][0] += h
                            hits[k][1] += t
                        lo, hi, _ = rep["div"]
                        if "div_given" in rep:
                            cell.setdefault(f"div_{skill}_given", []).append(rep["div_given"] | {"truth": rho})
                        if "div_all" in rep:
                            cell.setdefault(f"div_{skill}_all", []).append(rep["div_all"] | {"truth": rho})
                        if lo is not None:
                            dt += 1
                            dh += lo - 1e-9 <= rho <= hi + 1e-9
                    cell[f"div_{skill}"] = (dh / dt if dt else None, rho, dt, dh, len(reps))
                for k in KINDS:
                    cell[k] = (hits[k][0] / hits[k][1] if hits[k][1] else None, omitted[k], hits[k][0], hits[k][1])
                cells.append(cell)
                print(json.dumps(cell, default=float), flush=True)
        nulls = []
        for design in [] if args.no_nulls else [d for d in DESIGNS if d in run_order]:
            seeds = range(args.seed_offset, args.seed_offset + args.reps)
            reps = list(pool.map(one_rep, [(design, 0.0, "null", s, args.draws) for s in seeds]))
            row: dict[str, Any] = {"design": "×".join(map(str, design)), "reps": len(reps)}
            for k in KINDS:
                live = [r for r in reps if not r[k]["note"] and not r[k]["rank_note"]]
                row[k] = (int(sum(any((x[3] or 1) > 1 for x in r[k]["rows"]) for r in live)), len(live))
            row["duel_test"] = (int(sum(r.get("duel_test_claim", False) for r in reps)), len(reps))
            for key in ("sig_edge", "sig_cycle", "verdict", "div_excludes_0"):
                row[key] = (int(sum(bool(r[key]) for r in reps)), len(reps))
            row["verdicts"] = tuple(int(sum(r["verdicts"][q] for r in reps)) for q in (0, 1))
            nulls.append(row)
            print(json.dumps(row, default=float), flush=True)
    elapsed = time.perf_counter() - t0
    print(f"\n{args.simulator} environments; {args.reps} replicates per cell and skill order, {args.draws} bootstrap "
          f"draws, truth from {args.truth_reps} runs; {elapsed / 60:.1f} min with {args.jobs} processes; "
          "[Wilson 95%]\n")
    print_tables(cells, nulls, args.gain_draws)
    print_gates(cells)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cells": cells, "nulls": nulls, "args": vars(args), "seconds": elapsed}, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
