"""A long-lived caller of the library: runs EPISODES episodes through one path, then prints one
JSON line with its zombie children (name and pid) and how many episodes it played.

Usage: python tests/long_lived_caller.py PATH EPISODES [WORK_DIR]
PATH: engine (`envduels run`'s engine, a scripted solver), gym (`envduels.gym`), rl (the
training rollout `envduels.rl`), ray (the engine on the Ray executor: a two-node cluster this
process starts; run it inside a network namespace of its own, as tests/cluster does), serve
(`envduels serve` as this process's child, through its client; the server's own zombie
children are printed on stderr).
Every path plays the library's `number_guess` with a scripted player that bisects.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

ENV = "number_guess"
KEY = "sk-test-long-lived"


def guess(text: str, high: int = 100) -> str:
    """The bisecting player: the middle of what the answers so far leave."""
    low = 1
    for said, way in re.findall(r"(\d+) is wrong: the number is (higher|lower)", text):
        low, high = (int(said) + 1, high) if way == "higher" else (low, int(said) - 1)
    return f"\\boxed{{{(low + high) // 2}}}"


def respond(model: str, messages: list[dict[str, str]]) -> str:
    first = next(m["content"] for m in messages if m["role"] == "user")
    high = re.search(r"whole number from 1 to (\d+)", first)
    return guess(" ".join(m["content"] for m in messages if m["role"] == "user"),
                 int(high.group(1)) if high else 100)


def run_engine(work: Path, episodes: int, executor: dict | None = None) -> int:
    from envduels.engine.run import run_command
    from envduels.envs import resolve
    from envduels.store import Store
    from envduels.testing import ScriptedServer

    seeds = len(resolve(ENV).one().benchmark_seeds)
    os.environ["ENVDUELS_TEST_KEY"] = KEY
    with ScriptedServer(respond, api_key=KEY) as server:
        cfg = {"name": "long-lived", "seed": 1, "output_dir": str(work / "run"),
               "players": [{"name": "s0", "provider": "openai", "base_url": server.base_url,
                            "model": "m-s0", "api_key_env": "ENVDUELS_TEST_KEY",
                            "roles": ["solver"], "max_concurrency": 8, "max_tokens": 64}],
               "tournament": {"environments": [ENV], "max_turns": 4, "history": "none",
                              "trials_per_seed": max(1, episodes // (2 * seeds))}}
        if executor is not None:
            cfg["executor"] = executor
        path = work / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        code = run_command(path, unsafe_no_sandbox=False, quiet=True)
    assert code == 0, code
    with Store(work / "run", create=False) as store:
        return len(store.episodes())


def run_gym(episodes: int) -> int:
    import envduels.gym

    env = envduels.gym.make(ENV, max_turns=4)
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        seen, done = obs, False
        while not done:
            obs, _reward, terminated, truncated, _info = env.step(guess(seen))
            seen += " " + obs
            done = terminated or truncated
    env.close()
    return episodes


class _Chars:
    """A token policy whose tokens are characters; it bisects (tests/rl's CharPolicy shape)."""

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return [ord(c) for c in "".join(f"<{m['role']}>{m['content']}" for m in messages)]

    def turn_ids(self, messages: list[dict[str, str]], reply_ids: list[int]) -> list[int]:
        return [0] + [ord(c) for c in f"<user>{messages[-1]['content']}"]

    def generate(self, contexts: list[list[int]]) -> list[list[int]]:
        return [[ord(c) for c in guess("".join(chr(t) for t in ctx if t))] + [0]
                for ctx in contexts]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(t) for t in ids if t)


def run_rl(episodes: int) -> int:
    from envduels.envs import resolve
    from envduels.rl._episodes import EpisodeRequest, play_episodes
    from envduels.sandbox import EnvPool

    spec = resolve(ENV).one()

    async def play() -> int:
        played = 0
        async with EnvPool(warm=0) as pool:
            while played < episodes:   # a training step's batch: 20 rollouts in lockstep
                batch = [EpisodeRequest(spec, seed) for seed in range(played, played + 20)]
                played += len(await play_episodes(batch, _Chars(), pool, max_turns=4))
        return played

    return asyncio.run(play())


def run_ray(work: Path, episodes: int) -> int:
    """A two-node cluster on this machine (tests/cluster's): the run, then the worker node
    goes (its raylet killed, as when a machine leaves: its Ray workers are orphaned), then the
    cluster."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    try:
        return run_engine(work, episodes, {"kind": "ray", "address": cluster.address})
    finally:
        cluster.remove_node(worker, allow_graceful=False)
        ray.shutdown()
        cluster.shutdown()


def _zombies_of(pid: int) -> list[list[object]]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    name, fields = fh.read().split("(", 1)[1].rsplit(")", 1)
            except OSError:
                continue
            if fields.split()[:2] == ["Z", str(pid)]:
                found.append([int(entry), name])
    return found


def run_serve(episodes: int) -> int:
    """`envduels serve` as this process's child (this process used the sandbox first, as a
    trainer or an orchestrator does): episodes through its client, then the server crashes
    (SIGKILL). The server's zombie children, counted while it runs, go to stderr's last line
    before the result (the test reads both)."""
    import signal
    import subprocess

    import httpx

    from envduels.sandbox import check_sandbox
    from envduels.serve.client import DuelClient

    check_sandbox()
    script = Path(sys.executable).parent / "envduels"
    server = subprocess.Popen([str(script), "serve", ENV, "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=os.environ.copy())
    assert server.stdout is not None
    url = server.stdout.readline().split(": ", 1)[1].strip().rstrip("/")
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.1)
    client = DuelClient(url)
    for seed in range(episodes):
        text = client.reset(env_id=ENV, seed=seed, max_turns=4)
        seen = text
        while not client.done:
            seen += " " + client.play(guess(seen))
    time.sleep(1.0)
    print(json.dumps({"server_zombies": _zombies_of(server.pid)}), file=sys.stderr, flush=True)
    server.send_signal(signal.SIGKILL)   # a crash: no cleanup of its own
    server.wait()
    return episodes


def main() -> None:
    path, episodes = sys.argv[1], int(sys.argv[2])
    work = Path(sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="long-lived-"))
    played = {"engine": lambda: run_engine(work, episodes), "gym": lambda: run_gym(episodes),
              "rl": lambda: run_rl(episodes), "ray": lambda: run_ray(work, episodes),
              "serve": lambda: run_serve(episodes)}[path]()
    time.sleep(1.0)   # what ends in the background has ended
    print(json.dumps({"episodes": played, "zombies": _zombies_of(os.getpid())}), flush=True)


if __name__ == "__main__":
    main()
