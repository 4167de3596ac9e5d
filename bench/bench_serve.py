"""`envduels serve` throughput beside OpenEnv's own server, in one run (issue 32's figures).

Every server serves the same environment class (a library environment, `number_guess` by
default) on 127.0.0.1 by the duel's protocol (`duel.protocol.Episode`), each in its own
process tree:
- `envduels serve --workers 1` and `--workers 2`: whole server processes, each session in its
  own sandbox;
- "front + 2 harness": one server process whose sandboxes live in two harness worker
  processes behind it, the design `serve` did not take (docs/training.md, "Serving at scale");
- OpenEnv's own server with 1 and 2 uvicorn worker processes (`uvicorn --workers`, as its
  scaling tutorial runs it), the class constructed in the server process, unsandboxed.
Clients are OpenEnv's `GenericEnvClient`s (WebSocket), all in this process. A session is one
connection playing one episode: connect, reset on a fresh seed, step a fixed guess sequence
until done, close.

Run: nice -n 10 .venv/bin/python bench/bench_serve.py [--seconds 5] [--clients 1,8,32,256]
     [--held 4096]
Prints, per number of concurrent clients and server: sessions/s, steps/s, the wall time of a
step (p50, p99), the CPU each session cost the server (its sandboxes included) and the client,
and the cores other processes took meanwhile (as root: per-process-tree cpuacct cgroups).
Then the targets: two processes against one at 32 clients, envduels against OpenEnv at the same
number of processes, each beside the ceiling this machine allows (below). Then `--held`
sessions held open at once through one server: each reset, then each stepped once while all
stay open (64 in flight), then each once more one at a time; memory per idle session (PSS of
the server's process tree), step p50/p99 of both rounds, errors.

The ceilings: on a machine whose cores the clients share, a server that needs more CPU per
session serves fewer sessions once the cores are busy, however it is built. With both servers
CPU-bound on the same cores, envduels' share of OpenEnv's figure is at most (OpenEnv's server
+ client CPU per session) / (envduels' server + client CPU per session), printed beside the
measured share; and a second server process can only add what the cores left idle allow: the
cores the one-process row left unused (cores minus what it, the client and everything else
used) bound the gain.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openenv.core.generic_client import GenericEnvClient

REPLIES = [f"\\boxed{{{g}}}" for g in (100, 50, 150, 25, 75, 125, 175, 12, 37, 62, 87, 112)]
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the servers

def baseline_app() -> Any:
    """OpenEnv's app around the environment class of $BENCH_SERVE_ENV, in-process and
    unsandboxed, playing the duel's protocol (a uvicorn factory: one per worker process)."""
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment

    from envduels.duel.protocol import FORMAT_ERROR, Episode, turn_cap
    from envduels.envs import resolve
    from envduels.serve._env import DuelAction, DuelObservation, DuelState

    spec = resolve(os.environ["BENCH_SERVE_ENV"]).one()
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

    return create_fastapi_app(InProcess, DuelAction, DuelObservation, max_concurrent_envs=8192)


def baseline_server(name: str, processes: int) -> None:
    """`uvicorn --workers N` on the baseline app."""
    import uvicorn

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    os.environ["BENCH_SERVE_ENV"] = name
    print(f"baseline: http://127.0.0.1:{port}/", flush=True)
    # uvicorn replaces a worker that does not answer its supervisor's ping in 5 s: under load,
    # a worker still importing, again and again
    uvicorn.run("bench_serve:baseline_app", factory=True, host="127.0.0.1", port=port,
                workers=processes, app_dir=str(HERE), log_level="warning", access_log=False,
                backlog=4096, timeout_worker_healthcheck=120)


def front_server(name: str, harness_workers: int, max_sessions: int) -> None:
    """One envduels server process whose sandboxes live in `harness_workers` harness worker
    processes (the design `serve` did not take)."""
    from envduels.serve._catalog import catalog
    from envduels.serve._processes import ServeOptions, Supervisor
    from envduels.view.commands import allowed_hosts, bind, url_of

    options = ServeOptions(served=catalog([name]), max_sessions=max_sessions,
                           idle_timeout_s=300.0, allowed_hosts=allowed_hosts("127.0.0.1"),
                           harness_workers=harness_workers)
    held = bind("127.0.0.1", 0, reuse_port=True)
    Supervisor(options, held, 1,
               on_ready=lambda: print(f"envduels serve: {url_of(held)}", flush=True)).run()


@dataclass
class Server:
    label: str
    processes: int
    proc: subprocess.Popen[str]
    url: str
    group: Path | None

    def cpu_s(self) -> float | None:
        """CPU seconds of the server's whole process tree so far (its sandboxes included)."""
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def busiest_s(self) -> dict[int, float]:
        """Own CPU seconds (children not counted) of each of the server's processes running
        as us (its sandboxes run as other uids), by pid."""
        return {pid: own_cpu_s(pid) for pid in tree(self.proc.pid) if owned(pid)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.group is not None:
            remove_group(self.group)


def new_group(name: str) -> Path | None:
    """A cpuacct cgroup of our own (None where we may not make one)."""
    group = CPUACCT / f"bench-serve-{os.getpid()}-{name}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def remove_group(group: Path) -> None:
    """Remove a cgroup of ours once the last of its processes (a server's stragglers: its
    resource tracker, its uvicorn workers) has exited."""
    deadline = time.monotonic() + 30
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                print(f"bench_serve: {group} still holds processes; left in place",
                      file=sys.stderr)
                return
            time.sleep(0.2)


def start(label: str, processes: int, cmd: list[str]) -> Server:
    group = new_group(label.replace(" ", "-").replace("+", ""))
    if group is not None:   # the server joins the group before it starts: its tree is in it
        cmd = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" "$@"', *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC)}, process_group=0)
    assert proc.stdout is not None

    def fail(why: str) -> SystemExit:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return SystemExit(f"{label} {why}")

    line = proc.stdout.readline()
    if "http://" not in line:
        raise fail(f"did not start: {line!r}")
    url = "http://" + line.split("http://", 1)[1].strip().rstrip("/")
    deadline = time.monotonic() + 120
    while True:   # the line comes before the server listens
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise fail("did not answer /health")
        time.sleep(0.2)
    return Server(label, processes, proc, url, group)


def tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), \
                    open(f"/proc/{entry}/stat") as fh:
                children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []
                                    ).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def owned(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def own_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            parts = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / TICK


def busy_s() -> float:
    """CPU seconds the whole machine has been busy (all processes)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK


def pss_mib(root: int) -> tuple[float, int]:
    """PSS of `root`'s process tree in MiB, and its number of processes."""
    total, count = 0, 0
    for pid in tree(root):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    count += 1
                    break
    return total / 1024, count


# ---------------------------------------------------------------- the load

async def session(url: str, env_id: str, seed: int, steps: list[float]) -> None:
    """One connection playing one episode; each step's wall time goes to `steps`."""
    async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
        await env.reset(env_id=env_id, seed=seed)
        for reply in REPLIES:
            t0 = time.perf_counter()
            done = (await env.step({"message": reply})).done
            steps.append(time.perf_counter() - t0)
            if done:
                break


@dataclass
class Row:
    sessions_s: float
    steps_s: float
    p50_ms: float
    p99_ms: float
    server_ms: float | None     # server CPU per session (its sandboxes included)
    own_ms: float               # of which the server processes' own (protocol and harness)
    client_ms: float | None     # this process's CPU per session
    others_cores: float | None  # cores every other process took meanwhile
    busiest: float              # the busiest server process's share of one core
    errors: Counter[str] = field(default_factory=Counter)


async def load(url: str, env_id: str, clients: int, seconds: float,
               steps: list[float], errors: Counter[str]) -> int:
    """`clients` concurrent clients, each playing sessions back to back for `seconds`;
    returns the sessions that finished."""
    deadline = time.perf_counter() + seconds
    done = [0]

    async def client(k: int) -> None:
        seed = k * 1_000_003
        while time.perf_counter() < deadline:
            try:
                await session(url, env_id, seed, steps)
                done[0] += 1
            except Exception as err:   # counted and shown: a figure with errors is no figure
                errors[f"{type(err).__name__}: {str(err)[:100]}"] += 1
            seed += 1

    await asyncio.gather(*(client(k) for k in range(clients)))
    return done[0]


def measure(server: Server, env_id: str, clients: int, seconds: float) -> Row:
    steps: list[float] = []
    errors: Counter[str] = Counter()
    cpu0, mine0, busy0 = server.cpu_s(), time.process_time(), busy_s()
    own0 = server.busiest_s()
    t0 = time.perf_counter()
    sessions = asyncio.run(load(server.url, env_id, clients, seconds, steps, errors))
    took = time.perf_counter() - t0
    cpu1, mine1, busy1 = server.cpu_s(), time.process_time(), busy_s()
    own1 = server.busiest_s()
    used = [own1[p] - own0.get(p, 0.0) for p in own1]
    busiest = max(used, default=0.0) / took
    per = max(sessions, 1)
    server_ms = None if cpu0 is None or cpu1 is None else 1000 * (cpu1 - cpu0) / per
    client_ms = 1000 * (mine1 - mine0) / per
    others = None
    if cpu0 is not None and cpu1 is not None:
        others = max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - (mine1 - mine0)) / took
    steps.sort()
    p50 = 1000 * statistics.median(steps) if steps else float("nan")
    p99 = 1000 * steps[min(len(steps) - 1, int(0.99 * len(steps)))] if steps else float("nan")
    return Row(sessions / took, len(steps) / took, p50, p99, server_ms,
               1000 * sum(used) / per, client_ms, others, busiest, errors)


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


# ---------------------------------------------------------------- held-open sessions

async def held_open(url: str, env_id: str, sessions: int, root: int, at_once: int = 64) -> None:
    """`sessions` sessions open at once: each resets (`at_once` in flight), then each steps
    once while all stay open. Prints memory per idle session and step latency."""
    pss0, procs0 = pss_mib(root)
    clients: list[GenericEnvClient] = []
    errors: Counter[str] = Counter()
    gate = asyncio.Semaphore(at_once)

    async def open_one(k: int) -> None:
        async with gate:
            env = GenericEnvClient(base_url=url, message_timeout_s=600)
            try:
                await env.reset(env_id=env_id, seed=k)
                clients.append(env)
            except Exception as err:
                errors[f"reset: {str(err)[:140]}"] += 1
                await env.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(open_one(k) for k in range(sessions)))
    opened_s = time.perf_counter() - t0
    await asyncio.sleep(2)   # every sandbox idle (frozen) before memory is read
    pss1, procs1 = pss_mib(root)
    steps: list[float] = []
    going: list[GenericEnvClient] = []   # still mid-episode after the first step

    async def step_one(env: GenericEnvClient) -> None:
        async with gate:
            t = time.perf_counter()
            try:
                done = (await env.step({"message": "\\boxed{50}"})).done
                steps.append(time.perf_counter() - t)
            except Exception as err:
                errors[f"step: {str(err)[:140]}"] += 1
                return
            if not done:   # (a secret of 50 was just found)
                going.append(env)

    t1 = time.perf_counter()
    await asyncio.gather(*(step_one(env) for env in clients))
    stepped_s = time.perf_counter() - t1
    in_turn: list[float] = []
    for env in going:   # then each once more, one at a time: a step's own wall time
        t = time.perf_counter()
        try:
            await env.step({"message": "\\boxed{25}"})
            in_turn.append(time.perf_counter() - t)
        except Exception as err:
            errors[f"step in turn: {str(err)[:140]}"] += 1
    held = len(clients)
    await asyncio.gather(*(env.close() for env in clients), return_exceptions=True)
    print(f"  held open: {held} of {sessions} sessions reset in {opened_s:.1f} s, all open, "
          f"then {len(steps)} stepped once each in {stepped_s:.1f} s ({at_once} in flight), "
          f"then the {len(in_turn)} still mid-episode once more, one at a time")
    for label, times in ((f"{at_once} in flight", steps), ("one at a time", in_turn)):
        times.sort()
        if times:
            print(f"  step wall time, {label}: p50 {1000 * statistics.median(times):.1f} ms, "
                  f"p99 {1000 * times[min(len(times) - 1, int(0.99 * len(times)))]:.1f} ms")
    per = (pss1 - pss0) / max(held, 1)
    print(f"  memory: server tree PSS {pss0:.0f} MiB ({procs0} processes) idle, {pss1:.0f} "
          f"MiB ({procs1} processes) with the sessions open: {per:.2f} MiB per idle session")
    print(f"  errors: {sum(errors.values())}" + "".join(
        f"\n    {n} x {what}" for what, n in errors.most_common(5)))


# ---------------------------------------------------------------- the report

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="number_guess", help="a library environment (trusted code)")
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring window per row")
    ap.add_argument("--clients", default="1,8,32,256")
    ap.add_argument("--held", type=int, default=4096,
                    help="sessions held open at once through `envduels serve --workers 2` "
                         "(0: skip)")
    ap.add_argument("--baseline-server", type=int, metavar="N", help=argparse.SUPPRESS)
    ap.add_argument("--front-server", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_server:
        baseline_server(args.env, args.baseline_server)
        return
    levels = [int(c) for c in args.clients.split(",")]
    if args.front_server:
        front_server(args.env, args.front_server, max(levels) + 64)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)   # a client per socket
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    envduels = str(Path(sys.executable).parent / "envduels")
    most = str(max(levels) + 64)
    plans = [
        ("envduels --workers 1", 1, [envduels, "serve", args.env, "--workers", "1",
                                     "--max-sessions", most]),
        ("envduels --workers 2", 2, [envduels, "serve", args.env, "--workers", "2",
                                     "--max-sessions", most]),
        ("front + 2 harness", 1, [sys.executable, __file__, "--env", args.env, "--clients",
                                  args.clients, "--front-server", "2"]),
        ("OpenEnv 1 process", 1, [sys.executable, __file__, "--env", args.env,
                                  "--baseline-server", "1"]),
        ("OpenEnv 2 processes", 2, [sys.executable, __file__, "--env", args.env,
                                    "--baseline-server", "2"]),
    ]
    client_group = new_group("client")
    if client_group is not None:
        (client_group / "cgroup.procs").write_text(str(os.getpid()))
    servers: list[Server] = []
    try:
        run(args, levels, envduels, plans, servers, client_group is not None)
    finally:
        for server in servers:
            server.stop()
        if client_group is not None:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            remove_group(client_group)


def run(args: argparse.Namespace, levels: list[int], envduels: str,
        plans: list[tuple[str, int, list[str]]], servers: list[Server], cpu_known: bool) -> None:
    """The rows and targets, then the held-open sessions (`servers` holds what is running,
    for the caller to stop whatever happens)."""
    for label, processes, cmd in plans:
        servers.append(start(label, processes, cmd))
    for server in servers:   # warm each: imports, first templates
        asyncio.run(load(server.url, args.env, 2, 1.0, [], Counter()))
    cores = len(os.sched_getaffinity(0))
    print(f"bench_serve: {args.env}, {args.seconds:g} s per row, load average "
          f"{os.getloadavg()[0]:.2f} on {cores} CPUs"
          + ("" if cpu_known else " (not root: no CPU per session)"))
    print(f"  {'clients':>7}  {'server':<22} {'sessions/s':>10} {'steps/s':>8} "
          f"{'step p50':>8} {'p99 ms':>7}  {'CPU/session: server':>19} {'(own)':>6} "
          f"{'client':>6}  {'busiest':>7} {'others':>6}")
    rows: dict[tuple[str, int], Row] = {}
    for clients in levels:
        for server in servers:
            row = measure(server, args.env, clients, args.seconds)
            rows[server.label, clients] = row
            print(f"  {clients:>7}  {server.label:<22} {row.sessions_s:>10.1f} "
                  f"{row.steps_s:>8.1f} {row.p50_ms:>8.2f} {row.p99_ms:>7.2f}  "
                  f"{fmt(row.server_ms):>16} ms {row.own_ms:>6.1f} "
                  f"{fmt(row.client_ms):>6}  "
                  f"{row.busiest:>7.2f} {fmt(row.others_cores, '.2f'):>6}"
                  + (f"  ERRORS {dict(row.errors.most_common(2))}" if row.errors else ""),
                  flush=True)
    print("  CPU/session: ms of CPU per finished session (server: its whole tree, sandboxes "
          "included; own: its server processes alone, the rest is the sandboxes); busiest: "
          "the busiest server process's share of one core; others: cores every other "
          "process on the machine took meanwhile")
    report_targets(rows, levels, cores)
    while servers:
        servers.pop().stop()
    if args.held:
        held = start("held", 2, [envduels, "serve", args.env, "--workers", "2",
                                 "--max-sessions", str(args.held + 64)])
        servers.append(held)
        print(f"held-open sessions: envduels serve --workers 2, load average "
              f"{os.getloadavg()[0]:.2f}")
        asyncio.run(held_open(held.url, args.env, args.held, held.proc.pid))


def report_targets(rows: dict[tuple[str, int], Row], levels: list[int], cores: int) -> None:
    def ceiling(ours: Row, base: Row) -> str:
        if None in (ours.server_ms, ours.client_ms, base.server_ms, base.client_ms):
            return "n/a"
        assert ours.server_ms is not None and ours.client_ms is not None
        assert base.server_ms is not None and base.client_ms is not None
        return f"{(base.server_ms + base.client_ms) / (ours.server_ms + ours.client_ms):.2f}"

    print("targets (measured, beside what this machine allows):")
    if 32 in levels:
        one, two = rows["envduels --workers 1", 32], rows["envduels --workers 2", 32]
        idle = "n/a"
        if one.server_ms is not None and one.client_ms is not None and one.others_cores is not None:
            used = one.sessions_s * (one.server_ms + one.client_ms) / 1000 + one.others_cores
            idle = f"{max(0.0, cores - used):.2f}"
        print(f"  two processes / one, 32 clients: {two.sessions_s / one.sessions_s:.2f} "
              f"(target >= 1.6); the one-process row left {idle} of {cores} cores idle and its "
              f"busiest process used {one.busiest:.2f} of a core")
        front = rows["front + 2 harness", 32]
        print(f"  front + 2 harness workers / one process, 32 clients: "
              f"{front.sessions_s / one.sessions_s:.2f}; its front used {front.busiest:.2f} "
              "of a core")
    for clients in (32, 256):
        if clients not in levels:
            continue
        for n, ours, base in ((1, "envduels --workers 1", "OpenEnv 1 process"),
                              (2, "envduels --workers 2", "OpenEnv 2 processes")):
            mine, theirs = rows[ours, clients], rows[base, clients]
            print(f"  envduels / OpenEnv, {n} process(es), {clients} clients: "
                  f"{mine.sessions_s / theirs.sessions_s:.2f} (target >= 0.8; CPU-bound "
                  f"ceiling here {ceiling(mine, theirs)})")
    if 1 in levels:
        mine, theirs = rows["envduels --workers 1", 1], rows["OpenEnv 1 process", 1]
        print(f"  a step's wall time, 1 client: envduels p50 {mine.p50_ms:.2f} / p99 "
              f"{mine.p99_ms:.2f} ms, OpenEnv p50 {theirs.p50_ms:.2f} / p99 {theirs.p99_ms:.2f} "
              f"ms: +{mine.p50_ms - theirs.p50_ms:.2f} / +{mine.p99_ms - theirs.p99_ms:.2f} ms")


if __name__ == "__main__":
    main()
