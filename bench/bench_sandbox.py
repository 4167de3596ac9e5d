"""Sandbox figures in one run: cold start, warm step round trip, ready-from-pool, steps/s.

Run: .venv/bin/python bench/bench_sandbox.py [--quick]
Prints medians and p90s next to their targets (2-core machine): warm step median <= 0.2 ms,
instance ready from a warm pool <= 1 ms, cold start <= 40 ms. The machine's load average is
printed too: other processes competing for the CPUs inflate every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from envduels.sandbox import EnvPool, SandboxLimits
from envduels.sandbox._launcher import host

TRIVIAL = '''
class Echo:
    def reset(self, seed=None):
        self.t = 0
        return "ready", {}
    def step(self, action):
        self.t += 1
        return action, 0.0, False, False, {}
'''


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(name: str, values: list[float], target: str = "") -> None:
    ms = [v * 1000 for v in values]
    print(f"  {name:<46} median {statistics.median(ms):8.3f} ms   p90 {pct(ms, 0.9):8.3f} ms"
          f"   n={len(ms):<5} {target}")


async def cold_starts(n: int, limits: SandboxLimits) -> tuple[list[float], list[float], list[float]]:
    sandboxed, unsandboxed, bare = [], [], []
    python = host().python
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - start)
        for unsafe, out in ((False, sandboxed), (True, unsandboxed)):
            pool = EnvPool(limits, warm=0, unsafe_no_sandbox=unsafe)
            start = time.perf_counter()
            inst = await pool.open(TRIVIAL)
            await inst.reset(0)
            out.append(time.perf_counter() - start)
            await pool.aclose()
    return sandboxed, unsandboxed, bare


async def ready_from_pool(n: int, limits: SandboxLimits) -> list[float]:
    times = []
    async with EnvPool(limits, warm=2) as pool:
        for _ in range(n):
            while len(pool._ready) < 2:
                await asyncio.sleep(0.005)
            start = time.perf_counter()
            inst = await pool.open(TRIVIAL)
            times.append(time.perf_counter() - start)
            await inst.close()
    return times


async def warm_steps(n: int, limits: SandboxLimits) -> tuple[list[float], float]:
    async with EnvPool(limits, warm=1) as pool:
        inst = await pool.open(TRIVIAL)
        await inst.reset(0)
        for _ in range(200):
            await inst.step("warm-up")
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await inst.step("\\boxed{a}")
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(n):
            await inst.step("\\boxed{a}")
        rate = n / (time.perf_counter() - start)
        await inst.close()
    return times, rate


async def parallel_rate(instances: int, steps: int, limits: SandboxLimits) -> float:
    async with EnvPool(limits, warm=0) as pool:
        opened = await asyncio.gather(*(pool.open(TRIVIAL) for _ in range(instances)))
        for inst in opened:
            await inst.reset(0)

        async def run(inst):  # type: ignore[no-untyped-def]
            for _ in range(steps):
                await inst.step("a")

        start = time.perf_counter()
        await asyncio.gather(*(run(i) for i in opened))
        rate = instances * steps / (time.perf_counter() - start)
        for inst in opened:
            await inst.close()
    return rate


def in_process(n: int) -> list[float]:
    namespace: dict = {}
    exec(TRIVIAL, namespace)
    env = namespace["Echo"]()
    env.reset(0)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        env.step("\\boxed{a}")
        times.append(time.perf_counter() - start)
    return times


async def main(quick: bool) -> None:
    n_cold, n_pool, n_steps = (10, 10, 1000) if quick else (40, 60, 5000)
    limits = SandboxLimits()
    h = host()
    print(f"envduels sandbox benchmark  (cpus={os.cpu_count()}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python in sandbox: {h.python}, "
          f"per-slot uid: {h.root}, cgroup: {h.cgroups is not None})")
    print("cold start (spawn -> loaded -> first reset done):")
    sandboxed, unsandboxed, bare = await cold_starts(n_cold, limits)
    row("sandboxed instance (bwrap + uid + cgroup)", sandboxed, "target <= 40 ms")
    row("same worker, no sandbox (--unsafe-no-sandbox)", unsandboxed)
    row(f"bare subprocess `{os.path.basename(h.python)} -c pass`", bare)
    print("instance ready from a warm pool (open() with a worker waiting):")
    row("EnvPool.open() on a warm pool", await ready_from_pool(n_pool, limits), "target <= 1 ms")
    print("step round trip (trivial environment):")
    times, rate = await warm_steps(n_steps, limits)
    row("sandboxed EnvInstance.step()", times, "target <= 0.2 ms")
    row("in-process env.step() call", in_process(n_steps))
    print("throughput:")
    print(f"  {'steps/s, one instance, sequential':<46} {rate:10.0f}")
    print(f"  {'steps/s, 8 instances concurrently':<46} "
          f"{await parallel_rate(8, n_steps // 8, limits):10.0f}")
    print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.quick)))
