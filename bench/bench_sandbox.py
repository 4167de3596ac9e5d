"""Sandbox figures in one run: cold start, warm step round trip, ready-from-pool, steps/s,
the cost of freezing the sandbox between calls, the harness's memory under a frame flood, and
both runtimes (bubblewrap, gVisor) side by side.

Run: .venv/bin/python bench/bench_sandbox.py [--quick] [--runtimes-only]
Prints medians and p90s next to their targets (2-core machine): warm step median <= 0.2 ms,
instance ready from a warm pool <= 1 ms, cold start <= 40 ms. The machine's load average is
printed too: other processes competing for the CPUs inflate every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envduels.sandbox import EnvFault, EnvPool, SandboxLimits
from envduels.sandbox._launcher import host
from envduels.sandbox._resident import copy_view

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
            pool = EnvPool(limits, warm=0, unsafe_no_sandbox=unsafe, templates=False)
            start = time.perf_counter()
            inst = await pool.open(TRIVIAL)
            await inst.reset(0)
            out.append(time.perf_counter() - start)
            await pool.aclose()
    return sandboxed, unsandboxed, bare


async def ready_from_pool(n: int, limits: SandboxLimits) -> list[float]:
    times = []
    async with EnvPool(limits, warm=2, templates=False) as pool:
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


async def frozen_vs_running_steps(n: int, limits: SandboxLimits) -> dict:
    """Warm step round trips with and without the freezer (back to back, so within its grace),
    interleaved in blocks of 100 so that load changes hit both alike; and ("pair") one freeze
    plus thaw of a live sandbox, timed alone."""
    times: dict = {True: [], False: []}
    pools = {f: EnvPool(dataclasses.replace(limits, freeze_idle=f), warm=0) for f in times}
    insts = {f: await pools[f].open(TRIVIAL) for f in times}
    for inst in insts.values():
        await inst.reset(0)
        for _ in range(200):
            await inst.step("warm-up")
    for _ in range(max(1, n // 100)):
        for freeze, inst in insts.items():
            for _ in range(100):
                start = time.perf_counter()
                await inst.step("\\boxed{a}")
                times[freeze].append(time.perf_counter() - start)
    for _ in range(max(1, n // 500)):   # after a pause: the sandbox is frozen in between
        for freeze, inst in insts.items():
            for _ in range(50):
                await asyncio.sleep(0.005)
                start = time.perf_counter()
                await inst.step("\\boxed{a}")
                times.setdefault(("paused", freeze), []).append(time.perf_counter() - start)
    group = insts[True]._channel.launched.cgroup
    if group is not None and group.freezable:   # the kernel's part alone, no event loop
        for _ in range(n):
            start = time.perf_counter()
            group.freeze()
            group.thaw()
            times.setdefault("pair", []).append(time.perf_counter() - start)   # type: ignore[call-overload]
    for pool in pools.values():
        await pool.aclose()
    return times


FLOOD = '''
import json, os, sys, threading, time
def _flood(fd=int(sys.argv[2])):
    data = json.dumps({"id": 0, "ok": True, "pad": "x" * 1000}).encode()
    frame = len(data).to_bytes(4, "big") + data
    time.sleep(0.05)   # let the reset's reply go first
    while True:   # as fast as the harness reads
        try:
            os.write(fd, frame)
        except OSError:
            return
class Flood:
    def reset(self, seed=None):
        threading.Thread(target=_flood, daemon=True).start()
        return "flooding", {}
    def step(self, action):
        return action, 0.0, False, False, {}
'''


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


async def frame_flood(seconds: float, limits: SandboxLimits) -> dict:
    """One episode of an environment whose thread writes small frames between calls while
    the "solver" thinks for `seconds` (the issue's scenario): the harness's RSS before, at
    its peak and after; the most frames and bytes held for the worker; how the next call
    ended."""
    before = peak = _rss_mib()
    most_frames = most_bytes = 0
    async with EnvPool(limits, warm=0) as pool:
        inst = await pool.open(FLOOD)
        outcome = "reset ok"
        try:
            await inst.reset(0)
        except Exception as exc:   # noqa: BLE001 (the flood may race the reset's reply)
            outcome = f"reset: {exc}"
        channel = inst._channel
        end = time.monotonic() + seconds
        while time.monotonic() < end:   # the solver thinking
            await asyncio.sleep(0.25)
            peak = max(peak, _rss_mib())
            most_frames = max(most_frames, len(channel._frames))
            most_bytes = max(most_bytes, len(channel._buf) + sum(map(len, channel._frames)))
        if outcome == "reset ok":
            try:
                await inst.step("a")
                outcome = "step ok"
            except Exception as exc:   # noqa: BLE001
                outcome = f"step: {exc}"
        await inst.close()
    return {"rss_before": before, "rss_peak": peak, "rss_after": _rss_mib(),
            "frames": most_frames, "bytes": most_bytes, "outcome": outcome}


async def print_flood(seconds: float, limits: SandboxLimits) -> None:
    print(f"frame flood while the solver thinks for {seconds:g} s (harness memory):")
    # Runs against older sources too (no freeze_idle there), to measure the "before".
    settings = [True, False] if hasattr(limits, "freeze_idle") else [None]
    for freeze in settings:
        chosen = limits if freeze is None else dataclasses.replace(limits, freeze_idle=freeze)
        got = await frame_flood(seconds, chosen)
        name = "no freezer" if freeze is None else "freezer " + ("on" if freeze else "off")
        print(f"  {name:<12} RSS {got['rss_before']:7.1f} MiB, peak {got['rss_peak']:7.1f}, "
              f"after {got['rss_after']:7.1f}; at most {got['frames']} frames / {got['bytes']} "
              f"bytes held; {got['outcome']}")


_COLD_CHILD = """
import asyncio, json, sys, time
from envduels.sandbox import EnvPool, SandboxLimits
async def main(n, source):
    times = []
    for _ in range(n):
        pool = EnvPool(SandboxLimits(), warm=0)
        start = time.perf_counter()
        inst = await pool.open(source)
        await inst.reset(0)
        times.append(time.perf_counter() - start)
        await pool.aclose()
    print(json.dumps(times[1:]))   # the first start of a process also probes the host
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


async def _cold_and_warm(limits: SandboxLimits, steps: int) -> tuple[float, list[float]]:
    """One cold start (spawn -> loaded -> first reset done) and `steps` warm step round trips."""
    pool = EnvPool(limits, warm=0)
    start = time.perf_counter()
    inst = await pool.open(TRIVIAL)
    await inst.reset(0)
    cold = time.perf_counter() - start
    for _ in range(20):
        await inst.step("warm-up")
    warm = []
    for _ in range(steps):
        start = time.perf_counter()
        await inst.step("\\boxed{a}")
        warm.append(time.perf_counter() - start)
    await pool.aclose()
    return cold, warm


async def runtimes(n: int, steps: int) -> None:
    """Cold start and warm step under each runtime, alternated in this run, with the ratio
    gVisor / bubblewrap (medians)."""
    names = ["bubblewrap"] + (["gvisor"] if host().runsc and host().root else [])
    cold: dict[str, list[float]] = {r: [] for r in names}
    warm: dict[str, list[float]] = {r: [] for r in names}
    for _ in range(n):
        for runtime in names:
            c, w = await _cold_and_warm(SandboxLimits(runtime=runtime), steps)
            cold[runtime].append(c)
            warm[runtime] += w
    print(f"runtimes (alternated, n={n} cold starts and {n * steps} steps each):")
    print(f"  {'':<32}" + "".join(f"{r:>22}" for r in names)
          + ("   gvisor/bubblewrap" if len(names) == 2 else ""))
    for label, data in (("cold start, median ms", cold), ("cold start, p90 ms", cold),
                        ("warm step, median ms", warm), ("warm step, p90 ms", warm)):
        figure = statistics.median if "median" in label else (lambda v: pct(v, 0.9))
        values = [figure(data[r]) * 1000 for r in names]
        line = f"  {label:<32}" + "".join(f"{v:22.3f}" for v in values)
        if len(values) == 2:
            line += f"   {values[1] / values[0]:17.2f}"
        print(line)
    if len(names) == 1:
        print("  gvisor: not measured (runsc is not installed, or the harness is not root)")


def compare_cold_starts(other_src: str, rounds: int) -> None:
    """Cold starts of these sources and of `other_src` (e.g. main's `src`), alternated in fresh
    processes so that the machine's load hits both alike."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    found: dict[str, list[float]] = {other_src: [], here: []}
    for _ in range(rounds):
        for src in found:
            done = subprocess.run([sys.executable, "-c", _COLD_CHILD, "6", TRIVIAL],
                                  env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True, check=True)
            found[src] += json.loads(done.stdout.strip().splitlines()[-1])
    print(f"cold start, alternated (load average {os.getloadavg()[0]:.2f}):")
    for src, times in found.items():
        row(f"sources {src}"[-46:], times)
    ratio = statistics.median(found[here]) / statistics.median(found[other_src])
    print(f"  {'ratio of medians (these / other)':<46} {ratio:10.2f}")


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


def _stdlib_and_multiarch(h: Any) -> tuple[str, str]:
    stdlib = next(p for p in h.usr_view if "/python3" in p and os.path.isdir(p))
    multiarch = next((p.rsplit("/", 1)[1] for p in h.usr_view
                      if p.startswith("/usr/lib/") and p.endswith("-linux-gnu")), "")
    return stdlib, multiarch


async def residency(n: int, limits: SandboxLimits) -> None:
    """The RAM-resident view: its one-time copy, and cold starts with it and with the host
    files bound instead (alternated, same run)."""
    h = host()
    view = h.resident
    print("sandbox view in RAM (red-team follow-up 1):")
    if view is None:
        print("  not available on this host (no tmpfs /dev/shm, no ldd, or python not in /usr)")
        return
    start = time.perf_counter()   # a fresh copy, as the first harness of a uid makes it
    scratch = tempfile.mkdtemp(prefix="envduels-bench-", dir="/dev/shm")
    try:
        size = copy_view(scratch, h.python, *_stdlib_and_multiarch(h))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"  {'one-time copy (first harness of a uid)':<46} {size / 2**20:8.1f} MiB "
          f"in {(time.perf_counter() - start) * 1000:8.1f} ms")
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(n):
            for resident in (True, False):
                h.resident = view if resident else None
                times[resident].extend((await cold_starts(1, limits))[0])
    finally:
        h.resident = view
    row("cold start, RAM-resident view", times[True])
    row("cold start, host files bound (before)", times[False])
    print(f"  {'ratio of medians (resident / host files)':<46} "
          f"{statistics.median(times[True]) / statistics.median(times[False]):10.2f}")


HEAVY_FORGE = """
import json, os, sys, time
def forge(obj, fd=int(sys.argv[2])):
    data = json.dumps(obj).encode()
    os.write(fd, len(data).to_bytes(4, 'big') + data)
class Heavy:
    def reset(self, seed=None):
        return "r", {}
    def step(self, action):
        forge({'id': 3, 'ok': True, 'observation': 'x', 'reward': 0, 'terminated': True,
               'truncated': False, 'info': {'trace': [[[] for _ in range(1000)]
                                                      for _ in range(120)]}})
        time.sleep(5)
"""


async def heavy_info_lag(n: int, limits: SandboxLimits) -> None:
    """The parent's event-loop stall per call when a sandbox sends ~360 KB of empty lists as
    info (refused before parsing now), beside a trivial step and the old parse-and-walk."""
    from envduels.sandbox._channel import _valid

    async def worst_stall(source: str) -> float:
        stall, running = 0.0, True

        async def ticker() -> None:
            nonlocal stall
            while running:
                before = time.perf_counter()
                await asyncio.sleep(0.001)
                stall = max(stall, time.perf_counter() - before - 0.001)

        async with EnvPool(limits, warm=1) as pool:
            inst = await pool.open(source)
            await inst.reset(0)
            watch = asyncio.create_task(ticker())
            with contextlib.suppress(EnvFault):   # the heavy frame is refused, as intended
                await inst.step("a")
            running = False
            await watch
            await inst.close()
        return stall

    heavy = [await worst_stall(HEAVY_FORGE) for _ in range(n)]
    trivial = [await worst_stall(TRIVIAL) for _ in range(n)]
    frame = json.dumps({"id": 3, "ok": True, "observation": "x", "info": {
        "trace": [[[] for _ in range(1000)] for _ in range(120)]}}).encode()
    old = []
    for _ in range(n):
        start = time.perf_counter()
        _valid(json.loads(frame))
        old.append(time.perf_counter() - start)
    print("event-loop stall per call, heavy info (red-team follow-up 3):")
    row("forged 360 KB info frame, refused", heavy, "target < 50 ms")
    row("trivial step", trivial)
    row("the old parse + walk of that frame", old)
    print(f"  {'ratio of medians (refused / old parse)':<46} "
          f"{statistics.median(heavy) / statistics.median(old):10.2f}")


class _CpuMeter:
    """CPU of this process and every process it starts (sandboxes, templates, instances), from
    a cpuacct cgroup of its own: sandboxes leave our memory/pids/cpu groups, not cpuacct's.
    None where cgroup v1 cpuacct is not writable."""

    def __init__(self) -> None:

        self.group = Path(f"/sys/fs/cgroup/cpuacct/envduels-bench-{os.getpid()}")
        self.ok = False
        with contextlib.suppress(OSError):
            self.group.mkdir(exist_ok=True)
            for tid in os.listdir("/proc/self/task"):
                (self.group / "tasks").write_text(tid)
            self.ok = True

    def ns(self) -> int:
        return int((self.group / "cpuacct.usage").read_text()) if self.ok else 0

    def close(self) -> None:

        with contextlib.suppress(OSError):
            for tid in os.listdir("/proc/self/task"):
                (Path("/sys/fs/cgroup/cpuacct") / "tasks").write_text(tid)
            time.sleep(0.2)
            self.group.rmdir()


def _template_processes_ns(pool: EnvPool) -> int:
    """CPU (ns, /proc/PID/schedstat) of the pool's template processes so far: the Python
    fork server in each template sandbox (the child of its bwrap init), which pays each
    instance's clone (its page tables, its namespaces) and its own copy-on-write faults."""
    templates = pool._templates
    total = 0
    for future in (templates._templates.values() if templates is not None else []):
        if not future.done() or future.exception() is not None:
            continue
        init = future.result().init_pid
        with contextlib.suppress(OSError, ValueError):
            for child in Path(f"/proc/{init}/task/{init}/children").read_text().split():
                total += int(Path(f"/proc/{child}/schedstat").read_text().split()[0])
    return total


async def _instances(n: int, limits: SandboxLimits, *, templates: bool, meter: _CpuMeter
                     ) -> tuple[list[float], list[float], list[float], list[float]]:
    """n instances opened, reset and closed one after another (`close(wait=False)`, as the
    engine does): wall per instance, CPU per instance of everything, of this process, and of
    the template processes (0 for fresh sandboxes)."""
    walls, cpu_all, cpu_self, cpu_template = [], [], [], []
    async with EnvPool(limits, warm=0, templates=templates) as pool:
        inst = await pool.open(TRIVIAL)   # the template (or nothing) is started once
        await inst.reset(0)
        await inst.close()
        for _ in range(n):
            all0, self0, start = meter.ns(), time.process_time(), time.perf_counter()
            template0 = _template_processes_ns(pool)
            inst = await pool.open(TRIVIAL)
            await inst.reset(0)
            await inst.close(wait=False)
            walls.append(time.perf_counter() - start)
            await asyncio.sleep(0.03)   # the background collection is billed to this instance
            cpu_all.append((meter.ns() - all0) / 1e9)
            cpu_self.append(time.process_time() - self0)
            cpu_template.append((_template_processes_ns(pool) - template0) / 1e9)
    return walls, cpu_all, cpu_self, cpu_template


def _gym_resets(n: int, templates: bool) -> float:
    """Resets/s of `envduels.gym` on a library environment, each reset a fresh instance; in
    a process of its own (the gym's pool is one per process, made on first use)."""
    code = ("import sys, time; from envduels.gym import make\n"
            "env = make('number_guess'); env.reset(seed=0); n = int(sys.argv[1])\n"
            "start = time.perf_counter()\n"
            "for i in range(n): env.reset(seed=i)\n"
            "print(n / (time.perf_counter() - start)); env.close()\n")
    done = subprocess.run([sys.executable, "-c", code, str(n)], capture_output=True, text=True,
                          env={**os.environ, "ENVDUELS_TEMPLATES": "1" if templates else "0"},
                          check=True)
    return float(done.stdout.strip().splitlines()[-1])


_VECTOR_CODE = """
import json, os, sys, time
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray
ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
         logging_level="ERROR", log_to_driver=False)
import envduels.gym
vec = envduels.gym.make_vec("number_guess", int(sys.argv[1]))
vec.reset(seed=0)   # the node's pool (and its template) is started once
rounds, rates = int(sys.argv[2]), []
for r in range(rounds):
    start = time.perf_counter()
    vec.reset(seed=1000 * (r + 1))
    rates.append(vec.num_envs / (time.perf_counter() - start))
vec.close()
ray.shutdown()
print(json.dumps(rates))
"""


def _vector_resets(num_envs: int, rounds: int, templates: bool, src: str) -> list[float]:
    """Sub-environment resets/s of `envduels.gym.make_vec` (a Ray vector environment: each
    reset of it opens `num_envs` fresh instances on the node, concurrently), one figure per
    vector reset. A one-node Ray cluster in a process of its own, inside a network namespace
    of its own (`unshare -n`, loopback up: every address Ray binds is 127.0.0.1 and nothing
    leaves the machine). `src`: the envduels tree the driver and Ray's workers import."""
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
         "-c", _VECTOR_CODE, str(num_envs), str(rounds)],
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "ENVDUELS_TEMPLATES": "1" if templates else "0", "PYTHONPATH": src})
    if done.returncode != 0:
        raise RuntimeError(f"the make_vec bench failed: {done.stderr.strip()[-1500:]}")
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def vector_rows(num_envs: int, rounds: int, other_src: str | None = None) -> None:
    """make_vec resets/s from fresh sandboxes and from templates (and, with `other_src`, from
    templates of that envduels tree), alternated, in one run."""
    import envduels

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("  (make_vec resets need root and unshare for a private network namespace)")
        return
    this = str(Path(envduels.__file__).resolve().parent.parent)
    kinds = [("fresh sandboxes", False, this), ("from a template", True, this)]
    if other_src:
        kinds.append((f"from a template, {other_src}", True, str(Path(other_src).resolve())))
    rates: dict[str, list[float]] = {label: [] for label, _, _ in kinds}
    for _ in range(2):   # alternated: load hits every kind alike
        for label, templates, src in kinds:
            rates[label] += _vector_resets(num_envs, rounds, templates, src)
    print(f"make_vec({num_envs}) of number_guess on a one-node Ray cluster (this tree: {this}):")
    for label, got in rates.items():
        print(f"  {f'resets/s, {label}':<46} median {statistics.median(got):8.1f}   "
              f"p10 {pct(got, 0.1):8.1f}   n={len(got)}")
    fresh = statistics.median(rates["fresh sandboxes"])
    for label, got in rates.items():
        if label != "fresh sandboxes":
            print(f"  {f'{label} / fresh (medians)':<46} {statistics.median(got) / fresh:10.2f}")


async def template_rows(n: int, limits: SandboxLimits) -> dict[str, float]:
    """Instances forked from a template beside fresh bubblewrap sandboxes, in one run; returns
    the medians (ms) for `--compare-src`."""
    from envduels.sandbox._template import instance_mode, template_problem

    print(f"instances from templates vs fresh sandboxes ({instance_mode(limits)}):")
    if template_problem(limits) is not None:
        print("  (no templates on this host: nothing to compare)")
        return {}
    meter = _CpuMeter()
    try:
        fresh: dict[bool, tuple[list[float], list[float], list[float], list[float]]] = {}
        for templates in (False, True, False, True):   # alternated: load hits both alike
            got = await _instances(n // 2, limits, templates=templates, meter=meter)
            old = fresh.setdefault(templates, ([], [], [], []))
            for mine, new in zip(old, got, strict=True):
                mine.extend(new)
    finally:
        meter.close()
    for templates, label in ((False, "fresh bubblewrap sandbox (cold start)"),
                             (True, "instance forked from a template")):
        walls, cpu_all, cpu_self, cpu_template = fresh[templates]
        row(f"{label}: wall", walls)
        if meter.ok:
            row(f"{label}: CPU, all processes", cpu_all,
                "target <= 3 ms" if templates else "")
            row(f"{label}: CPU, sandbox side", [a - s for a, s in zip(cpu_all, cpu_self,
                                                                         strict=True)])
        if templates:
            row(f"{label}: CPU, of it the template process", cpu_template)
        row(f"{label}: CPU, harness process", cpu_self)
    if meter.ok:
        ratio = statistics.median(fresh[False][1]) / statistics.median(fresh[True][1])
        print(f"  {'CPU per instance, fresh / template (medians)':<46} {ratio:10.2f}")
    names = ("wall", "cpu_all", "cpu_harness", "cpu_template")
    return {f"{kind} {what}": statistics.median(values) * 1000
            for kind, key in (("fresh", False), ("template", True))
            for what, values in zip(names, fresh[key], strict=True)
            if not (what == "cpu_template" and kind == "fresh")}


def compare_templates(other_src: str, n: int, rounds: int) -> None:
    """`--templates-only` of this tree and of `other_src` (e.g. main's src), alternated, each
    in a process of its own: CPU per forked instance before and after, side by side."""
    import envduels

    trees = {"this": str(Path(envduels.__file__).resolve().parent.parent),
             "other": str(Path(other_src).resolve())}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, src in trees.items():
            done = subprocess.run([sys.executable, __file__, "--templates-json", str(n)],
                                  capture_output=True, text=True, check=True,
                                  env={**os.environ, "PYTHONPATH": src})
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"instances, {n} per run, {rounds} runs per tree alternated (medians of the runs' "
          f"medians, ms); other = {trees['other']}")
    keys = list(got["this"][0])
    print(f"  {'':<8}" + "".join(f"{k:>23}" for k in keys))
    for name in ("other", "this"):
        print(f"  {name:<8}" + "".join(
            f"{statistics.median(r[k] for r in got[name]):23.2f}" for k in keys))


async def main(quick: bool, flood_only: bool = False) -> None:
    if flood_only:
        await print_flood(10.0, SandboxLimits())
        return
    n_cold, n_pool, n_steps = (10, 10, 1000) if quick else (40, 60, 5000)
    limits = SandboxLimits()
    h = host()
    print(f"envduels sandbox benchmark  (cpus={os.cpu_count()}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python in sandbox: {h.python}, "
          f"per-slot uid: {h.root}, cgroup: {h.cgroups is not None})")
    await template_rows(20 if quick else 80, limits)
    resets = {t: await asyncio.to_thread(_gym_resets, 10 if quick else 40, t) for t in (False, True)}
    print(f"  {'envduels.gym resets/s, fresh sandboxes':<46} {resets[False]:10.1f}")
    print(f"  {'envduels.gym resets/s, from a template':<46} {resets[True]:10.1f}")
    print("cold start (spawn -> loaded -> first reset done):")
    sandboxed, unsandboxed, bare = await cold_starts(n_cold, limits)
    row("sandboxed instance (bwrap + uid + cgroup)", sandboxed, "target <= 40 ms")
    row("same worker, no sandbox (--unsafe-no-sandbox)", unsandboxed)
    row(f"bare subprocess `{os.path.basename(h.python)} -c pass`", bare)
    await residency(4 if quick else 15, limits)
    await heavy_info_lag(3 if quick else 10, limits)
    print("instance ready from a warm pool (open() with a worker waiting):")
    row("EnvPool.open() on a warm pool", await ready_from_pool(n_pool, limits), "target <= 1 ms")
    print("step round trip (trivial environment):")
    times, rate = await warm_steps(n_steps, limits)
    row("sandboxed EnvInstance.step()", times, "target <= 0.2 ms")
    row("in-process env.step() call", in_process(n_steps))
    print("freeze between calls (interleaved blocks, same run):")
    frozen = await frozen_vs_running_steps(n_steps, limits)
    row("step round trip, freezer on (2 ms grace)", frozen[True])
    row("step round trip, no freezer", frozen[False])
    print(f"  {'ratio of medians back to back':<46} "
          f"{statistics.median(frozen[True]) / statistics.median(frozen[False]):10.2f}")
    row("step after a 5 ms pause, frozen during it", frozen[("paused", True)])
    row("step after a 5 ms pause, no freezer", frozen[("paused", False)])
    print(f"  {'ratio of medians after a pause':<46} "
          f"{statistics.median(frozen[('paused', True)]) / statistics.median(frozen[('paused', False)]):10.2f}")
    if "pair" in frozen:
        row("one freeze + thaw of a live sandbox (kernel)", frozen["pair"])
    await print_flood(3.0 if quick else 10.0, limits)
    print("throughput:")
    print(f"  {'steps/s, one instance, sequential':<46} {rate:10.0f}")
    print(f"  {'steps/s, 8 instances concurrently':<46} "
          f"{await parallel_rate(8, n_steps // 8, limits):10.0f}")
    await runtimes(4 if quick else 15, 200 if quick else 1000)
    print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--flood-only", action="store_true",
                        help="only the frame-flood figures (also runs against older sources)")
    parser.add_argument("--templates-only", action="store_true",
                        help="only the template rows (instances and envduels.gym resets)")
    parser.add_argument("--compare-src", metavar="SRC",
                        help="only cold starts, alternated with those of SRC (e.g. main's src); "
                             "with --templates-only or --vector-only: those figures of SRC")
    parser.add_argument("--runtimes-only", action="store_true",
                        help="only bubblewrap and gVisor side by side")
    parser.add_argument("--vector-only", action="store_true",
                        help="only make_vec resets/s (a local one-node Ray cluster), both ways")
    parser.add_argument("--templates-json", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.templates_json:
        with contextlib.redirect_stdout(sys.stderr):
            medians = asyncio.run(template_rows(args.templates_json, SandboxLimits()))
        print(json.dumps(medians))
        sys.exit(0)
    if args.templates_only and args.compare_src:
        compare_templates(args.compare_src, 20 if args.quick else 60, 2 if args.quick else 3)
        sys.exit(0)
    if args.vector_only:
        vector_rows(4, 5 if args.quick else 20, args.compare_src)
        sys.exit(0)
    if args.runtimes_only:
        asyncio.run(runtimes(4 if args.quick else 15, 200 if args.quick else 1000))
        sys.exit(0)
    if args.compare_src:
        compare_cold_starts(args.compare_src, 4 if args.quick else 10)
        sys.exit(0)
    if args.templates_only:
        async def _only() -> None:
            await template_rows(20 if args.quick else 80, SandboxLimits())
            resets = {t: await asyncio.to_thread(_gym_resets, 10 if args.quick else 40, t)
                      for t in (False, True)}
            print(f"  {'envduels.gym resets/s, fresh sandboxes':<46} {resets[False]:10.1f}")
            print(f"  {'envduels.gym resets/s, from a template':<46} {resets[True]:10.1f}")
        asyncio.run(_only())
        sys.exit(0)
    sys.exit(asyncio.run(main(args.quick, args.flood_only)))
