"""What the degenerate-policy battery adds to validating an environment.

    PYTHONPATH=src .venv/bin/python bench/bench_battery.py [--seeds 4] [--repeat 1]

Validates every library environment in the sandbox twice, without and with the battery, and
prints the wall time of each, their ratio and the battery's episodes, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from envduels.envs import library_env, library_names, validate_env
from envduels.envs.commands import seeds_for
from envduels.sandbox import EnvPool


async def _time(pool: EnvPool, name: str, seeds: int, battery: bool) -> tuple[float, dict | None]:
    spec = library_env(name)
    started = time.perf_counter()
    verdict = await validate_env(spec, pool, seeds=seeds_for(spec, seeds), require_oracle=True,
                                 fixed_pool=True, probe_seed="bench", degenerate_battery=battery)
    assert verdict.valid, (name, verdict.reasons)
    return time.perf_counter() - started, verdict.battery


async def main(seeds: int, repeat: int) -> None:
    print(f"{'environment':18s} {'without':>8s} {'with':>8s} {'ratio':>6s} {'episodes':>8s}  flag")
    totals = [0.0, 0.0]
    async with EnvPool() as pool:
        for name in library_names():
            without = min([(await _time(pool, name, seeds, False))[0] for _ in range(repeat)])
            runs = [await _time(pool, name, seeds, True) for _ in range(repeat)]
            with_, found = min(r[0] for r in runs), runs[0][1] or {}
            totals[0] += without
            totals[1] += with_
            print(f"{name:18s} {without:7.2f}s {with_:7.2f}s {with_ / without:5.2f}x "
                  f"{found.get('episodes', 0):8d}  {found.get('flag') or '-'}", flush=True)
    print(f"{'all':18s} {totals[0]:7.2f}s {totals[1]:7.2f}s {totals[1] / totals[0]:5.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    asyncio.run(main(args.seeds, args.repeat))
