"""Players throughput: 64 concurrent calls against a loopback server with a fixed 100 ms latency.

Prints achieved calls/s against the ideal (concurrency / latency = 640/s), the client's CPU time
per call, and, in the same run, the same load through the bare official `openai` client: the
ceiling this machine allows, so the players layer's own cost is the ratio between the two.

    .venv/bin/python bench/bench_players.py [--calls 1920] [--concurrency 64] [--latency-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import openai

from envduels.config import PlayerConfig
from envduels.players import MemoryCache, build_player

MESSAGES = [{"role": "system", "content": "You solve puzzles."},
            {"role": "user", "content": "Observation: a 3x3 grid. Your move?"}]


async def _drive(call, calls: int, concurrency: int) -> tuple[float, float]:
    """Run `calls` calls through `concurrency` workers; returns (wall s, client CPU s)."""
    counter = iter(range(calls))

    async def worker() -> None:
        for i in counter:
            await call(i)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - wall0, time.process_time() - cpu0


async def bench_players(url: str, calls: int, concurrency: int) -> tuple[float, float]:
    cfg = PlayerConfig(name="bench", provider="openai", model="scripted", base_url=url,
                       max_concurrency=concurrency, max_tokens=64, timeout_s=30)
    player = build_player(cfg, cache=MemoryCache(), run_seed=0)

    async def call(i: int) -> None:
        result = await player.chat(MESSAGES, call_id=f"bench:{i}", role="solver")
        assert result.text and not result.cached

    await _drive(lambda i: call(-1 - i), concurrency * 2, concurrency)  # warm the pool
    out = await _drive(call, calls, concurrency)
    await player.aclose()
    return out


async def bench_bare(url: str, calls: int, concurrency: int) -> tuple[float, float]:
    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)

    async def call(i: int) -> None:
        r = await client.chat.completions.create(model="scripted", messages=MESSAGES,
                                                 max_tokens=64, temperature=0.7, seed=i)
        assert r.choices[0].message.content

    await _drive(call, concurrency * 2, concurrency)
    out = await _drive(call, calls, concurrency)
    await client.close()
    return out


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; Linux /proc, else 0."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1920)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=2,
                    help="alternate the two clients this many times; keep each one's best run")
    args = ap.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0",
         "--latency-ms", str(args.latency_ms)], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        ideal = args.concurrency / (args.latency_ms / 1000.0)
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(args.repeat):  # alternating evens out a load that changes meanwhile
            for name, bench in (("envduels players", bench_players),
                                ("bare openai client", bench_bare)):
                server_cpu = _cpu_of(server.pid)
                wall, cpu = asyncio.run(bench(url, args.calls, args.concurrency))
                run = (wall, cpu, _cpu_of(server.pid) - server_cpu)
                if name not in best or run[0] < best[name][0]:
                    best[name] = run
        rows = [(name, *run) for name, run in best.items()]
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{args.calls} calls, {args.concurrency} concurrent, server latency "
          f"{args.latency_ms:g} ms: ideal {ideal:.0f} calls/s (best of {args.repeat})")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'client':<20} {'calls/s':>8} {'of ideal':>9} {'client CPU ms/call':>19} "
          f"{'server CPU ms/call':>19}")
    rates = {}
    for name, wall, cpu, server_cpu in rows:
        rate = args.calls / wall
        rates[name] = rate
        # server CPU includes the warm-up calls
        per_server = server_cpu / (args.calls + 2 * args.concurrency) * 1000
        print(f"{name:<20} {rate:8.0f} {rate / ideal:9.1%} {cpu / args.calls * 1000:19.2f} "
              f"{per_server:19.2f}")
    ratio = rates["envduels players"] / rates["bare openai client"]
    print(f"players / bare-client ceiling: {ratio:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
