"""Full analysis of a synthetic 20-player run with 1,000 bootstrap draws: time and peak memory.

20 players, 10 environments per author (2 rounds × 5), 4 seeds, both conditions: about 30,000
episodes. Target: under 30 s on 2 cores. Run: `.venv/bin/python bench/bench_analysis.py`
(`--html` also renders the report; `--draws N` changes the bootstrap size; `--simulator uneven`
uses the heterogeneous environments of `envduels.analysis.simulate`).

`--baseline SRC` also runs this same script with `PYTHONPATH=SRC` (e.g. `/work/main/src`, today's
main) in a child process, alternately with this code, and prints both side by side with the ratio;
the timings of the duel's environment-level methods (the environment bootstrap of the matches
and its overdispersion factor, the environment rearrangement rank test) are printed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np


def measure(draws: int, players: int, simulator: str, html: bool) -> dict[str, Any]:
    """One full analysis in this process: seconds per stage and peak RSS (MiB)."""
    from envduels.analysis import analyze, simulate_tournament

    t0 = time.perf_counter()
    kw = {"environments": simulator} if simulator != "alike" else {}
    run = simulate_tournament(players=players, envs_per_author=5, rounds=2, seeds=4, seed=0,
                              p_invalid=0.05, p_incomplete=0.01, p_error=0.01, **kw)
    out: dict[str, Any] = {"simulate": time.perf_counter() - t0, "episodes": len(run.tables.episodes),
                           "environments": len(run.tables.environments)}
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t1, c1 = time.perf_counter(), time.process_time()
    result = analyze(run.tables, bootstrap=draws)
    out["analysis"] = time.perf_counter() - t1
    out["analysis_cpu"] = time.process_time() - c1  # less moved by other users of a shared machine
    out["rss_analysis"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["rss_before"] = rss_before
    conv = result.json["convergence"]
    out["backend"] = f"{conv['backend']} ({conv['backend_reason']})"
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as `analyze` runs them
        out.update(duel_methods(run.tables, draws))
    if html:
        from envduels.report.html import render_html

        t2 = time.perf_counter()
        render_html([result])
        out["html"] = time.perf_counter() - t2
    return out


def duel_methods(tables: Any, draws: int) -> dict[str, float]:
    """Seconds of the duel's environment-level methods alone (absent in older code: empty)."""
    try:
        from envduels.analysis.rank_tests import duel_pair_pvalues
        from envduels.analysis.ratings import (
            duel_builder,
            duel_draws,
            duel_overdispersion,
            fit_firth,
            make_strata,
        )
    except ImportError:
        return {}
    from envduels.analysis import matched_pairs

    pairs = matched_pairs(tables.episodes)
    b = duel_builder(tables, pairs, make_strata(tables))
    t0, c0 = time.perf_counter(), time.process_time()
    stacked, _ = duel_draws(b, draws, np.random.default_rng(1))
    keep = np.flatnonzero((stacked[0] + stacked[0].T).sum(axis=1) > 0)
    theta = fit_firth(stacked[0][np.ix_(keep, keep)])
    duel_overdispersion(stacked, theta, keep)
    t1, c1 = time.perf_counter(), time.process_time()
    duel_pair_pvalues(b.net, b.count, b.env_half, b._expected(), b.rounds, len(b.players))
    # CPU seconds beside wall time: on a shared machine the load moves wall time 2-10x
    return {"duel_bootstrap_and_overdispersion": t1 - t0, "duel_bootstrap_and_overdispersion_cpu": c1 - c0,
            "duel_rank_test": time.perf_counter() - t1, "duel_rank_test_cpu": time.process_time() - c1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--players", type=int, default=20)
    ap.add_argument("--simulator", choices=("alike", "uneven"), default="alike")
    ap.add_argument("--html", action="store_true", help="also render the HTML report")
    ap.add_argument("--baseline", default=None, metavar="SRC", help="also time the envduels package under SRC")
    ap.add_argument("--repeat", type=int, default=1, help="alternate runs of each side (with --baseline)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.draws, args.players, args.simulator, args.html)))
        return
    sides = {"this code": os.environ.get("PYTHONPATH", "")}
    if args.baseline:
        sides["baseline"] = args.baseline
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    for _ in range(max(1, args.repeat)):
        for name, path in sides.items():  # alternate, so machine load falls on both alike
            cmd = [sys.executable, __file__, "--child", "--draws", str(args.draws), "--players", str(args.players),
                   "--simulator", args.simulator] + (["--html"] if args.html else [])
            done = subprocess.run(cmd, env=os.environ | {"PYTHONPATH": path}, capture_output=True, text=True,
                                  check=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = results["this code"][0]
    print(f"episodes {first['episodes']:,}, environments {first['environments']}, players {args.players}, "
          f"bootstrap draws {args.draws:,}, {args.simulator} environments; embedding {first['backend']}")
    keys = ["analysis", "analysis_cpu", "rss_analysis", "duel_bootstrap_and_overdispersion",
            "duel_bootstrap_and_overdispersion_cpu", "duel_rank_test", "duel_rank_test_cpu"] + (
        ["html"] if args.html else [])
    header = f"{'':36}" + "".join(f"{k:>14}" for k in sides) + ("       ratio" if args.baseline else "")
    print(header)
    for key in keys:
        vals = [np.median([r[key] for r in results[k] if key in r]) if any(key in r for r in results[k]) else None
                for k in sides]
        unit = "M" if key.startswith("rss") else "s"
        cells = "".join(f"{v:>12.2f} {unit:<1}" if v is not None else f"{'—':>14}" for v in vals)
        ratio = f"{vals[0] / vals[1]:>11.2f}×" if args.baseline and vals[0] is not None and vals[1] else ""
        print(f"{key:36}{cells}{ratio}")
    t = np.median([r["analysis"] for r in results["this code"]])
    c = np.median([r["analysis_cpu"] for r in results["this code"]])
    print(f"full analysis {t:.2f} s wall, {c:.2f} CPU s (median of {len(results['this code'])}): target < 30 s  "
          f"{'OK' if t < 30 else 'SLOW'} (wall), {'OK' if c < 30 else 'SLOW'} (CPU)")


if __name__ == "__main__":
    main()
