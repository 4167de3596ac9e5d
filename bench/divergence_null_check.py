"""Where the divergence test's level goes at the least favourable null (every author alike): the
shipped statistic beside three variants on the same tournaments, and each model's mean author
strength with and without the solver adjustment (docs/analysis.md, "The divergence test").

Variants: *unadjusted* (each environment's pooled lift over its panel, no solver's uptake of
hints scaled out), *plain* (the adjusted means unstudentized: Σ c_a m_a), *true order* (the
shipped statistic with the solver ranks of the simulated abilities in place of the estimated
ones). 1,999 rearrangements each.

Run: `python bench/divergence_null_check.py --cell steps:constant:9x10x1 --reps 400
[--seed-offset 0]` (cells as in bench/divergence_table.py; the abilities of its generators are
evenly spread, so the true order is the models' index order).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

from envduels.analysis import compute_ratings, matched_pairs
from envduels.analysis.divergence_test import _trend
from envduels.analysis.transitivity import wilson

sys.path.insert(0, str(Path(__file__).parent))
from divergence_table import tables  # noqa: E402  (a bench module beside this one)

REARRANGEMENTS = 1_999


def _plain(labels: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    n, rows = len(c), len(labels)
    flat = (labels + n * np.arange(rows)[:, None]).ravel()
    mean = np.bincount(flat, np.tile(values, rows), minlength=rows * n) / np.bincount(flat, minlength=rows * n)
    return (mean.reshape(rows, n) * c).sum(axis=1)


def one(cell: str, seed: int) -> dict[str, object]:
    t = tables(cell, seed)
    r = compute_ratings(t, matched_pairs(t.episodes), bootstrap=0, seed=seed, kinds=("author", "solver"))
    lifts, solver = r["author"].lifts, r["solver"]
    gamma, has = lifts.solver_adjusted()
    own, adjusted = lifts.author[has], gamma[has]
    unadjusted = lifts.num[has].sum(axis=1) / lifts.den[has].sum(axis=1)
    n = len(lifts.authors)
    rank = rankdata([solver.theta[solver.players.index(m)] for m in lifts.authors])
    c, c_true = rank - rank.mean(), np.arange(n) - (n - 1) / 2.0
    rng = np.random.default_rng(seed)
    shuffled = np.take_along_axis(np.broadcast_to(own, (REARRANGEMENTS, len(own))),
                                  np.argsort(rng.random((REARRANGEMENTS, len(own))), axis=1), axis=1)

    def p(stat, values: np.ndarray, cc: np.ndarray) -> float:
        obs = stat(own[None], values, cc)[0]
        return (1 + int(np.sum(stat(shuffled, values, cc) <= obs + 1e-12))) / (1 + REARRANGEMENTS)

    count = np.bincount(own, minlength=n)
    return {"shipped": p(_trend, adjusted, c), "unadjusted": p(_trend, unadjusted, c),
            "plain": p(_plain, adjusted, c), "true order": p(_trend, adjusted, c_true),
            "adjusted_mean": np.bincount(own, adjusted, minlength=n) / count,
            "unadjusted_mean": np.bincount(own, unadjusted, minlength=n) / count}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cell", default="steps:constant:9x10x1")
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--seed-offset", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        got = [one(args.cell, s) for s in range(args.seed_offset, args.seed_offset + args.reps)]
    print(f"{args.cell}, {len(got)} tournaments (seeds {args.seed_offset}–{args.seed_offset + args.reps - 1}); "
          "share with p < 0.05 [Wilson 95%]\n")
    for key in ("shipped", "unadjusted", "plain", "true order"):
        hit = sum(g[key] < 0.05 for g in got)  # type: ignore[operator]
        lo, hi = wilson(hit, len(got), 0.05)
        print(f"- {key}: {hit / len(got):.4f} [{max(lo, 0):.3f}, {min(hi, 1):.3f}]")
    for key in ("adjusted_mean", "unadjusted_mean"):
        values = np.array([g[key] for g in got])
        print(f"- {key} by model (weakest solver first): {np.round(values.mean(axis=0), 4).tolist()} "
              f"(standard errors up to {values.std(axis=0).max() / np.sqrt(len(got)):.4f})")
    print(f"\n{(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
