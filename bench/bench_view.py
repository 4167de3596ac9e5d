"""`envduels view` on a run of 30,000 episodes: how long each page takes to answer.

Builds the run database synthetically through the store's own API (`Store.put_environment`,
`put_validation`, `put_episode`, `put`), as the engine writes it: 20 players, 200 environments,
4 seeds, both conditions (about 30,000 episodes), each transcript as long as its turns (a
system prompt, the first observation, then a reply, a step and an observation per turn). Then
serves it with the viewer (uvicorn on loopback) and times real HTTP requests.

Prints, per page, the median and 90th percentile over repeated requests, side by side with the
baseline measured in the same run: what one page would cost if it read and analysed the run from
scratch (`Store.tables()` + the viewer's analysis), i.e. without the viewer's caches. Then the
same pages while a writer adds an episode every 20 ms (a run in progress). Target: every page
under 300 ms. Run: `.venv/bin/python bench/bench_view.py [--players 20] [--repeat 15]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx

from envduels.analysis import simulate_tournament
from envduels.duel.usage import Usage
from envduels.envs import EnvSpec
from envduels.players import CallRecord
from envduels.store import EnvRecord, EpisodeRow, RunReader, ValidationRecord
from envduels.store.writer import RunWriter
from envduels.view import create_app
from envduels.view._reader import analyse
from envduels.view.commands import running

SYSTEM = "You are solving an interactive text environment. " * 10
OBS = "You are in a maze of twisty passages; exits lead north, east and south. " * 3
REPLY = "Let me think step by step about which way leads out. " * 4 + "\\boxed{north}"


def transcript(turns: int, hinted: bool) -> list[dict]:
    t = [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": ("Hint: follow the left wall.\n\n" if hinted else "") + OBS}]
    for k in range(1, max(turns, 1) + 1):
        t += [{"role": "assistant", "content": REPLY, "turn": k, "input_tokens": 900, "output_tokens": 60},
              {"role": "env", "action": "\\boxed{north}", "reward": 0.0, "terminated": False,
               "truncated": False, "content": OBS},
              {"role": "user", "content": "Observation: " + OBS}]
    t.append({"role": "outcome", "content": "failure: turn cap", "outcome": "failure"})
    return t


def build(run_dir: Path, players: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    sim = simulate_tournament(players=players, envs_per_author=5, rounds=2, seeds=4, seed=0,
                              p_invalid=0.05, p_incomplete=0.01, p_error=0.01, transcripts=False)
    t = sim.tables
    store = RunWriter(run_dir)
    store.set_meta("config", {
        "name": "bench", "players": [{"name": p, "provider": "openai", "model": p,
                                      "roles": ["author", "solver"]} for p in t.players["name"]],
        "tournament": {"rounds": 2, "envs_per_author": 5, "seeds_per_env": 4, "self_play": False}})
    for i, e in enumerate(t.environments.to_dict("records")):
        store.put_validation(ValidationRecord(
            e["env_id"], 0, author=e["author"], round=int(e["round"]), valid=bool(e["valid"]),
            reasons=[] if e["valid"] else ["no oracle"], verdict=None,
            reply="```python\n" + (e["source"] or "") + "\n```"))
        store.put_environment(EnvRecord(EnvSpec(
            e["env_id"], (e["source"] or "") + "\n# padding\n" * 60, class_name=e["class_name"],
            max_turns=24, domain=e["domain"], author=e["author"], title=e["title"],
            hints={"hint": e["hint"]}, benchmark_seeds=tuple(e["benchmark_seeds"])),
            round=int(e["round"]), slot=i, valid=bool(e["valid"]), invalid_reason=e["invalid_reason"]))
    n = 0
    for ep in t.episodes.to_dict("records"):
        turns = int(ep["turns"]) or 1
        store.put_episode(EpisodeRow(
            episode_key=ep["episode_key"], env_id=ep["env_id"], author=ep["author"],
            solver=ep["solver"], round=int(ep["round"]), domain=ep["domain"], seed=int(ep["seed"]),
            trial=int(ep["trial"]), hinted=bool(ep["hinted"]), outcome=ep["outcome"],
            reason=ep["reason"] or "", turns=turns, self_play=bool(ep["self_play"]),
            transcript=transcript(turns, bool(ep["hinted"]))))
        store.put(f"call-{n}", CallRecord(
            request={"n": n}, text="\\boxed{x}", finish_reason="stop", player=ep["solver"],
            role="solver", call_id=f"ep:{ep['episode_key']}:turn:1",
            usage=Usage(calls=1, input_tokens=900 * turns, output_tokens=60 * turns,
                        cost_usd=0.001 * turns, retries=n % 3)))
        n += 1
    store.close()
    return n, time.perf_counter() - t0


def timed(client: httpx.Client, url: str, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = client.get(url)
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, (url, r.status_code)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--players", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--keep", type=Path, help="build the run here once and reuse it next time")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.keep or Path(tmp) / "run"
        if not (run / "run.db").exists():
            n, t_build = build(run, args.players)
            print(f"built {n:,} episodes through the RunWriter API in {t_build:.1f} s")
        with RunWriter(run) as store:   # the longest episode a tournament plays: 24 turns
            if store.reader.episode("bench-long-24") is None:
                e = store.reader.episode(store.reader.episode_index()[0]["episode_key"])
                store.put_episode(EpisodeRow(**{**e.__dict__, "episode_key": "bench-long-24",
                                                "seed": 99_999, "turns": 24,
                                                "transcript": transcript(24, True)}))
        size = (run / "run.db").stat().st_size + sum(p.stat().st_size for p in run.glob("run.db-*"))
        print(f"run database: {size / 2**20:.0f} MiB")

        store = RunReader(run)
        t0 = time.perf_counter()
        store.tables()
        analyse(store, 0)
        baseline = time.perf_counter() - t0
        store.close()

        app = create_app([run])
        reader = app.state.readers[0]
        with running(app) as url, httpx.Client(timeout=120) as client:
            t0 = time.perf_counter()
            client.get(url + "run/0/").raise_for_status()
            first = time.perf_counter() - t0
            while not client.get(url + "run/0/live.json").json()["analysis_ready"]:
                time.sleep(0.1)
            ready = time.perf_counter() - t0
            eps = reader.episodes_of()
            env_id = eps[len(eps) // 2]["env_id"]
            long_ep = max(eps, key=lambda e: e["turns"])   # bench-long-24
            pages = {
                "runs": "",
                "overview": "run/0/",
                "environments": "run/0/environments",
                "environments, filtered+sorted": "run/0/environments?valid=yes&sort=lift&order=desc",
                "environment": f"run/0/env/{quote(env_id, safe='')}",
                f"episode ({long_ep['turns']} turns)": f"run/0/episode/{quote(long_ep['episode_key'], safe='')}",
                "player": f"run/0/player/{eps[0]['solver']}",
                "live.json": "run/0/live.json",
            }
            quiet = {name: timed(client, url + path, args.repeat) for name, path in pages.items()}

            stop = threading.Event()
            writer = RunWriter(run)
            template = writer.reader.episode(eps[0]["episode_key"])

            def write() -> None:
                k = 0
                while not stop.is_set():
                    writer.put_episode(EpisodeRow(**{**template.__dict__, "episode_key": f"live-{k}",
                                                     "seed": 10_000 + k}))
                    k += 1
                    time.sleep(0.02)

            th = threading.Thread(target=write)
            th.start()
            try:
                live = {name: timed(client, url + path, args.repeat) for name, path in pages.items()}
            finally:
                stop.set()
                th.join()
                writer.close()

        print(f"first overview after start (reads the episode index once): {first * 1000:.0f} ms; "
              f"the first analysis (in the background) ready after {ready:.1f} s")
        print(f"baseline, one page from scratch (Store.tables() + analysis): {baseline * 1000:.0f} ms")
        print(f"{'page':<34}{'median ms':>10}{'p90 ms':>9}{'÷ baseline':>12}{'  while writing: median':>24}{'p90':>7}")
        worst = 0.0
        for name in pages:
            q, w = sorted(quiet[name]), sorted(live[name])
            p90 = lambda s: s[min(len(s) - 1, int(0.9 * len(s)))]  # noqa: E731
            worst = max(worst, statistics.median(q), statistics.median(w))
            print(f"{name:<34}{statistics.median(q) * 1000:>10.1f}{p90(q) * 1000:>9.1f}"
                  f"{statistics.median(q) / baseline:>12.4f}{statistics.median(w) * 1000:>24.1f}"
                  f"{p90(w) * 1000:>7.1f}")
        print(f"slowest median {worst * 1000:.0f} ms: {'under' if worst < 0.3 else 'OVER'} the 300 ms target")


if __name__ == "__main__":
    main()
