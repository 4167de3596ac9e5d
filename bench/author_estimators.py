"""How the power of author claims depends on the author estimator (issue 34; docs/analysis.md,
"How much the author statistic matters"). Side by side on the same simulated tournaments:

- author rank claims (Holm at 0.05 over every pair, each pair an exact permutation test of
  environments between the two authors) with three pair statistics: **points** (each author's
  Bradley–Terry points solver by solver, the statistic on main before issue 34, copied here),
  **mean lift** (the difference of mean environment lift on the two's panel: today's), and a
  **mixed model** (logit hint effects with environment random effects: each environment's
  effect from the item-response fit, `analysis.irt`, with its standard error from the fit's
  information, pooled per author with weights 1/(σ²_env + se²), σ²_env by DerSimonian–Laird);
- the divergence test with three author-strength estimators: the author rating's θ (Pearson
  with the solver ranks, θ refitted for every rearrangement), mean lift (today's, the
  studentized trend; and beside it the same means unstudentized, Pearson with the ranks) and the
  mixed model (its weighted means, studentized by 1/Σ w).

Run: `python bench/author_estimators.py --cells uneven:strong:9x10x1,uneven:constant:9x10x1
--reps 300 --json out.json` (cells as in bench/divergence_table.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

from envduels.analysis import compute_ratings, divergence, matched_pairs
from envduels.analysis.irt import IRT_RIDGE, fit_irt
from envduels.analysis.ratings import (
    RIDGE,
    author_builder,
    fit_bradley_terry,
    holm_above,
    make_design,
)
from envduels.analysis.transitivity import wilson

sys.path.insert(0, str(Path(__file__).parent))
from divergence_table import tables  # noqa: E402  (a bench module beside this one)

PERMUTATIONS = 999
REFINE = 1_999


# --- the points statistic, as on main at 236244b (rank_tests.author_pair_pvalues) -------------

def _points_against(lifts: np.ndarray, ref: np.ndarray, offset: np.ndarray) -> np.ndarray:
    x = lifts + offset[None, :]
    start = np.searchsorted(ref, offset - 2.0, side="left")[None, :]
    pts = np.searchsorted(ref, x - 1e-12, side="left") + np.searchsorted(ref, x + 1e-12, side="right") - 2 * start
    return np.where(np.isnan(lifts), 0, pts).sum(axis=1)


def _points_statistic(first: np.ndarray, num: np.ndarray, den: np.ndarray, rest: np.ndarray) -> np.ndarray:
    f = first.astype(float)
    da, na = f @ den, f @ num
    db, nb = den.sum(axis=0) - da, num.sum(axis=0) - na
    with np.errstate(invalid="ignore", divide="ignore"):
        la = np.where(da > 0, na / np.where(da > 0, da, 1.0), np.nan)
        lb = np.where(db > 0, nb / np.where(db > 0, db, 1.0), np.nan)
    diff = la - lb
    t = 2.0 * ((diff > 1e-12).sum(axis=1) - (diff < -1e-12).sum(axis=1))
    if len(rest):
        offset = 4.0 * np.arange(rest.shape[1])
        ref = rest + offset[None, :]
        ref = np.sort(ref[~np.isnan(ref)])
        t = t + _points_against(la, ref, offset) - _points_against(lb, ref, offset)
    return t


def _points_p(count: int, rng: np.random.Generator, first: int, num: np.ndarray, den: np.ndarray, rest: np.ndarray,
              signed: float) -> float:
    hits = 0
    for s0 in range(0, count, 2000):
        k = min(2000, count - s0)
        split = np.argsort(rng.random((k, len(num))), axis=1) < first
        hits += int(np.sum(np.abs(_points_statistic(split, num, den, rest)) >= abs(signed) - 1e-9))
    return (1 + hits) / (1 + count)


def points_pvalues(num: np.ndarray, den: np.ndarray, authors: Sequence[str], solvers: Sequence[str],
                   own: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n, m = len(authors), len(solvers)
    num3, den3 = num.reshape(-1, n, m), den.reshape(-1, n, m)
    rows = np.flatnonzero(own >= 0)
    env_num, env_den = np.zeros((len(own), m)), np.zeros((len(own), m))
    env_num[rows], env_den[rows] = num3[rows, own[rows]], den3[rows, own[rows]]
    tot = den3.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        lift = np.where(tot > 0, num3.sum(axis=0) / tot, np.nan)
    solver_is = np.array([[s == a for s in solvers] for a in authors], dtype=bool)
    lift = np.where(solver_is, np.nan, lift)
    p, stat = np.full((n, n), np.nan), np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            pi, pj = np.flatnonzero(own == i), np.flatnonzero(own == j)
            pool = np.concatenate([pi, pj])
            panel = ~solver_is[i] & ~solver_is[j]
            pn, pd_ = env_num[pool][:, panel], env_den[pool][:, panel]
            rest = lift[[k for k in range(n) if k not in (i, j)]][:, panel]
            first = np.arange(len(pool)) < len(pi)
            signed = float(_points_statistic(first[None], pn, pd_, rest)[0])
            value = _points_p(PERMUTATIONS, rng, len(pi), pn, pd_, rest, signed)
            value = _points_p(REFINE, rng, len(pi), pn, pd_, rest, signed) if value <= 0.05 else value
            p[i, j] = value if signed >= 0 else np.nan
            p[j, i] = value if signed <= 0 else np.nan
            stat[i, j], stat[j, i] = signed, -signed
    return p, stat


# --- the mixed model: logit hint effects with environment random effects -----------------------

def environment_effects(pairs: pd.DataFrame, env_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each environment's logit hint effect (the item-response fit) and its standard error from
    the fit's information for that effect (the hinted episodes' Σ p(1 − p), plus the ridge);
    an infinite one for an environment without pairs."""
    irt = fit_irt(pairs)
    ability = {r["model"]: r["ability"] for r in irt["solvers"]}
    env = {r["id"]: r for r in irt["environments"]}
    cells = pairs.groupby(["env_id", "solver"]).size().reset_index(name="count")
    cells = cells[cells["env_id"].isin(env)]
    eta = (cells["solver"].map(ability) - cells["env_id"].map(lambda e: env[e]["difficulty"])
           + cells["env_id"].map(lambda e: env[e]["hint_effect"]))
    p = expit(eta.to_numpy(float))
    info = (cells.assign(i=cells["count"] * p * (1 - p)).groupby("env_id")["i"].sum() + IRT_RIDGE).to_dict()
    effect = np.array([env[e]["hint_effect"] if e in env else 0.0 for e in env_ids])
    se = np.array([1.0 / np.sqrt(info[e]) if e in info else np.inf for e in env_ids])
    return effect, se


def random_effect_weights(effect: np.ndarray, se: np.ndarray, own: np.ndarray) -> np.ndarray:
    """1/(σ²_env + se²), σ²_env the between-environment variance within authors (DerSimonian–Laird)."""
    ok = np.isfinite(se) & (own >= 0)
    w = 1.0 / se[ok] ** 2
    q, df, c = 0.0, 0, 0.0
    for a in np.unique(own[ok]):
        m = own[ok] == a
        if m.sum() < 2:
            continue
        mean = np.sum(w[m] * effect[ok][m]) / w[m].sum()
        q += float(np.sum(w[m] * (effect[ok][m] - mean) ** 2))
        df += int(m.sum()) - 1
        c += float(w[m].sum() - (w[m] ** 2).sum() / w[m].sum())
    tau2 = max(0.0, (q - df) / c) if c > 0 else 0.0
    out = np.zeros(len(effect))
    out[ok] = 1.0 / (tau2 + se[ok] ** 2)
    return out


def _weighted_p(count: int, rng: np.random.Generator, first: int, v: np.ndarray, w: np.ndarray, signed: float) -> float:
    sf = (np.argsort(rng.random((count, len(v))), axis=1) < first).astype(float)
    t = (sf @ (v * w)) / (sf @ w) - ((1 - sf) @ (v * w)) / ((1 - sf) @ w)
    return (1 + int(np.sum(np.abs(t) >= abs(signed) - 1e-9))) / (1 + count)


def weighted_pvalues(values: np.ndarray, weights: np.ndarray, own: np.ndarray, n: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Pair tests on weighted means of environment values, environments (with their weights)
    split between the two authors."""
    p, stat = np.full((n, n), np.nan), np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            pool = np.flatnonzero(((own == i) | (own == j)) & (weights > 0))
            first = own[pool] == i
            if first.sum() == 0 or (~first).sum() == 0:
                continue
            v, w = values[pool], weights[pool]
            signed = float((v[first] * w[first]).sum() / w[first].sum()
                           - (v[~first] * w[~first]).sum() / w[~first].sum())
            value = _weighted_p(PERMUTATIONS, rng, int(first.sum()), v, w, signed)
            value = _weighted_p(REFINE, rng, int(first.sum()), v, w, signed) if value <= 0.05 else value
            p[i, j] = value if signed >= 0 else np.nan
            p[j, i] = value if signed <= 0 else np.nan
            stat[i, j], stat[j, i] = signed, -signed
    return p, stat


def weighted_trend(values: np.ndarray, weights: np.ndarray, own: np.ndarray, c: np.ndarray,
                   rng: np.random.Generator) -> float:
    """The divergence test on the mixed model's author means (studentized by 1/Σ w)."""
    ok = weights > 0
    v, w, lab = values[ok], weights[ok], own[ok]
    n = len(c)

    def t(labels: np.ndarray) -> np.ndarray:
        rows = len(labels)
        flat = (labels + n * np.arange(rows)[:, None]).ravel()
        sw = np.bincount(flat, np.tile(w, rows), minlength=rows * n).reshape(rows, n)
        swv = np.bincount(flat, np.tile(w * v, rows), minlength=rows * n).reshape(rows, n)
        return (c * swv / sw).sum(axis=1) / np.sqrt((c * c / sw).sum(axis=1))

    obs = t(lab[None])[0]
    perm = np.take_along_axis(np.broadcast_to(lab, (4999, len(lab))), np.argsort(rng.random((4999, len(lab))), axis=1),
                              axis=1)
    return (1 + int(np.sum(t(perm) <= obs + 1e-9))) / 5000


def plain_trend(values: np.ndarray, own: np.ndarray, c: np.ndarray, rng: np.random.Generator) -> float:
    """The divergence test's mean lifts without studentizing: Pearson of the authors' means with
    the solver ranks, over 4,999 rearrangements of environments among authors."""
    n = len(c)
    perm = np.vstack([own[None], np.take_along_axis(np.broadcast_to(own, (4999, len(own))),
                                                    np.argsort(rng.random((4999, len(own))), axis=1), axis=1)])
    flat = (perm + n * np.arange(len(perm))[:, None]).ravel()
    mean = (np.bincount(flat, np.tile(values, len(perm)), minlength=len(perm) * n)
            / np.bincount(flat, minlength=len(perm) * n)).reshape(len(perm), n)
    mc = mean - mean.mean(axis=1, keepdims=True)
    r = (mc * c).sum(axis=1) / np.sqrt((mc * mc).sum(axis=1) * (c * c).sum())
    return (1 + int(np.sum(r[1:] <= r[0] + 1e-12))) / 5000


def rating_trend(num: np.ndarray, den: np.ndarray, authors: list[str], solvers: list[str], own: np.ndarray,
                 c: np.ndarray, rng: np.random.Generator) -> float:
    """The divergence test on the author rating's θ: Pearson of θ with the solver ranks, the
    author rating refitted for each of 999 rearrangements (main's comparisons, vectorized)."""
    n, m = len(authors), len(solvers)
    rows = np.flatnonzero(own >= 0)
    num3, den3 = num.reshape(-1, n, m)[rows, own[rows]], den.reshape(-1, n, m)[rows, own[rows]]
    lab = own[rows]
    perms = np.vstack([lab[None], np.array([rng.permutation(lab) for _ in range(PERMUTATIONS)])])
    onehot = (perms[:, None, :] == np.arange(n)[None, :, None]).astype(float)
    sn, sd = onehot @ num3, onehot @ den3
    with np.errstate(invalid="ignore", divide="ignore"):
        lift = np.where(sd > 0, sn / sd, np.nan)
    same = np.array([[s == a for s in solvers] for a in authors], dtype=bool)
    has = ~np.isnan(lift)
    level = np.nan_to_num(lift)
    allowed = ~np.eye(n, dtype=bool)[:, :, None] & ~same[:, None, :] & ~same[None, :, :]
    present = has[:, :, None, :] & has[:, None, :, :] & allowed[None]
    above = level[:, :, None, :] > level[:, None, :, :] + 1e-12
    below = level[:, :, None, :] < level[:, None, :, :] - 1e-12
    scores = (present & above).sum(3) + 0.5 * (present & ~(above | below)).sum(3)
    theta = fit_bradley_terry(scores, ridge=RIDGE)
    tc = theta - theta.mean(axis=1, keepdims=True)
    r = (tc * c).sum(axis=1) / np.sqrt((tc * tc).sum(axis=1) * (c * c).sum())
    return (1 + int(np.sum(r[1:] <= r[0] + 1e-12))) / (1 + PERMUTATIONS)


def one(args: tuple[str, int]) -> dict[str, Any]:
    cell, seed = args
    rng = np.random.default_rng(seed)
    with threadpool_limits(limits=1, user_api="blas"):
        t = tables(cell, seed)
        pairs = matched_pairs(t.episodes)
        r = compute_ratings(t, pairs, bootstrap=50, seed=seed, kinds=("author", "solver"))
        author, solver = r["author"], r["solver"]
        d = divergence(author, solver, seed=seed)
        n = len(author.players)
        keep = np.arange(n)
        design = make_design(t)
        env_author = dict(zip(t.environments["env_id"], t.environments["author"], strict=False))
        index = {a: k for k, a in enumerate(author.players)}
        own = np.array([index.get(str(env_author.get(e)), -1) for e in design.env_ids])
        b = author_builder(t, pairs, design)
        # author rank claims with three pair statistics (today's are the rating's own)
        p_pts, s_pts = points_pvalues(b.num, b.den, b.players, b.solvers, own, rng)
        effect, se = environment_effects(pairs, design.env_ids)
        w = random_effect_weights(effect, se, own)
        p_mm, s_mm = weighted_pvalues(effect, w, own, n, rng)
        out: dict[str, Any] = {"seed": seed, "test_mean_lift": d["p_value"]}
        for name, above in (("points", holm_above(s_pts, None, keep, p=p_pts)), ("mean_lift", author.above),
                            ("mixed", holm_above(s_mm, None, keep, p=p_mm))):
            out[f"claims_{name}"] = int(above.sum())
            out[f"claims_{name}_up"] = int(np.triu(above).sum())  # a lower index above a higher one
        # the divergence test with three author estimators (today's is `divergence`'s own)
        rank = rankdata([solver.theta[solver.players.index(m)] for m in author.players])
        c = rank - rank.mean()
        out["test_rating"] = rating_trend(b.num, b.den, b.players, b.solvers, own, c, rng)
        gamma, has = author.lifts.solver_adjusted()
        out["test_plain"] = plain_trend(gamma[has], author.lifts.author[has], c, rng)
        out["test_mixed"] = weighted_trend(effect, w, own, c, rng)
    return out


def _rate(reps: list[dict[str, Any]], key: str) -> str:
    hit = sum(r[key] is not None and r[key] < 0.05 for r in reps)
    lo, hi = wilson(hit, len(reps), 0.05)
    return f"{hit / len(reps):.3f} [{max(lo, 0):.2f}, {min(hi, 1):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="uneven:strong:9x10x1")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--progress", default=None)
    args = ap.parse_args()
    out: dict[str, Any] = {"args": vars(args), "cells": {}}
    t0 = time.perf_counter()
    print("| cell | runs | author claims per run: points (main) / mean lift (today) / mixed model "
          "| of them in the reverse of solving order | divergence test p < 0.05: rating θ / mean lift (today) / "
          "mixed model / mean lift unstudentized |")
    print("|---|---|---|---|---|")
    with ProcessPoolExecutor(args.jobs) as pool:
        for cell in args.cells.split(","):
            reps = []
            for k, rep in enumerate(pool.map(one, [(cell, s) for s in range(args.seed_offset,
                                                                              args.seed_offset + args.reps)]), 1):
                reps.append(rep)
                if args.progress and k % 25 == 0:
                    with open(args.progress, "a") as fh:
                        fh.write(f"{time.strftime('%H:%M:%S')} {cell} {k}/{args.reps}\n")
            out["cells"][cell] = reps
            claims = " / ".join(f"{np.mean([r[f'claims_{s}'] for r in reps]):.2f}" for s in ("points", "mean_lift", "mixed"))
            up = " / ".join(f"{np.mean([r[f'claims_{s}_up'] for r in reps]):.2f}" for s in ("points", "mean_lift", "mixed"))
            tests = " / ".join(_rate(reps, k) for k in ("test_rating", "test_mean_lift", "test_mixed", "test_plain"))
            print(f"| {cell} | {len(reps)} | {claims} | {up} | {tests} |", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, default=float))
    print(f"\n{(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
