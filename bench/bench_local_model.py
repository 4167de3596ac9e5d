"""The embedded model's speed through each installed llama.cpp binding, side by side in one run.

For each binding installed here (the prebuilt `xllamacpp`, the locally built `llama-cpp-python`),
a `local` player (the bundled SmolLM2-135M, the player's own chat template, seeds and usage
counts) starts its model server, then answers the same requests: one short solver-sized chat
per seed, `--tokens` tokens each. The bindings take turns, request by request, so both see the
same machine load. Prints per binding: server start, generated tokens/s (wall), the server's
CPU seconds per generated token (steadier than wall time on a shared machine), the prompt's
token count (the same when both apply the same chat template) and how many seeds gave the
same text twice (a seed must reproduce its answer).

    .venv/bin/python bench/bench_local_model.py [--requests 6] [--tokens 64] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from envduels.config import PlayerConfig
from envduels.players import _local, build_player

PROMPT = [{"role": "system", "content": "You solve puzzles. End with \\boxed{your move}."},
          {"role": "user", "content": "Observation: a pile of 17 stones; take 1 to 3. Your move?"}]


@dataclass
class Figures:
    binding: str
    start_s: float = 0.0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    tokens: int = 0
    prompt_tokens: set[int] = field(default_factory=set)
    reproduced: int = 0


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _player(binding: str, tokens: int):
    os.environ[_local.BINDING_ENV] = binding  # read when the player is built
    return build_player(PlayerConfig(name=f"bench-{binding}", provider="local",
                                     model="smollm2-135m-instruct", max_tokens=tokens,
                                     temperature=0.8, timeout_s=600))


async def run(bindings: list[str], requests: int, tokens: int) -> list[Figures]:
    players = {b: _player(b, tokens) for b in bindings}
    figures = {b: Figures(b) for b in bindings}
    try:
        for b, player in players.items():
            t0 = time.perf_counter()
            await player.client()  # starts the model server and waits until it answers
            figures[b].start_s = time.perf_counter() - t0
        for i in range(requests):
            for b, player in players.items():
                f, pid = figures[b], player.server.process.pid
                cpu0, t0 = _cpu_of(pid), time.perf_counter()
                first = await player.chat(PROMPT, call_id=f"seed-{i}", role="solver")
                f.wall_s += time.perf_counter() - t0
                f.cpu_s += _cpu_of(pid) - cpu0
                f.tokens += first.output_tokens
                f.prompt_tokens.add(first.input_tokens)
                again = await player.chat(PROMPT, call_id=f"seed-{i}", role="solver")
                f.reproduced += again.text == first.text
    finally:
        for player in players.values():
            await player.aclose()
    return list(figures.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6, help="requests per binding")
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens per request")
    ap.add_argument("--threads", type=int, default=None,
                    help="xllamacpp threads (default: half the CPUs, at most 4)")
    args = ap.parse_args()
    bindings = _local.installed_bindings()
    if not bindings:
        print("no llama.cpp binding installed; run scripts/install.sh")
        return 2
    if args.threads is not None:
        _local.server_threads = lambda: (args.threads, args.threads)  # type: ignore[assignment]
    print(f"{len(os.sched_getaffinity(0))} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"xllamacpp threads {_local.server_threads()[0]}; bindings: {', '.join(bindings)}")
    # Players built without a response cache ask the server both times: what checks that a
    # seed reproduces its answer.
    results = asyncio.run(run(bindings, args.requests, args.tokens))
    print(f"{'binding':<18} {'version':<14} {'start s':>8} {'tokens/s':>9} {'CPU s/token':>12} "
          f"{'prompt tokens':>14} {'same text':>10}")
    for f in results:
        print(f"{f.binding:<18} {_local.binding_version(f.binding):<14} {f.start_s:>8.2f} "
              f"{f.tokens / f.wall_s:>9.1f} {f.cpu_s / max(f.tokens, 1):>12.4f} "
              f"{','.join(map(str, sorted(f.prompt_tokens))):>14} "
              f"{f.reproduced:>5}/{args.requests:<4}")
    if len(results) == 2:
        a, b = results
        print(f"{a.binding} / {b.binding}: {(a.tokens / a.wall_s) / (b.tokens / b.wall_s):.2f}× "
              f"the tokens/s, {(a.cpu_s / a.tokens) / (b.cpu_s / b.tokens):.2f}× the CPU per token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
