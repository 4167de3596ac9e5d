"""Engine throughput: a tournament of 6 scripted players against a local scripted server.

    .venv/bin/python bench/bench_engine.py [--latency-ms 50] [--seeds 2] [--concurrency 8]

The server runs as a subprocess (`python -m envduels.testing.server`) with a fixed latency per
answer; the engine runs here, with environments in the bubblewrap sandbox. Then, in the same
process and against the same server, the **ceiling**: the very solver conversations the engine
sent (same messages, same number of calls per episode, one call at a time per episode, each
player at its `max_concurrency`) driven straight through `envduels.players`, with no engine, no
sandbox and no database. On a small machine the server and the HTTP client saturate the CPUs
long before 6 x 8 slots x 20 calls/s, so the ceiling, not the slot arithmetic, is what the
engine can be held to. Prints:

- episodes/s over the whole run, over the solving phase, and of the ceiling;
- engine / ceiling: solving episodes/s as a share of the ceiling's (1.0: the engine costs
  nothing the providers do not already cost); engine-bound fraction = 1 - that share;
- the raw slot-idle fraction: 1 - (sum of solver-call latencies) / (solving wall time x total
  max_concurrency), which also counts what the machine cannot do with or without the engine;
- peak resident memory of the engine process and of its largest child (a sandbox worker),
  and the load average (the machine is shared);
- CPU of the run (engine process and sandboxes, through a cpuacct cgroup) by phase: start-up
  (to the first author call), authoring (its calls and validation, to the first solver call),
  solving (to the last episode), audit tail (the replays after it, and closing), each also for
  the engine process alone, per episode; and the ceiling's CPU per episode.

    .venv/bin/python bench/bench_engine.py --design solver-eval [--trials 16] [--concurrency 32]

Issue 22's own measurement instead of the tournament: one solver at 32 calls in flight, no
authors, the library's `number_guess` x its 4 benchmark seeds x both conditions x 16 trials (128
episodes of 4 turns; the scripted solver bisects). Every design also drives the same
conversations through the bare official `openai` client (one `AsyncOpenAI` per player,
`max_concurrency` at a time), the issue's baseline, and prints the engine's share of both.

    .venv/bin/python bench/bench_engine.py --design solver-eval --cli [--latency-ms 500]

Timed as a user times it: `envduels run CONFIG --quiet` as a subprocess, from its spawn to its
exit (imports, config, validation, pool start, play, audit, closing), against the bare
`openai` client sending the same conversations; the fixed cost around the play is split into
start to first solver call, solving, and last episode to exit, with the interpreter's import
time measured apart (`python -c "import envduels.cli"`). With `--compare-src SRC --repeats N`,
this tree and the envduels at SRC (both as `python -m envduels.cli`) alternate, N runs each,
after one untimed run each (bytecode compiled, the verdict cache holding each tree's entry).

    .venv/bin/python bench/bench_engine.py --audit [--seeds 1]

The replay audit's cost instead: at 50 ms and 500 ms server latency, the same tournament with
the audit on and off (the internal switch `scheduler.AUDIT_EPISODES`), side by side: mean
episode time (play only), mean replay time, their ratio (the audit's cost as a share of episode
time, paid in sandbox time, not in slots or model calls), and the whole-run wall time on / off.
"""

from __future__ import annotations

import argparse
import asyncio
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
    ap.add_argument("--concurrency", type=int, help="max_concurrency per player (default: 8 "
                    "in a tournament, 32 in a solver evaluation)")
    ap.add_argument("--design", choices=("tournament", "solver-eval"), default="tournament",
                    help="the run measured (below)")
    ap.add_argument("--trials", type=int, default=16,
                    help="with --design solver-eval: trials per seed (16: 128 episodes)")
    ap.add_argument("--unsafe-no-sandbox", action="store_true")
    ap.add_argument("--audit", action="store_true",
                    help="measure the replay audit's cost at 50 and 500 ms instead")
    ap.add_argument("--repeats", type=int, default=2,
                    help="with --audit or --compare-src: runs per latency and setting (tree), "
                         "alternated")
    ap.add_argument("--compare-src", metavar="SRC",
                    help="at 50 and 500 ms, this tree against the envduels at SRC (e.g. "
                         "/work/main/src), alternated, side by side")
    ap.add_argument("--workers", type=int, default=None,
                    help="harness worker processes (sandbox.workers; default: one per core, "
                         "0: sandbox work in the engine process)")
    ap.add_argument("--cli", action="store_true",
                    help="time `envduels run` as a subprocess, spawn to exit (above)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.concurrency is None:
        args.concurrency = 32 if args.design == "solver-eval" else 8
    if args.audit:
        return _audit_bench(args)
    if args.compare_src and not args.cli:
        return _compare(args)

    server = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0", "--latency-ms",
         str(args.latency_ms), "--script", str(HERE / "engine_script.py"), "--api-key", "bench"],
        stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            if args.cli:
                return _bench_cli(base_url, Path(tmp), args)
            return _bench(base_url, Path(tmp), args)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _start_server(latency_ms: float) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "envduels.testing.server", "--port", "0", "--latency-ms",
         str(latency_ms), "--script", str(HERE / "engine_script.py"), "--api-key", "bench"],
        stdout=subprocess.PIPE, text=True)
    return server, server.stdout.readline().strip()


def _audit_bench(args: argparse.Namespace) -> int:
    """The audit's cost: per latency, one run with it and one without, side by side."""
    from envduels.engine import scheduler
    from envduels.engine.commands import run_command

    timings: dict[str, list[float]] = {"play": [], "replay": []}
    real_play, real_replay = scheduler.play_episode, scheduler.replay_episode

    async def timed_play(*a, **kw):
        t0 = time.monotonic()
        try:
            return await real_play(*a, **kw)
        finally:
            timings["play"].append(time.monotonic() - t0)

    async def timed_replay(*a, **kw):
        t0 = time.monotonic()
        try:
            return await real_replay(*a, **kw)
        finally:
            timings["replay"].append(time.monotonic() - t0)

    scheduler.play_episode, scheduler.replay_episode = timed_play, timed_replay
    rows = []
    for latency in (50.0, 500.0):
        server, base_url = _start_server(latency)
        try:
            walls: dict[bool, list[float]] = {False: [], True: []}
            play, replay = [], []
            # alternated, so that a warming cache or a change of load hits both alike
            for on in (False, True) * args.repeats:
                timings["play"].clear()
                timings["replay"].clear()
                scheduler.AUDIT_EPISODES = on
                with tempfile.TemporaryDirectory() as tmp:
                    path = _write_config(base_url, Path(tmp), args)
                    started = time.monotonic()
                    code = run_command(path, unsafe_no_sandbox=args.unsafe_no_sandbox, quiet=True)
                    walls[on].append(time.monotonic() - started)
                if code != 0:
                    print(f"run failed with exit code {code}", file=sys.stderr)
                    return code
                if on:
                    play += timings["play"]
                    replay += timings["replay"]
        finally:
            server.terminate()
            server.wait(timeout=10)
        mean_play = sum(play) / len(play)
        mean_replay = sum(replay) / max(1, len(replay))
        rows.append((latency, len(play), len(replay), mean_play, mean_replay,
                     sum(walls[False]) / len(walls[False]), sum(walls[True]) / len(walls[True])))
    scheduler.AUDIT_EPISODES = True
    print(f"players {PLAYERS} x concurrency {args.concurrency}, {args.seeds} seed(s) per "
          f"environment, {args.repeats} run(s) per setting (means), load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'latency':>8} {'episodes':>8} {'replays':>8} {'episode s':>10} {'replay s':>9} "
          f"{'replay/episode':>15} {'run s off':>10} {'run s on':>9} {'on/off':>7}")
    for latency, n, r, ep, rep, off, on in rows:
        print(f"{latency:6.0f}ms {n:8d} {r:8d} {ep:10.3f} {rep:9.3f} {rep / ep:15.3f} "
              f"{off:10.1f} {on:9.1f} {on / off:7.2f}")
    return 0


def _write_config(base_url: str, tmp: Path, args: argparse.Namespace) -> Path:
    """The run of `--design`: `tournament` (6 scripted authors and solvers, one round, each
    author one environment) or `solver-eval` (issue 22's measurement: one solver at
    `--concurrency` calls in flight, no authors, the library's `number_guess` x its 4 benchmark
    seeds x both conditions x `--trials` trials, 4 turns each)."""
    os.environ["BENCH_KEY"] = "bench"
    player = {"provider": "openai", "base_url": base_url, "api_key_env": "BENCH_KEY",
              "max_concurrency": args.concurrency, "max_tokens": 64}
    if args.design == "solver-eval":
        players = [{**player, "name": "s0", "model": "m-s0", "roles": ["solver"]}]
        tournament = {"environments": ["number_guess"], "trials_per_seed": args.trials,
                      "max_turns": 4, "history": "none"}
    else:
        players = [{**player, "name": f"p{i}", "model": f"m-p{i}"} for i in range(PLAYERS)]
        tournament = {"rounds": 1, "envs_per_author": 1, "seeds_per_env": args.seeds,
                      "max_turns": 4, "history": "none"}
    cfg = {"name": "bench", "seed": 1, "output_dir": str(tmp / "run"), "players": players,
           "tournament": tournament, "sandbox": {"warm_workers": 4}}
    if getattr(args, "workers", None) is not None:
        cfg["sandbox"]["workers"] = args.workers
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _timeline(run_dir: Path) -> tuple[int, list[dict], tuple[float | None, float, float]]:
    """(episodes recorded, the solver calls' records, (start of the first author call, start
    of the first solver call, end of the last episode) in Unix seconds) of a finished run, read
    from its database file as every envduels version has written it (`--compare-src` too)."""
    import json
    import sqlite3

    db = sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True)
    try:
        (episodes,), = db.execute("SELECT COUNT(*) FROM episodes").fetchall()
        calls = [json.loads(r) for r, in db.execute(
            "SELECT record FROM calls WHERE role = 'solver' ORDER BY rowid")]
        (author, solver, last), = db.execute(
            "SELECT (SELECT MIN(created - latency_s) FROM calls WHERE role = 'author'),"
            " (SELECT MIN(created - latency_s) FROM calls WHERE role = 'solver'),"
            " (SELECT MAX(created) FROM episodes)").fetchall()
    finally:
        db.close()
    return episodes, calls, (author, solver, last)


def _bench(base_url: str, tmp: Path, args: argparse.Namespace) -> int:
    from envduels.engine.commands import run_command

    path = _write_config(base_url, tmp, args)
    # the ceilings below run in this process after the engine, with the SDK's lazy imports
    # and first-call set-up done: one call first, so the engine's first wave does not pay
    # them alone (a whole command's first call does: `--cli` measures that)
    asyncio.run(_warm_sdk(base_url))
    meter = _CpuMeter()   # after the server started: the engine's process tree only
    meter.sample()
    started, started_unix = time.monotonic(), time.time()
    cpu0 = meter.seconds()
    code = run_command(path, unsafe_no_sandbox=args.unsafe_no_sandbox, quiet=True)
    wall = time.monotonic() - started
    ended_unix = time.time()
    engine_cpu = meter.seconds() - cpu0
    meter.stop()
    if code != 0:
        print(f"run failed with exit code {code}", file=sys.stderr)
        return code

    episodes, solver_calls, (first_author, first_call, last_episode) = _timeline(tmp / "run")
    phases = _phases(meter, [("start-up", started_unix),
                             ("authoring", first_author or first_call),   # none: no authoring
                             ("solving", first_call), ("audit tail", last_episode),
                             ("end", ended_unix)])
    solving = max(1e-9, last_episode - first_call)
    busy = sum(r["latency_s"] for r in solver_calls)
    players = max(1, len({r["player"] for r in solver_calls}))
    slots = players * args.concurrency
    slot_idle = max(0.0, 1.0 - busy / (solving * slots))
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load_engine = os.getloadavg()[0]

    conversations = _conversations(solver_calls)
    cpu0 = meter.seconds()
    ceiling_wall = asyncio.run(_ceiling(path, conversations))
    ceiling_cpu = meter.seconds() - cpu0
    meter.close()
    bare_wall = asyncio.run(_bare_ceiling(path, conversations))
    n = episodes
    ratio = (n / solving) / (len(conversations) / ceiling_wall)
    if args.json:
        import json

        print(json.dumps({"episodes": n, "wall": wall, "solving": solving,
                          "ceiling_eps": len(conversations) / ceiling_wall,
                          "bare_eps": len(conversations) / bare_wall,
                          "load": load_engine, "engine_cpu": engine_cpu,
                          "ceiling_cpu": ceiling_cpu, "phases": phases}))
        return 0
    print(f"{args.design}: {players} solver(s) x concurrency {args.concurrency}, server latency "
          f"{args.latency_ms:g} ms, {n} episodes, {len(solver_calls)} solver calls; "
          f"load average {load_engine:.1f} / {os.getloadavg()[0]:.1f} (engine / ceiling) "
          f"on {os.cpu_count()} CPUs")
    print(f"episodes/s (whole run, {wall:.1f} s):  {n / wall:8.2f}")
    print(f"episodes/s (solving, {solving:.1f} s):     {n / solving:8.2f}")
    print(f"ceiling episodes/s ({ceiling_wall:.1f} s):     "
          f"{len(conversations) / ceiling_wall:8.2f}   (same calls, players only)")
    print(f"bare client episodes/s ({bare_wall:.1f} s): "
          f"{len(conversations) / bare_wall:8.2f}   (same calls, the `openai` client alone)")
    print(f"slot-arithmetic ideal episodes/s:     "
          f"{n / (len(solver_calls) * args.latency_ms / 1000 / slots):8.2f}   (unreachable here)")
    print(f"engine / ceiling:                     {ratio:8.2f}   (solving; whole run "
          f"{n / wall / (len(conversations) / ceiling_wall):.2f})")
    print(f"engine / bare client:                 "
          f"{(n / solving) / (len(conversations) / bare_wall):8.2f}   (solving; whole run "
          f"{n / wall / (len(conversations) / bare_wall):.2f})")
    print(f"engine-bound fraction (vs ceiling):   {max(0.0, 1.0 - ratio):8.2f}")
    print(f"slot-idle fraction (raw):             {slot_idle:8.2f}")
    print(f"peak memory: engine {peak_self:.0f} MiB, largest child {peak_child:.0f} MiB")
    if meter.ok:
        print(f"CPU of the whole run (engine, sandboxes): {engine_cpu:.1f} s = "
              f"{engine_cpu / n * 1000:.0f} ms per episode; the ceiling's: {ceiling_cpu:.1f} s "
              f"= {ceiling_cpu / len(conversations) * 1000:.1f} ms per episode")
        print("by phase (wall s, CPU s of the engine process and sandboxes, of the engine "
              "process alone):")
        for name, (span, tree, own) in phases.items():
            print(f"  {name:12s} {span:6.2f} s wall  {tree:6.2f} s CPU  {own:6.2f} s engine "
                  f"process   ({tree / n * 1000:5.1f} / {own / n * 1000:5.1f} ms per episode)")
    return 0


def _cli_once(base_url: str, tmp: Path, args: argparse.Namespace,
              src: Path | None = None) -> dict[str, float] | int:
    """One `envduels run CONFIG --quiet` from spawn to exit (the installed console script;
    with `src`, `python -m envduels.cli` on that tree), then the bare client on its calls:
    the timings, or the run's non-zero exit code."""
    run_dir = tmp / "run"
    if run_dir.exists():
        import shutil
        shutil.rmtree(run_dir)
    path = _write_config(base_url, tmp, args)
    script = Path(sys.executable).with_name("envduels")
    env = dict(os.environ)
    if src is not None or not script.exists():
        argv = [sys.executable, "-m", "envduels.cli", "run", str(path), "--quiet"]
        if src is not None:
            env["PYTHONPATH"] = str(src)
    else:
        argv = [str(script), "run", str(path), "--quiet"]
    spawned = time.time()
    started = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    exited = time.time()
    if run.returncode != 0:
        print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
        return run.returncode
    n, solver_calls, (_, first_call, last_episode) = _timeline(run_dir)
    bare_wall = asyncio.run(_bare_ceiling(path, _conversations(solver_calls)))
    return {"episodes": n, "wall": wall, "first_call": first_call - spawned,
            "solving": last_episode - first_call, "tail": exited - last_episode,
            "bare": bare_wall, "load": os.getloadavg()[0]}


def _bench_cli(base_url: str, tmp: Path, args: argparse.Namespace) -> int:
    """`envduels run` timed from spawn to exit against the bare client (module docstring);
    with `--compare-src`, this tree and the other alternated, `--repeats` runs each."""
    imports = subprocess.run([sys.executable, "-c", "import time, sys; t = time.monotonic(); "
                              "import envduels.cli; print(time.monotonic() - t)"],
                             capture_output=True, text=True, check=True)
    trees: dict[str, Path | None] = {"this": None}
    if args.compare_src:
        trees = {"other": Path(args.compare_src).resolve(), "this": HERE.parent / "src"}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    if args.compare_src:   # untimed: each tree's bytecode and its verdict-cache entry made
        for src in trees.values():
            if isinstance(got := _cli_once(base_url, tmp, args, src), int):
                return got
    for _ in range(args.repeats if args.compare_src else 1):
        for name, src in trees.items():
            got = _cli_once(base_url, tmp, args, src)
            if isinstance(got, int):
                return got
            rows[name].append(got)
    print(f"{args.design} as a user times it: `envduels run` {rows['this'][0]['episodes']:.0f} "
          f"episodes, server latency {args.latency_ms:g} ms, workers "
          f"{args.workers if args.workers is not None else 'cores'}, on {os.cpu_count()} CPUs "
          f"(interpreter + `import envduels.cli`: {float(imports.stdout):.2f} s)")
    if args.compare_src:
        print(f"  other = {trees['other']}; {args.repeats} run(s) each, alternated")
    print(f"  {'tree':>5} {'whole s':>8} {'to 1st call':>11} {'solving':>8} {'tail':>6} "
          f"{'bare s':>7} {'bare/whole':>10} {'load':>5}")
    for name, found in rows.items():
        for r in found:
            print(f"  {name:>5} {r['wall']:8.2f} {r['first_call']:11.2f} {r['solving']:8.2f} "
                  f"{r['tail']:6.2f} {r['bare']:7.2f} {r['bare'] / r['wall']:10.2f} "
                  f"{r['load']:5.1f}")
    print("  (to 1st call: spawn to the first solver call; tail: the last episode to exit, the "
          "audit's replays and closing; target: bare/whole >= 0.85 at 500 ms)")
    return 0


def _phases(meter: _CpuMeter, marks: list[tuple[str, float]]) -> dict[str, tuple[float, float, float]]:
    """Phase name -> (wall s, CPU s of the tree, CPU s of this process), each phase from its
    mark to the next: start-up (to the first author call), authoring (its calls and the
    validation of what they wrote, to the first solver call), solving (to the last episode
    recorded), audit tail (the replays after it, and closing)."""
    out = {}
    for (name, start), (_, end) in zip(marks, marks[1:], strict=False):
        tree, own = meter.between(start, end) if meter.ok else (0.0, 0.0)
        out[name] = (end - start, tree, own)
    return out


class _CpuMeter:
    """CPU seconds of this process and everything it starts from now on (sandboxes too: they
    leave our memory/pids/cpu cgroups, never cpuacct's), via a cpuacct cgroup of its own;
    `ok` is False (and figures 0) where cgroup v1 cpuacct is not writable."""

    def __init__(self) -> None:
        self.group = Path(f"/sys/fs/cgroup/cpuacct/envduels-bench-{os.getpid()}")
        self.ok = False
        try:
            self.group.mkdir(exist_ok=True)
            for tid in os.listdir("/proc/self/task"):
                (self.group / "tasks").write_text(tid)
            self.ok = True
        except OSError:
            pass

    def seconds(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9 if self.ok else 0.0

    def sample(self, every_s: float = 0.01) -> None:
        """From now on, every `every_s` in a thread: (Unix time, CPU seconds of the whole tree,
        CPU seconds of this process alone) into `samples`, for `between`."""
        import threading

        self.samples: list[tuple[float, float, float]] = []
        self._sampling = threading.Event()

        def loop() -> None:
            while not self._sampling.wait(every_s):
                self._take()

        self._take()
        self._sampler = threading.Thread(target=loop, daemon=True)
        self._sampler.start()

    def stop(self) -> None:
        self._sampling.set()
        self._sampler.join()
        self._take()

    def _take(self) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.samples.append((time.time(), self.seconds(), ru.ru_utime + ru.ru_stime))

    def between(self, start: float, end: float) -> tuple[float, float]:
        """CPU seconds (whole tree, this process) from Unix time `start` to `end`, each end
        read from the nearest sample (10 ms apart)."""
        def at(t: float) -> tuple[float, float]:
            _, tree, own = min(self.samples, key=lambda s: abs(s[0] - t))
            return tree, own
        (t0, o0), (t1, o1) = at(start), at(end)
        return t1 - t0, o1 - o0

    def close(self) -> None:
        if not self.ok:
            return
        import contextlib

        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):   # a thread that ended meanwhile
                (self.group.parent / "tasks").write_text(tid)
        for _ in range(20):   # empty once the sandboxes' last processes are gone
            try:
                self.group.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _compare(args: argparse.Namespace) -> int:
    """Solving and whole-run episodes/s as shares of the players-only ceiling, this tree
    beside another envduels (`--compare-src`), at 50 and 500 ms, runs alternated."""
    import json

    trees = {"other": Path(args.compare_src).resolve(), "this": HERE.parent / "src"}
    results: dict[tuple[float, str], list[dict]] = {}
    for latency in (50.0, 500.0):
        for _ in range(args.repeats):
            for name, src in trees.items():
                run = subprocess.run(
                    [sys.executable, __file__, "--latency-ms", str(latency), "--seeds",
                     str(args.seeds), "--concurrency", str(args.concurrency), "--design",
                     args.design, "--trials", str(args.trials), "--json"],
                    capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)})
                if run.returncode != 0:
                    print(f"{name} at {latency:g} ms failed: {run.stderr[-2000:]}",
                          file=sys.stderr)
                    return run.returncode
                results.setdefault((latency, name), []).append(
                    json.loads(run.stdout.strip().splitlines()[-1]))
    print(f"{args.design}, concurrency {args.concurrency}, {args.seeds} seed(s) per "
          f"authored environment, audit on, {args.repeats} run(s) each (means), on {os.cpu_count()} "
          f"CPUs; other = {trees['other']}")
    print(f"{'latency':>8} {'tree':>6} {'episodes':>8} {'run s':>7} {'solving s':>9} "
          f"{'ceiling ep/s':>12} {'solving/ceiling':>15} {'run/ceiling':>11} "
          f"{'solving/bare':>12} {'run/bare':>8} {'run CPU ms/ep':>13} {'load':>5}")
    for (latency, name), rows in results.items():
        mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0] if k != "phases"}
        solving = mean["episodes"] / mean["solving"] / mean["ceiling_eps"]
        whole = mean["episodes"] / mean["wall"] / mean["ceiling_eps"]
        bare = mean["ceiling_eps"] / mean["bare_eps"]   # the bare client's rate, relative
        print(f"{latency:6.0f}ms {name:>6} {mean['episodes']:8.0f} {mean['wall']:7.1f} "
              f"{mean['solving']:9.1f} {mean['ceiling_eps']:12.1f} {solving:15.2f} "
              f"{whole:11.2f} {solving * bare:12.2f} {whole * bare:8.2f} "
              f"{mean['engine_cpu'] / mean['episodes'] * 1000:13.0f} "
              f"{mean['load']:5.1f}")
    print("by phase, ms of CPU per episode, engine process and sandboxes (engine process "
          "alone), and wall s; the ceiling's CPU per episode last:")
    print(f"{'latency':>8} {'tree':>6} " + " ".join(f"{p:>24}" for p in _PHASES)
          + f" {'ceiling':>8}")
    for (latency, name), rows in results.items():
        cells = []
        for phase in _PHASES:
            wall, tree, own = (sum(r["phases"][phase][i] for r in rows) / len(rows)
                               for i in range(3))
            n = sum(r["episodes"] for r in rows) / len(rows)
            cells.append(f"{tree / n * 1e3:6.1f} ({own / n * 1e3:5.1f}) {wall:5.2f} s")
        ceiling = sum(r["ceiling_cpu"] / r["episodes"] for r in rows) / len(rows) * 1e3
        print(f"{latency:6.0f}ms {name:>6} " + " ".join(f"{c:>24}" for c in cells)
              + f" {ceiling:8.1f}")
    return 0


_PHASES = ("start-up", "authoring", "solving", "audit tail")


def _conversations(solver_calls: list[dict]) -> dict[tuple[str, str], list[list[dict]]]:
    """Each episode's solver calls in turn order, by (player, episode): `ep:KEY:turn:T`."""
    by_episode: dict[tuple[str, str], dict[int, list[dict]]] = {}
    for r in solver_calls:
        _, key, _, turn = r["call_id"].split(":")
        by_episode.setdefault((r["player"], key), {})[int(turn)] = r["request"]["messages"]
    return {k: [turns[t] for t in sorted(turns)] for k, turns in by_episode.items()}


async def _ceiling(config: Path, conversations: dict[tuple[str, str], list[list[dict]]]) -> float:
    """Wall seconds to send `conversations` through the players alone (no engine, no cache):
    each player's episodes `max_concurrency` at a time, each episode's calls one after another."""
    from envduels.config import load_config
    from envduels.players import build_players

    cfg = load_config(config)
    players = build_players(cfg, cache=None, run_seed=cfg.seed + 1)
    queues: dict[str, list[tuple[str, list[list[dict]]]]] = {name: [] for name in players}
    for (name, key), turns in conversations.items():
        queues[name].append((key, turns))

    async def worker(name: str, todo: list[tuple[str, list[list[dict]]]]) -> None:
        while todo:
            key, turns = todo.pop()
            for t, messages in enumerate(turns, 1):
                await players[name].chat(messages, call_id=f"ceiling:{key}:{t}", role="solver")

    started = time.monotonic()
    await asyncio.gather(*(worker(p.name, queues[p.name]) for p in cfg.players
                           for _ in range(p.max_concurrency)))
    wall = time.monotonic() - started
    for p in players.values():
        await p.aclose()
    return wall


async def _warm_sdk(base_url: str) -> None:
    """One call through a throwaway `openai` client: the SDK's lazy imports and first-call
    set-up done in this process."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    await client.chat.completions.create(model="m-s0", max_tokens=8, messages=[
        {"role": "user", "content": "Code 5. Pick 1, 2 or 3 as \\boxed{n}."}])
    await client.close()


async def _bare_ceiling(config: Path,
                        conversations: dict[tuple[str, str], list[list[dict]]]) -> float:
    """As `_ceiling`, through the official `openai` client alone (issue 22's baseline): one
    `AsyncOpenAI` per player, its episodes `max_concurrency` at a time."""
    import openai

    from envduels.config import load_config

    cfg = load_config(config)
    queues: dict[str, list[list[list[dict]]]] = {p.name: [] for p in cfg.players}
    for (name, _), turns in conversations.items():
        queues[name].append(turns)

    async def worker(client: openai.AsyncOpenAI, model: str, todo: list) -> None:
        while todo:
            for messages in todo.pop():
                await client.chat.completions.create(model=model, messages=messages,
                                                     max_tokens=64)

    started = time.monotonic()   # from the client's construction, as a user's script pays it
    clients = {p.name: openai.AsyncOpenAI(base_url=p.base_url, api_key="bench", max_retries=0)
               for p in cfg.players}
    await asyncio.gather(*(worker(clients[p.name], p.model, queues[p.name]) for p in cfg.players
                           for _ in range(p.max_concurrency)))
    wall = time.monotonic() - started
    for client in clients.values():
        await client.close()
    return wall


if __name__ == "__main__":
    sys.exit(main())
