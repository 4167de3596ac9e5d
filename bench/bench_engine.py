"""Engine throughput: a tournament of 6 scripted players against a local scripted server.

    .venv/bin/python bench/bench_engine.py [--latency-ms 50] [--seeds 2] [--concurrency 8]

The server runs as a subprocess (`python -m envduels.testing.server`) with a fixed latency per
answer; the engine runs here, with environments in the bubblewrap sandbox. Prints:

- episodes/s over the whole run, and over the solving phase;
- engine-bound fraction: the share of the players' call slots that sat idle during solving,
  1 - (sum of solver-call latencies) / (solving wall time x total max_concurrency). 0 means the
  run was bound only by the server; the rest is the engine (sandbox starts, steps, bookkeeping);
- peak resident memory of the engine process and of its largest child (a sandbox worker).
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

import yaml

HERE = Path(__file__).resolve().parent
PLAYERS = 6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--seeds", type=int, default=2, help="benchmark seeds per environment")
    ap.add_argument("--concurrency", type=int, default=8, help="max_concurrency per player")
    ap.add_argument("--unsafe-no-sandbox", action="store_true")
    args = ap.parse_args()

    server = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0", "--latency-ms",
         str(args.latency_ms), "--script", str(HERE / "engine_script.py"), "--api-key", "bench"],
        stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            return _bench(base_url, Path(tmp), args)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _bench(base_url: str, tmp: Path, args: argparse.Namespace) -> int:
    from envduels.engine.commands import run_command
    from envduels.store import Store

    os.environ["BENCH_KEY"] = "bench"
    cfg = {
        "name": "bench", "seed": 1, "output_dir": str(tmp / "run"),
        "players": [{"name": f"p{i}", "provider": "openai", "model": f"m-p{i}",
                     "base_url": base_url, "api_key_env": "BENCH_KEY",
                     "max_concurrency": args.concurrency, "max_tokens": 64}
                    for i in range(PLAYERS)],
        "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": args.seeds,
                       "max_turns": 4, "history": "none"},
        "sandbox": {"warm_workers": 4},
    }
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    started = time.monotonic()
    code = run_command(path, unsafe_no_sandbox=args.unsafe_no_sandbox, quiet=True)
    wall = time.monotonic() - started
    if code != 0:
        print(f"run failed with exit code {code}", file=sys.stderr)
        return code

    store = Store(tmp / "run", create=False)
    episodes = store.episodes()
    solver_calls = [r for r in store.call_records() if r["role"] == "solver"]
    first_call, last_episode = store.solving_span()
    solving = max(1e-9, last_episode - first_call)
    busy = sum(r["latency_s"] for r in solver_calls)
    slots = PLAYERS * args.concurrency
    engine_bound = max(0.0, 1.0 - busy / (solving * slots))
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"players {PLAYERS} x concurrency {args.concurrency}, server latency "
          f"{args.latency_ms:g} ms, {len(episodes)} episodes, {len(solver_calls)} solver calls")
    print(f"episodes/s (whole run, {wall:.1f} s):  {len(episodes) / wall:8.2f}")
    print(f"episodes/s (solving, {solving:.1f} s):     {len(episodes) / solving:8.2f}")
    print(f"server-bound ideal episodes/s:        "
          f"{len(episodes) / (len(solver_calls) * args.latency_ms / 1000 / slots):8.2f}")
    print(f"engine-bound fraction of slot time:   {engine_bound:8.2f}")
    print(f"peak memory: engine {peak_self:.0f} MiB, largest child {peak_child:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
