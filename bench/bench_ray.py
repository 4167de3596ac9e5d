"""The Ray executor against the local one, side by side in one run, and a projection for N nodes.

Run: .venv/bin/python bench/bench_ray.py [--quick]      (needs `pip install -e .[ray]`, root)

It re-runs itself inside a network namespace of its own (`unshare -n`, loopback up), so the Ray
cluster it starts on this machine (a head and one worker node, `ray.cluster_utils.Cluster`)
advertises 127.0.0.1 only. Prints:
1. the warm step round trip of a trivial environment, local sandbox vs a sandbox on a Ray node:
   the executor's overhead per step;
2. episodes/s with a CPU-heavy environment (each step burns CPU_MS of CPU), many episodes at
   once, local vs Ray. On one machine both share the same cores, so this ratio is the cost of
   going through Ray, not a speed-up;
3. a projection (not a measurement) of episodes/s for N nodes of C cores from the measured
   per-step costs: environment CPU per step, and driver CPU per remote step (the driver is the
   one process every step passes through).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HEAVY = '''
class Heavy:
    """Each step burns about CPU_MS ms of CPU, then answers; 8 steps to the end."""
    def reset(self, seed=None):
        self.t = 0
        return "go", {}
    def step(self, action):
        import time
        end = time.process_time() + CPU_MS / 1000
        x = 0
        while time.process_time() < end:
            x += 1
        self.t += 1
        return "ok", 1.0 if self.t >= 8 else 0.0, self.t >= 8, False, {}
'''

TRIVIAL = '''
class Echo:
    def reset(self, seed=None):
        return "ready", {}
    def step(self, action):
        return action, 0.0, False, False, {}
'''


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def step_round_trips(pool, n: int) -> list[float]:
    inst = await pool.open(TRIVIAL)
    await inst.reset(0)
    for _ in range(50):
        await inst.step("x")
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await inst.step("x")
        times.append(time.perf_counter() - start)
    await inst.close()
    return times


async def heavy_episodes(pool, source: str, episodes: int, concurrency: int) -> tuple[float, float]:
    """(episodes/s, driver CPU seconds per step)."""
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots:
            inst = await pool.open(source)
            await inst.reset(i)
            done = False
            while not done:
                done = (await inst.step("x")).terminated
            await inst.close(wait=False)

    cpu, start = _cpu(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(episodes)))
    wall = time.perf_counter() - start
    return episodes / wall, (_cpu() - cpu) / (episodes * 9)


def main(quick: bool) -> None:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    from envduels.sandbox import EnvPool, SandboxLimits
    from envduels.sandbox.ray_pool import RayEnvPool

    cpu_ms = 20
    source = HEAVY.replace("CPU_MS", str(cpu_ms))
    n_steps = 300 if quick else 2000
    episodes, concurrency = (16, 8) if quick else (48, 16)
    limits = SandboxLimits(step_timeout_s=30)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    load = os.getloadavg()[0]

    async def measure() -> dict:
        out: dict = {}
        local = EnvPool(limits, warm=2, max_warm=concurrency)
        remote = RayEnvPool(limits, address=cluster.address)
        await remote.start()
        out["step_local"] = await step_round_trips(local, n_steps)
        out["step_ray"] = await step_round_trips(remote, n_steps)
        out["eps_local"], out["cpu_local"] = await heavy_episodes(local, source, episodes, concurrency)
        out["eps_ray"], out["cpu_ray"] = await heavy_episodes(remote, source, episodes, concurrency)
        await local.aclose()
        await remote.aclose()
        return out

    m = asyncio.run(measure())
    ray.shutdown()
    cluster.shutdown()
    local_ms = statistics.median(m["step_local"]) * 1000
    ray_ms = statistics.median(m["step_ray"]) * 1000
    print(f"load average at start: {load:.1f} on {os.cpu_count()} CPUs")
    print("1. warm step round trip, trivial environment (median of "
          f"{n_steps}): local {local_ms:.3f} ms, on a Ray node {ray_ms:.3f} ms "
          f"-> overhead {ray_ms - local_ms:.3f} ms per step ({ray_ms / local_ms:.1f}x)")
    print(f"2. CPU-heavy episodes ({cpu_ms} ms CPU per step, 8 steps, {episodes} episodes, "
          f"{concurrency} at once): local {m['eps_local']:.2f} episodes/s, Ray "
          f"{m['eps_ray']:.2f} episodes/s -> ratio {m['eps_ray'] / m['eps_local']:.2f} "
          "(same two cores on both: the cost of Ray, not a speed-up)")
    driver = m["cpu_ray"] * 1000
    print(f"   driver CPU per remote step {driver:.2f} ms (local executor: "
          f"{m['cpu_local'] * 1000:.2f} ms in the harness process)")
    print("3. PROJECTION for N nodes of C cores (not measured: from the per-step costs above; "
          "assumes environment CPU dominates each node and the driver is the only shared part):")
    env_s = cpu_ms / 1000
    ceiling = 1 / max(m["cpu_ray"], 1e-6)
    for nodes, cores in ((1, 16), (4, 16), (16, 16), (64, 16)):
        steps = min(nodes * cores / env_s, ceiling)
        print(f"   {nodes:>3} x {cores} cores: {steps:>9,.0f} steps/s = {steps / 9:>8,.0f} "
              f"episodes/s of this environment{'  (driver-bound)' if steps == ceiling else ''}")
    print(f"   driver ceiling: {ceiling:,.0f} remote steps/s on one driver core")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and episodes")
    args = parser.parse_args()
    if os.environ.get("ENVDUELS_BENCH_NETNS") != "1":
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            sys.exit("bench_ray.py needs root and unshare (it runs Ray in a network namespace)")
        env = {**os.environ, "ENVDUELS_BENCH_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                                  sys.executable, *sys.argv], env=env))
    main(args.quick)
