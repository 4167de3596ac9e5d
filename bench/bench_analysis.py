"""Full analysis of a synthetic 20-player run with 1,000 bootstrap draws: time and peak memory.

20 players, 10 environments per author (2 rounds × 5), 4 seeds, both conditions: about 30,000
episodes. Target: under 30 s on 2 cores. Run: `.venv/bin/python bench/bench_analysis.py`
(`--html` also renders the report; `--draws N` changes the bootstrap size).
"""

from __future__ import annotations

import argparse
import resource
import time

from envduels.analysis import analyze, simulate_tournament


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--players", type=int, default=20)
    ap.add_argument("--html", action="store_true", help="also render the HTML report")
    args = ap.parse_args()

    t0 = time.perf_counter()
    run = simulate_tournament(players=args.players, envs_per_author=5, rounds=2, seeds=4, seed=0,
                              p_invalid=0.05, p_incomplete=0.01, p_error=0.01)
    t_sim = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t1 = time.perf_counter()
    result = analyze(run.tables, bootstrap=args.draws)
    t_an = time.perf_counter() - t1
    rss_analysis = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t_html = None
    if args.html:
        from envduels.report.html import render_html

        t2 = time.perf_counter()
        html = render_html([result])
        t_html = time.perf_counter() - t2
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"episodes           {len(run.tables.episodes):>10,}")
    print(f"environments       {len(run.tables.environments):>10,}")
    print(f"players            {args.players:>10}")
    print(f"bootstrap draws    {args.draws:>10,}")
    print(f"simulate           {t_sim:>9.2f} s")
    print(f"analysis (full)    {t_an:>9.2f} s   target < 30 s  {'OK' if t_an < 30 else 'SLOW'}")
    conv = result.json["convergence"]
    print(f"embedding          {conv['backend']:>10}   ({conv['backend_reason']})")
    if t_html is not None:
        print(f"html report        {t_html:>9.2f} s   ({len(html) / 1e6:.1f} MB)")
    print(f"peak RSS           {rss_analysis:>9.1f} MiB after analysis ({rss_before:.0f} MiB before it)")
    print(f"peak RSS           {rss:>9.1f} MiB at exit")


if __name__ == "__main__":
    main()
