"""`envduels report --episodes` on round robins of 25, 50 and 100 models: wall time and peak RSS,
this checkout beside a baseline checkout (main), each run as a user runs it (the console
script, a fresh process) under the same address-space limit (default 2 GiB, `ulimit -v`).

Issue 19: at 100 models main grew arrays with the cube of the model count (45 s, then
`_ArrayMemoryError` under 4 GiB). The files come from `envduels.testing.episodes` (one environment
per author, one seed, 5–15% of episodes missing, incomplete or error: 2.8 MB at 100 models).
Both sides run with ARROW_DEFAULT_MEMORY_POOL=system so that the baseline fails, where it does,
on its own arrays rather than on pyarrow's 1 GiB up-front reservation (this checkout's CLI sets
it itself). Run: `nice -n 10 .venv/bin/python bench/bench_many_models.py --baseline /work/main/src`
(minutes of both cores; `--models 25 50` for less).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envduels.testing.episodes import write_many_model_episodes

HERE = Path(__file__).resolve().parents[1] / "src"
ENVDUELS = str(Path(sys.executable).parent / "envduels")


def run_report(src: Path, episodes: Path, out: Path, bootstrap: int,
               limit: int | None) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MiB, outcome) of one `envduels report --episodes` with
    `src` first. CPU time is the figure to compare on a shared machine; wall time waits for it."""
    def preexec() -> None:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = os.environ | {"PYTHONPATH": str(src), "ARROW_DEFAULT_MEMORY_POOL": "system"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([ENVDUELS, "report", "--episodes", str(episodes), "--bootstrap", str(bootstrap),
                             "--json", str(out.with_suffix(".json")), "--html", str(out.with_suffix(".html"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=preexec)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        outcome = "ok"
    else:
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [f"exit {code}"]
        outcome = ("MemoryError" if "MemoryError" in err else last[0][:60]) + f" (exit {code})"
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, nargs="+", default=[25, 50, 100])
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--limit-gib", type=float, default=2.0, help="address-space limit; 0 for none")
    ap.add_argument("--baseline", type=Path, help="src folder of the checkout to compare with (e.g. /work/main/src)")
    args = ap.parse_args()
    limit = int(args.limit_gib * 1024**3) if args.limit_gib > 0 else None
    print(f"bootstrap {args.bootstrap}, address-space limit {args.limit_gib:g} GiB" if limit else
          f"bootstrap {args.bootstrap}, no address-space limit")
    head = f"{'models':>6} {'episodes':>9} {'MB':>5} | {'this: wall':>10} {'CPU s':>6} {'RSS MiB':>8} {'outcome':<8}"
    if args.baseline:
        head += f" | {'base: wall':>10} {'CPU s':>6} {'RSS MiB':>8} {'outcome':<34} | {'CPU ×':>6} {'RSS ×':>6}"
    print(head)
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.models:
            path = write_many_model_episodes(Path(tmp) / f"m{n}.jsonl", n)
            lines = sum(1 for _ in path.open())
            t, cpu, rss, outcome = run_report(HERE, path, Path(tmp) / f"this{n}", args.bootstrap, limit)
            row = (f"{n:>6} {lines:>9,} {path.stat().st_size / 1e6:>5.1f} | {t:>10.1f} {cpu:>6.1f} {rss:>8.0f} "
                   f"{outcome:<8}")
            if args.baseline:
                bt, bcpu, brss, boutcome = run_report(args.baseline, path, Path(tmp) / f"base{n}", args.bootstrap, limit)
                ratio = f"{cpu / bcpu:>6.2f} {rss / brss:>6.2f}" if boutcome == "ok" else f"{'–':>6} {'–':>6}"
                row += f" | {bt:>10.1f} {bcpu:>6.1f} {brss:>8.0f} {boutcome:<34} | {ratio}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
