"""The divergence test on simulated tournaments with known truth: its false-claim rate where
author strength is a non-decreasing function of solver strength (several shapes) and its power
where it is not; the tables of docs/analysis.md, "The divergence test".

Each tournament is rated exactly as `analyze` rates a run (`compute_ratings`, then
`divergence`), with the author and solver ratings only (the duel plays no part in the test).
A cell is a generator, a design (players × environments per author × rounds, 4 seeds) and a
shape (hint-writing skill and environment difficulty as functions of solving skill); abilities
are evenly spread over ±1.5 logits. Generators: `uneven` (`simulate_tournament(environments=
"uneven")`) and `steps` (bench/steps_generator.py, written apart from it). Every share comes
with its Wilson 95% interval.

Run: `python bench/divergence_table.py --cells uneven:constant:9x10x1,... --reps 1000 --json
out.json --progress progress.txt`; `--merge a.json b.json` prints one table from several runs
(chunks of `--seed-offset`); `--list` names the cells.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from envduels.analysis import compute_ratings, divergence, matched_pairs, simulate_tournament
from envduels.analysis.divergence_test import divergence_test
from envduels.analysis.ratings import MIN_AUTHOR_ENVS, RIDGE, fit_bradley_terry
from envduels.analysis.simulate import FrameTables
from envduels.analysis.transitivity import wilson

sys.path.insert(0, str(Path(__file__).parent))
from steps_generator import steps_tournament  # noqa: E402  (a bench module beside this one)

SCRAMBLE = {6: [3, 0, 5, 1, 4, 2], 9: [4, 8, 1, 6, 0, 3, 7, 2, 5]}  # the coverage table's "uncorrelated"
NULL_SHAPES = ("constant", "linear", "step", "plateau", "aligned")
SHAPES = {
    # shape: what it is (hint-writing skill, and the difficulty of a model's environments, against
    # solving skill); "null" where author strength is a non-decreasing function of solving skill
    "constant": "every author alike (the least favourable null)",
    "linear": "hint-writing skill rises with solving skill (plan's \"same order\")",
    "step": "hint-writing skill low for the weaker half, high for the stronger",
    "plateau": "hint-writing skill rises over the weaker half, flat over the stronger",
    "aligned": "the best solver writes the best hints and the hardest environments (the issue's no divergence)",
    "strong": "hint quality and environment difficulty run exactly opposite to solving skill (the issue's strong "
              "divergence)",
    "reversed": "hint-writing skill opposite to solving skill, difficulty alike (plan's \"reversed\")",
    "scrambled": "hint-writing skill in an order unrelated to solving skill (the coverage table's \"uncorrelated\")",
}


def uneven_params(n: int, shape: str) -> dict[str, list[float]]:
    ab = np.linspace(-1.5, 1.5, n)
    zero = np.zeros(n)
    teach, diff = {
        "constant": (np.ones(n), zero),
        "linear": (1.0 + ab, zero),
        "step": (np.where(ab > 0, 1.5, 0.5), zero),
        "plateau": (1.0 + np.minimum(ab, 0.0), zero),
        "aligned": (1.0 + ab, ab),
        "strong": (1.0 - ab, -ab),
        "reversed": (1.0 - ab, zero),
        "scrambled": (1.0 + ab[SCRAMBLE[n]] if n in SCRAMBLE else 1.0 + ab[::-1], zero),
    }[shape]
    return {"ability": ab.tolist(), "author_teaching": teach.tolist(), "author_difficulty": diff.tolist()}


def steps_params(n: int, shape: str) -> dict[str, list[float]]:
    up = np.linspace(0.0, 1.0, n)
    quality, steps = {
        "constant": (np.full(n, 0.55), np.full(n, 3.0)),
        "linear": (0.1 + 0.9 * up, np.full(n, 3.0)),
        "step": (np.where(up > 0.5, 0.8, 0.3), np.full(n, 3.0)),
        "plateau": (np.minimum(0.1 + 1.8 * up, 1.0), np.full(n, 3.0)),
        "aligned": (0.1 + 0.9 * up, 1.5 + 4.5 * up),
        "strong": (1.0 - 0.9 * up, 6.0 - 4.5 * up),
        "reversed": (1.0 - 0.9 * up, np.full(n, 3.0)),
        "scrambled": ((0.1 + 0.9 * up)[SCRAMBLE[n]] if n in SCRAMBLE else 1.0 - 0.9 * up, np.full(n, 3.0)),
    }[shape]
    return {"skill": np.linspace(-1.5, 1.5, n).tolist(), "hint_quality": quality.tolist(), "steps": steps.tolist()}


def tables(cell: str, seed: int) -> FrameTables:
    generator, shape, design = cell.split(":")
    n, k, r = (int(x) for x in design.split("x"))
    if generator == "uneven":
        return simulate_tournament(players=n, envs_per_author=k, rounds=r, seeds=4, seed=seed, transcripts=False,
                                   environments="uneven", **uneven_params(n, shape)).tables
    if r != 1:
        raise SystemExit("the steps generator plays one round")
    return steps_tournament(envs_per_author=k, seed=seed, **steps_params(n, shape))


MIN_ENVIRONMENTS = [MIN_AUTHOR_ENVS]  # set by main() before the worker processes start (they fork)


def one(args: tuple[str, int, int]) -> dict[str, Any]:
    """One tournament rated as `analyze` rates a run: the test and the rank claims behind it."""
    cell, seed, draws = args
    with threadpool_limits(limits=1, user_api="blas"):
        t = tables(cell, seed)
        r = compute_ratings(t, matched_pairs(t.episodes), bootstrap=draws, seed=seed, kinds=("author", "solver"))
        d = divergence(r["author"], r["solver"], seed=seed, min_environments=MIN_ENVIRONMENTS[0])
    author, solver = r["author"], r["solver"]
    return {"seed": seed, "p": d["p_value"], "claim": d["claim"], "note": d["test_note"], "rho": d["spearman"],
            "certain": len(d["crossings"]),
            "author_claims": None if author.above is None else int(author.above.sum()),
            "author_claims_up": None if author.above is None else int(np.triu(author.above).sum()),
            "solver_claims": None if solver.above is None else int(solver.above.sum())}


def truth_sample(args: tuple[str, int]) -> dict[str, Any]:
    """What a cell's truth is estimated from: one tournament's author strengths (the test's mean
    environment lifts) and solver score matrix."""
    cell, seed = args
    with threadpool_limits(limits=1, user_api="blas"):
        t = tables(cell, seed)
        r = compute_ratings(t, matched_pairs(t.episodes), bootstrap=0, seed=seed, kinds=("author", "solver"))
        solver = r["solver"]
        theta = {m: float(solver.theta[i]) for i, m in enumerate(solver.players)}
        test = divergence_test(r["author"].lifts, theta, list(solver.players), permutations=1, seed=seed,
                               min_environments=2)
    return {"players": solver.players, "solver_scores": solver.scores.tolist(),
            "author_strength": None if isinstance(test, str) else test.author_strength}


def truth(pool: ProcessPoolExecutor, cell: str, reps: int) -> dict[str, Any]:
    """The cell's truth: each model's expected author strength (mean over `reps` tournaments) and
    its solver strength (the BT fit of their summed solver score matrices), and the Spearman
    between them."""
    got = list(pool.map(truth_sample, [(cell, 100_000 + i) for i in range(reps)]))
    players = got[0]["players"]
    scores = np.sum([g["solver_scores"] for g in got], axis=0)
    solver = fit_bradley_terry(scores, ridge=RIDGE)
    author = np.array([np.mean([g["author_strength"][m] for g in got if g["author_strength"]]) for m in players])
    from scipy.stats import spearmanr

    rho = float(spearmanr(author, solver).statistic) if np.ptp(author) > 0 else float("nan")
    return {"players": players, "author_strength": author.tolist(), "solver_theta": solver.tolist(), "rho": rho}


def share(hit: int, tot: int) -> str:
    if not tot:
        return "–"
    lo, hi = wilson(hit, tot, 0.05)
    return f"{hit / tot:.3f} [{max(lo, 0):.3f}, {min(hi, 1):.3f}]"


def print_table(cells: dict[str, dict[str, Any]]) -> None:
    print("| generator | design | shape | truth ρ (author strength, solver) | runs | claim (p < 0.05) "
          "| certain crossing | author rank claims per run | no test |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, c in cells.items():
        generator, shape, design = name.split(":")
        reps = c["reps"]
        tested = [r for r in reps if r["p"] is not None]
        claims = sum(bool(r["claim"]) for r in reps)
        crossing = sum(r["certain"] > 0 for r in reps)
        ac = [r["author_claims"] for r in reps if r["author_claims"] is not None]
        role = "null" if shape in NULL_SHAPES else "power"
        rho = c.get("truth", {}).get("rho")
        # every author alike: the truth has no order, and ρ of 50 tournaments' means would be noise
        truth_rho = "– (alike)" if shape == "constant" else "–" if rho is None or rho != rho else f"{rho:.2f}"
        print(f"| {generator} | {design.replace('x', '×')} | {shape} ({role}) | {truth_rho} | {len(reps):,} "
              f"| {share(claims, len(reps))} "
              f"| {share(crossing, len(reps))} | {np.mean(ac) if ac else float('nan'):.2f} "
              f"| {len(reps) - len(tested)} |")


def merge(paths: list[str]) -> dict[str, dict[str, Any]]:
    cells: dict[str, dict[str, Any]] = {}
    for path in paths:
        got = json.loads(Path(path).read_text())
        for name, c in got["cells"].items():
            into = cells.setdefault(name, {"reps": []})
            into["reps"].extend(c["reps"])
            if "truth" in c:
                into["truth"] = c["truth"]
    for c in cells.values():
        seeds = [r["seed"] for r in c["reps"]]
        if len(seeds) != len(set(seeds)):
            raise SystemExit("the merged files repeat a seed: give each run its own --seed-offset")
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="uneven:constant:9x10x1",
                    help="generator:shape:PxKxR, comma-separated (--list shows the shapes)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--draws", type=int, default=200, help="bootstrap draws (the test and rank claims use none)")
    ap.add_argument("--truth-reps", type=int, default=50, help="tournaments behind each cell's truth (0: none)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--progress", default=None, help="append a line here every 25 tournaments")
    ap.add_argument("--merge", nargs="+", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--min-environments", type=int, default=MIN_AUTHOR_ENVS,
                    help="the test's least environments per author (below the report's, to measure why it is 4)")
    args = ap.parse_args()
    MIN_ENVIRONMENTS[0] = args.min_environments
    if args.list:
        for shape, what in SHAPES.items():
            print(f"{shape:10} {'null' if shape in NULL_SHAPES else 'power':5}  {what}")
        return
    if args.merge:
        print_table(merge(args.merge))
        return
    out: dict[str, Any] = {"args": vars(args), "cells": {}}
    t0 = time.perf_counter()

    def note(line: str) -> None:
        if args.progress:
            with open(args.progress, "a") as fh:
                fh.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    with ProcessPoolExecutor(args.jobs) as pool:
        for cell in args.cells.split(","):
            entry: dict[str, Any] = {"reps": []}
            if args.truth_reps:
                entry["truth"] = truth(pool, cell, args.truth_reps)
                note(f"{cell}: truth ρ {entry['truth']['rho']:.3f}")
            seeds = range(args.seed_offset, args.seed_offset + args.reps)
            started = time.perf_counter()
            for k, rep in enumerate(pool.map(one, [(cell, s, args.draws) for s in seeds], chunksize=5), 1):
                entry["reps"].append(rep)
                if k % 25 == 0 or k == args.reps:
                    claims = sum(bool(r["claim"]) for r in entry["reps"])
                    note(f"{cell}: {k}/{args.reps} tournaments, claims {claims}, "
                         f"{(time.perf_counter() - started) / k:.2f} s each")
            entry["seconds"] = time.perf_counter() - started
            out["cells"][cell] = entry
            if args.json:  # after every cell, so a long run loses nothing done
                Path(args.json).write_text(json.dumps(out | {"seconds": time.perf_counter() - t0}, default=float))
    print_table(out["cells"])
    print(f"\n{(time.perf_counter() - t0) / 60:.1f} min with {args.jobs} process(es)")


if __name__ == "__main__":
    main()
