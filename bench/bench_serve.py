"""`envduels serve` throughput beside OpenEnv's own server, in one run.

Both servers serve the same environment class (a library environment, `number_guess` by
default) through OpenEnv's `create_fastapi_app`, each in its own process on 127.0.0.1, and both
play the duel's protocol (`duel.protocol.Episode`):
- envduels: `envduels serve NAME`, every session in its own bubblewrap sandbox;
- OpenEnv baseline: the environment class constructed in the server process, unsandboxed.
Clients are OpenEnv's `GenericEnvClient`s (WebSocket). A session is one connection playing one
episode: connect, reset on a fresh seed, step a fixed guess sequence until done, close.

Run: nice -n 10 .venv/bin/python bench/bench_serve.py [--seconds 5] [--clients 1,8,32]
Prints sessions/s and steps/s for each number of concurrent clients, and envduels' share of the
baseline (the cost of a sandbox per session). The load average is printed: other processes
competing for the CPUs change every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from openenv.core.generic_client import GenericEnvClient

REPLIES = [f"\\boxed{{{g}}}" for g in (100, 50, 150, 25, 75, 125, 175, 12, 37, 62, 87, 112)]


def baseline_server(name: str) -> None:
    """The OpenEnv baseline: `name`'s class in this process, unsandboxed, same protocol."""
    import uvicorn
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment

    from envduels.duel.protocol import FORMAT_ERROR, Episode, turn_cap
    from envduels.envs import resolve
    from envduels.serve._env import DuelAction, DuelObservation, DuelState
    from envduels.view.commands import bind, url_of

    spec = resolve(name).one()
    namespace: dict[str, Any] = {}
    exec(compile(spec.source, spec.id, "exec"), namespace)   # trusted: a library environment
    cls = next(v for k, v in namespace.items() if isinstance(v, type)
               and callable(getattr(v, "step", None)) and callable(getattr(v, "reset", None)))

    class InProcess(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.env: Any = None
            self.episode: Episode | None = None

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  **kwargs: Any) -> DuelObservation:
            self.env = cls(max_turns=spec.max_turns)
            observation, _ = self.env.reset(seed)
            self.episode = Episode(turn_cap(spec.max_turns))
            return DuelObservation(text=self.episode.start(observation), env_id=spec.id,
                                   seed=seed)

        def step(self, action: DuelAction, timeout_s: float | None = None,
                 **kwargs: Any) -> DuelObservation:
            assert self.episode is not None
            box = self.episode.act(action.message)
            if box is None:
                return DuelObservation(text=FORMAT_ERROR, reward=0.0, done=self.episode.done)
            obs, reward, terminated, truncated, _ = self.env.step(box)
            upcoming = self.episode.observe(obs, float(reward), bool(terminated), bool(truncated))
            return DuelObservation(text=upcoming or obs, reward=float(reward),
                                   done=self.episode.done, turn=self.episode.turn)

        @property
        def state(self) -> DuelState:
            return DuelState()

    app = create_fastapi_app(InProcess, DuelAction, DuelObservation, max_concurrent_envs=64)
    sock = bind("127.0.0.1", 0)
    print(f"baseline: {url_of(sock)}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def start(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.split("http://", 1)[1].strip().rstrip("/")


async def session(url: str, env_id: str, seed: int) -> int:
    """One connection playing one episode; returns the steps taken."""
    steps = 0
    async with GenericEnvClient(base_url=f"http://{url}", message_timeout_s=120) as env:
        await env.reset(env_id=env_id, seed=seed)
        for reply in REPLIES:
            steps += 1
            if (await env.step({"message": reply})).done:
                break
    return steps


async def load(url: str, env_id: str, clients: int, seconds: float) -> tuple[float, float]:
    """`clients` concurrent clients, each playing sessions back to back for `seconds`;
    returns (sessions/s, steps/s) over the sessions that finished in the window."""
    deadline = time.perf_counter() + seconds
    counts = [0, 0]

    async def client(k: int) -> None:
        seed = k * 1_000_003
        while time.perf_counter() < deadline:
            steps = await session(url, env_id, seed)
            counts[0] += 1
            counts[1] += steps
            seed += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    took = time.perf_counter() - t0
    return counts[0] / took, counts[1] / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="number_guess", help="a library environment (trusted code)")
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring window per row")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_server:
        baseline_server(args.env)
        return
    levels = [int(c) for c in args.clients.split(",")]
    envduels = Path(sys.executable).parent / "envduels"
    ours, ours_url = start([str(envduels), "serve", args.env, "--port", "0",
                            "--max-sessions", str(max(levels) + 4)])
    base, base_url = start([sys.executable, __file__, "--baseline-server", "--env", args.env])
    try:
        for url in (ours_url, base_url):   # warm both: imports, first sandboxes
            asyncio.run(load(url, args.env, 1, 0.5))
        print(f"bench_serve: {args.env}, {args.seconds:g} s per row, load average "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"  {'clients':>7}  {'envduels sessions/s':>20} {'steps/s':>9}   "
              f"{'OpenEnv in-process sessions/s':>30} {'steps/s':>9}   {'ratio (sessions)':>16}")
        for clients in levels:
            s_ours, st_ours = asyncio.run(load(ours_url, args.env, clients, args.seconds))
            s_base, st_base = asyncio.run(load(base_url, args.env, clients, args.seconds))
            print(f"  {clients:>7}  {s_ours:>20.1f} {st_ours:>9.1f}   {s_base:>30.1f} "
                  f"{st_base:>9.1f}   {s_ours / s_base:>16.2f}", flush=True)
        print("  ratio = envduels / OpenEnv in-process: what one sandbox per session costs")
    finally:
        for proc in (ours, base):
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
