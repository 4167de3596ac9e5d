"""The engine's commands: `envduels run`, `envduels status`, `envduels play`.

Exit codes of `run`: 0 every round is recorded; 2 bad input (one line on stderr, nothing
written); 3 the budget was reached (raise `budget.max_usd`/`max_tokens` and run again to go
on); 4 some work ended in `error` because a provider kept failing or a sandbox could not start
(run again to retry it);
130 interrupted. In every case finished work is in the run database and is never redone.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from envduels._text import plural, printable
from envduels.config import RunConfig, load_config
from envduels.engine._bad_requests import guard_bad_requests
from envduels.engine._keys import changed_setting, fingerprint, result_settings
from envduels.engine.progress import LiveView, Progress
from envduels.engine.solving import EpisodeTask, play_episode, turn_cap
from envduels.errors import UserError
from envduels.store import Store, run_lock

EXIT_OK, EXIT_BUDGET, EXIT_ERRORS = 0, 3, 4


# -- run --------------------------------------------------------------------------------------

def load_pools(cfg: RunConfig) -> list[Any]:
    """The fixed-pool environments of `tournament.environments` (library names, export folders)."""
    from envduels.envs import library_names, load_export

    specs: list[Any] = []
    names = set(library_names()) if cfg.tournament.environments else set()
    for item in cfg.tournament.environments:
        if item in names:
            from envduels.envs import library_env

            specs.append(library_env(item))
        elif Path(item).is_dir():
            specs.extend(load_export(item))
        else:
            raise UserError(
                f"tournament.environments: {item!r} is neither an export folder nor a library "
                "environment; fix the path or pick a name from `envduels library list`")
    seen: set[str] = set()
    for s in specs:
        if not s.hint.strip():
            raise UserError(
                f"tournament.environments: environment {s.id!r} has no hint, and every pool "
                "environment is also played in the hinted condition (SPEC §9); give it one "
                "(a `privileged` file in its export's manifest) or leave it out of the list")
        if s.id in seen:
            raise UserError(f"tournament.environments: environment id {s.id!r} is listed twice; "
                            "list each export folder or library name once")
        seen.add(s.id)
    from envduels.engine._keys import authored_env_id

    t = cfg.tournament
    authored = {authored_env_id(p.name, r, k) for p in cfg.players if p.authors
                for r in range(1, t.rounds + 1) for k in range(t.envs_per_author)}
    for s in specs:
        if s.id in authored:
            raise UserError(
                f"tournament.environments: environment id {s.id!r} is also an id this run's "
                "authors write; rename that author in players[].name")
    return specs


def _unreachable_url(base_url: str, timeout_s: float) -> str | None:
    """Why `base_url`'s server does not accept connections, or None."""
    url = urlparse(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "localhost", port), timeout=timeout_s):
            pass
    except OSError as err:
        return str(err.strerror or err)
    return None


def _server_problems(cfg: RunConfig, timeout_s: float) -> dict[str, str]:
    """First player's name on each unreachable server -> one line naming every player on it
    (one server shared by four players is one problem, said once)."""
    users: dict[str, list[str]] = {}
    for p in cfg.players:
        if p.provider != "local" and p.base_url:
            users.setdefault(p.base_url, []).append(p.name)
    problems = {}
    for url, names in users.items():
        if (why := _unreachable_url(url, timeout_s)) is not None:
            who = (f"player {names[0]!r}" if len(names) == 1
                   else "players " + ", ".join(repr(n) for n in names))
            problems[names[0]] = (f"{who}: cannot reach {url} ({why}); start the server or fix "
                                  "players[].base_url")
    return problems


def _raise_all(problems: list[str]) -> None:
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError(f"{len(problems)} problems; fix them all, then run again:\n  "
                        + "\n  ".join(problems))


def check_reachable(cfg: RunConfig, timeout_s: float = 3.0) -> None:
    """Fail fast, before any work, when a player's server does not accept connections; every
    unreachable server is named, in config order."""
    _raise_all(list(_server_problems(cfg, timeout_s).values()))


def check_players(cfg: RunConfig, timeout_s: float = 3.0) -> None:
    """Every player's preconditions at once (its server accepts connections, its key is set,
    its model file or runtime exists), reported together in config order; players with the
    same problem (one server, one unset variable) share one line. Raises one UserError."""
    from envduels.players import build_player

    servers = _server_problems(cfg, timeout_s)
    grouped: dict[str, list[str]] = {}   # problem without its "player 'x': " -> players
    for p in cfg.players:
        found = [servers[p.name]] if p.name in servers else []
        try:
            build_player(p, cache=None, run_seed=cfg.seed).discard()
        except UserError as err:
            found.append(err.message)
        prefix = f"player {p.name!r}: "
        for message in found:
            if not message.startswith(prefix):   # already names its players: kept as it is
                grouped[message] = []
                continue
            grouped.setdefault(message[len(prefix):], []).append(p.name)
    lines = []
    for rest, names in grouped.items():
        if not names:
            lines.append(rest)
        elif len(names) == 1:
            lines.append(f"player {names[0]!r}: {rest}")
        else:
            lines.append(f"players {', '.join(repr(n) for n in names)}: {rest}")
    _raise_all(lines)


def check_estimate(cfg: RunConfig, pool_specs: list[Any]) -> None:
    """Print the run's estimated cost; refuse (UserError) when even its low end is over
    `budget.max_usd`, before anything is spent."""
    from envduels.engine.estimate import dollars, estimate_for, usd

    estimate = estimate_for(cfg, pool_specs)
    cost = estimate.total("usd")
    spent = f", {usd(estimate.spent_usd)} of it spent" if estimate.spent_usd else ""
    print(f"estimated cost {dollars(cost)}{spent} (`envduels estimate` for the detail)",
          flush=True)
    limit = cfg.budget.max_usd
    if limit is not None and cost.low > limit:
        raise UserError(f"the estimated cost is at least {usd(cost.low)}{spent}, over "
                        f"budget.max_usd {usd(limit)}; raise budget.max_usd or shrink the design "
                        "(rounds, seeds_per_env, trials_per_seed, max_turns)")


def open_run(cfg: RunConfig) -> tuple[Store, str]:
    """Open (or create) the run database and refuse a config that would change its results."""
    settings = result_settings(cfg)
    store = Store(cfg.run_dir)
    old = store.get_meta("settings")
    if old is not None and (store.totals().calls or store.environments()):
        changed = changed_setting(old, settings)
        if changed is not None:
            store.close()
            raise UserError(
                f"{cfg.run_dir} was run with a different '{changed}'; restore it to resume, or set "
                "output_dir to a new folder for a new run")
    store.set_meta("settings", settings)
    store.set_meta("fingerprint", fingerprint(settings))
    store.set_meta("config", cfg.model_dump(mode="json"))
    return store, fingerprint(settings)


def run_command(config: Path, *, unsafe_no_sandbox: bool, quiet: bool,
                no_cache: bool = False) -> int:
    """Run or resume the tournament of `config`; see the module docstring for exit codes.

    `no_cache`: every model call goes to the provider, also one the run has recorded (it is
    still recorded, a repeat as a repeat). Finished work is still never redone; what a resume
    replays (episodes in `error` or cut by a kill, unfinished authoring) is paid again.
    """
    from envduels.sandbox import SandboxLimits, check_sandbox

    # Every precondition is checked before anything is created in RUN_DIR.
    cfg = load_config(config)
    pool_specs = load_pools(cfg)
    check_players(cfg)   # unreachable servers, missing keys: all of them, before any write
    check_estimate(cfg, pool_specs)
    if cfg.executor.kind == "local":   # on Ray, every node's host checks its own on start
        check_sandbox(SandboxLimits.from_config(cfg.sandbox), unsafe_no_sandbox=unsafe_no_sandbox)
    else:
        from envduels.sandbox.ray_pool import connect
        connect(cfg.executor.address)   # an unreachable cluster fails before any write
    with run_lock(cfg.run_dir):   # one `envduels run` per folder, for the life of the run
        return _run_locked(cfg, pool_specs, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet,
                           no_cache=no_cache)


def _run_locked(cfg: RunConfig, pool_specs: list[Any], *, unsafe_no_sandbox: bool, quiet: bool,
                no_cache: bool) -> int:
    from envduels.players import build_players
    from envduels.sandbox import EnvPool, SandboxLimits

    store, fp = open_run(cfg)
    players = guard_bad_requests(
        build_players(cfg, cache=store.recorder() if no_cache else store, run_seed=cfg.seed),
        answered={name for name, u in store.usage_by_player().items() if u.calls})
    if unsafe_no_sandbox:
        print("WARNING: --unsafe-no-sandbox: environment code runs unconfined on this machine",
              file=sys.stderr)
    progress = Progress(rounds=cfg.tournament.rounds)

    async def main() -> Any:
        from envduels.engine.scheduler import MAX_OPEN_ENVS, Tournament

        warm = cfg.sandbox.warm_workers
        in_flight = sum(p.max_concurrency for p in cfg.players if p.solves)
        if cfg.executor.kind == "ray":
            from envduels.sandbox.ray_pool import RayEnvPool
            pool = RayEnvPool(SandboxLimits.from_config(cfg.sandbox),
                              unsafe_no_sandbox=unsafe_no_sandbox, address=cfg.executor.address,
                              sandboxes_per_cpu=cfg.executor.sandboxes_per_cpu)
        else:
            pool = EnvPool(SandboxLimits.from_config(cfg.sandbox),
                           unsafe_no_sandbox=unsafe_no_sandbox, warm=warm,
                           max_warm=max(warm, min(MAX_OPEN_ENVS, in_flight)))
        try:
            if cfg.executor.kind == "ray":
                await pool.start()   # a host per node, each checking its sandbox
            with LiveView(progress, quiet=quiet):
                return await Tournament(cfg, store=store, players=players, pool=pool,
                                        fingerprint=fp, pool_specs=pool_specs,
                                        progress=progress).run()
        finally:
            for p in players.values():
                await p.aclose()
            await pool.aclose()

    try:
        result = asyncio.run(main())
        counts = store.episode_counts()
    except KeyboardInterrupt:
        print("interrupted; finished work is saved, run the same command again to resume",
              file=sys.stderr)
        raise
    finally:
        store.close()
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no episodes"
    print(f"{cfg.name}: {summary}; {progress.tokens:,} tokens and ${progress.cost_usd:.4f} this "
          f"session; results in {cfg.run_dir}")
    print(f"watch it live: envduels view {cfg.run_dir}")
    if result.budget_reached:
        print("budget reached: raise budget.max_usd or budget.max_tokens and run again to go on",
              file=sys.stderr)
        return EXIT_BUDGET
    if result.errors:
        print(f"{plural(result.errors, 'unit')} of work ended in provider or sandbox errors; "
              "run again to retry them", file=sys.stderr)
        return EXIT_ERRORS
    return EXIT_OK


# -- status -----------------------------------------------------------------------------------

def expected_episodes(cfg: dict, envs: list[Any]) -> int:
    """Episodes a complete run plays: recorded valid environments, plus the environments not yet
    authored counted as if valid (an upper bound until they are)."""
    t = cfg.get("tournament", {})
    solvers = [p["name"] for p in cfg.get("players", []) if "solver" in p.get("roles", [])]
    authors = [p["name"] for p in cfg.get("players", []) if "author" in p.get("roles", [])]
    trials = t.get("trials_per_seed", 1)
    self_play = t.get("self_play", True)

    def per_env(author: str, n_seeds: int) -> int:
        n_solvers = sum(1 for s in solvers if self_play or s != author)
        return n_solvers * n_seeds * trials * 2

    total = sum(per_env(e.author, len(e.benchmark_seeds)) for e in envs if e.valid)
    known = {e.env_id for e in envs}
    from envduels.engine._keys import authored_env_id

    for rnd in range(1, t.get("rounds", 1) + 1):
        for a in authors:
            for slot in range(t.get("envs_per_author", 1)):
                if authored_env_id(a, rnd, slot) not in known:
                    total += per_env(a, t.get("seeds_per_env", 4))
    return total


def status_command(run_dir: Path) -> int:
    """Print what a run has done, left and failed, and its tokens and cost, from its database."""
    store = Store.open_readonly(run_dir, live=False)
    cfg = store.get_meta("config") or {}
    envs = store.environments()
    counts = store.episode_counts()
    done = sum(v for k, v in counts.items() if k != "error")
    expected = expected_episodes(cfg, envs)
    authoring_errors = store.authoring_errors()
    rounds_seen = max([e.round for e in envs if not e.fixed_pool]
                      + [int(v.get("round", 0)) for v in authoring_errors.values()], default=0)
    totals = store.totals()
    console = Console()
    table = Table(title=f"run {cfg.get('name', run_dir)} ({run_dir})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("rounds", f"{rounds_seen}/{cfg.get('tournament', {}).get('rounds', 1)} started")
    table.add_row("environments", f"{sum(e.valid for e in envs)} valid, "
                  f"{sum(not e.valid for e in envs)} invalid "
                  f"({sum(e.fixed_pool for e in envs)} from fixed pools)")
    if authoring_errors:
        table.add_row("authoring", f"{plural(len(authoring_errors), 'authoring job')} to retry "
                      "(error): run the same config again")
    table.add_row("episodes", f"{done} done, {max(0, expected - done)} left, "
                  f"{counts.get('error', 0)} to retry (error)")
    table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-")
    audits = store.audit_counts()
    pending = store.unaudited_count()
    table.add_row("replay audits", f"{audits.get('passed', 0)} passed, "
                  f"{audits.get('mismatch', 0)} mismatch, {pending} pending")
    for env_id, detail in store.nondeterministic_environments().items():
        table.add_row(f"  {escape(printable(env_id))}",
                      f"nondeterministic: {escape(printable(detail))}")
    table.add_row("calls", f"{totals.calls} ({totals.input_tokens:,} in + "
                  f"{totals.output_tokens:,} out tokens)")
    table.add_row("input", _input_split(totals))
    table.add_row("cost", f"${totals.cost_usd:.4f} (prompt caching saved ${totals.saved_usd:.4f})")
    for name, u in sorted(store.usage_by_player().items(), key=lambda kv: str(kv[0])):
        table.add_row(f"  {name}", f"{plural(u.calls, 'call')}, {plural(u.tokens, 'token')}, "
                      f"${u.cost_usd:.4f} (saved ${u.saved_usd:.4f})")
    console.print(table)
    console.print(f"watch it live: envduels view {run_dir}", markup=False, highlight=False,
                  soft_wrap=True)
    store.close()
    return 0


def _input_split(t: Any) -> str:
    """Input tokens as billed: uncached, read from and written to the prompt cache; reasoning."""
    return (f"{t.uncached_input_tokens:,} uncached + {t.cache_read_tokens:,} cache read + "
            f"{t.cache_write_tokens:,} cache write; {t.reasoning_tokens:,} of the output "
            "tokens reasoning")


# -- play -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Typed:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    retries: int = 0
    cached: bool = False


class StdinClosed(BaseException):
    """The person at `play --human` closed standard input (Ctrl-D): the episode stops.

    A BaseException, like KeyboardInterrupt: the person ended it, so it is no solver failure
    for the episode's last-resort guard (`except Exception`) to record as an `error`."""


class HumanSolver:
    """A person at the terminal: each turn reads one line; `\\boxed{}` is added when missing.

    A line is read from the file descriptor as the event loop sees it become readable, not by
    a blocking `readline` in a thread: Ctrl-C then ends `play` at once (a thread blocked in
    `readline` kept the process alive until Enter). An in-memory stream (tests) or a regular
    file, which never blocks, is read directly. End of input raises `StdinClosed`.
    """

    def __init__(self, stdin: Any = None) -> None:
        self._stdin = stdin
        self._pending = b""

    async def _readline(self) -> str:
        stream = self._stdin if self._stdin is not None else sys.stdin
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            return stream.readline()
        loop = asyncio.get_running_loop()
        while b"\n" not in self._pending:
            ready: asyncio.Future[None] = loop.create_future()
            try:
                loop.add_reader(fd, lambda f=ready: f.done() or f.set_result(None))
            except (OSError, ValueError, NotImplementedError):   # a regular file: never blocks
                chunk = os.read(fd, 65536)
            else:
                try:
                    await ready
                finally:
                    loop.remove_reader(fd)
                chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._pending += chunk
        line, sep, self._pending = self._pending.partition(b"\n")
        return (line + sep).decode("utf-8", "replace")

    async def chat(self, messages: list[dict[str, str]], **_: Any) -> _Typed:
        print("your action> ", end="", flush=True)
        line = await self._readline()
        if not line:
            raise StdinClosed
        action = line.strip()
        if "\\boxed{" not in action:
            action = f"\\boxed{{{action}}}"
        return _Typed(action)


def resolve_env(path: str) -> Any:
    """An environment by .py path, library name, export folder (holding one environment) or
    `EXPORT_FOLDER/ENV_ID`."""
    from envduels.envs import library_env, library_names, load_env_file, load_export

    p = Path(path)
    if path.endswith(".py") or p.is_file():
        return load_env_file(path)
    if p.is_dir():
        specs = load_export(p)
        if len(specs) == 1:
            return specs[0]
        raise UserError(f"{path} holds {len(specs)} environments; name one as {path}/ENV_ID "
                        f"(ids: {', '.join(s.id for s in specs[:8])})")
    if p.parent.is_dir() and (p.parent / "manifest.json").is_file():
        specs = {s.id: s for s in load_export(p.parent)}
        if p.name in specs:
            return specs[p.name]
        raise UserError(f"export {p.parent} has no environment {p.name!r}; choose one of "
                        f"{', '.join(list(specs)[:8])}")
    if path in library_names():
        return library_env(path)
    raise UserError(f"{path!r} is neither an environment .py file, an export folder nor a library "
                    "environment; fix the path or pick a name from `envduels library list`")


def _printer(console: Console) -> Any:
    """Print transcript entries. Observations, environment errors and model replies are
    untrusted: control and format characters (ESC sequences that clear the screen, retitle the
    window or write the clipboard; bidi overrides and zero-width characters that disguise text)
    are removed, and the text is printed as a plain `Text`, so neither Rich markup (`[bold]`)
    nor emoji codes (`:smile:`) in it take effect: it cannot forge a transcript line."""
    def line(label: str, style: str, text: Any = "", text_style: str = "") -> None:
        console.print(Text.assemble((label, style), (printable(str(text)), text_style)))

    def show(entry: dict[str, Any]) -> None:
        role = entry.get("role")
        if role == "system":
            line("system: ", "dim", entry["content"], "dim")
        elif role == "user":
            line("environment -> ", "bold cyan", entry["content"])
        elif role == "assistant":
            line("solver -> ", "bold green", entry["content"])
        elif role == "env":
            if "fault" in entry:
                line("environment fault: ", "red", entry["fault"], "red")
            else:
                line("step ", "dim", f"{entry['action']}: reward {entry['reward']:g}, terminated "
                     f"{entry['terminated']}, truncated {entry['truncated']}", "dim")
        elif role == "outcome":
            line("", "", entry["content"], "bold")
    return show


def _exit_at_once(code: int) -> NoReturn:
    """End the process now: atexit handlers run (they remove the sandbox's cgroups) and output
    is flushed, but the interpreter's teardown of every loaded module is skipped. That teardown
    is pure CPU, over a second on a loaded machine, and Ctrl-C must end `play` within one."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def play_command(path: str, *, config: Path | None, player: str | None, human: bool, hint: bool,
                 seed: int, unsafe_no_sandbox: bool) -> int:
    """Play one episode in the terminal; exit 0 on success, 1 otherwise (also when the person
    at `--human` closes standard input); Ctrl-C ends the process at once with exit 130."""
    from envduels.sandbox import EnvPool, SandboxLimits

    if human == (player is not None) or (player is not None and config is None):
        raise UserError("choose who plays: --human, or --config CONFIG --player NAME")
    spec = resolve_env(path)
    if hint and not spec.hint:
        raise UserError(f"{path} has no hint to show; play without --hint")
    max_turns = spec.max_turns
    limits = SandboxLimits()
    solver: Any
    if human:
        solver, name = HumanSolver(), "human"
    else:
        from envduels.players import build_players

        cfg = load_config(config)  # type: ignore[arg-type]
        cfg.player(player)  # type: ignore[arg-type]
        check_reachable(cfg)
        solver, name = build_players(cfg, cache=None, run_seed=cfg.seed)[player], player
        max_turns = turn_cap(spec.max_turns, cfg.tournament.max_turns)
        limits = SandboxLimits.from_config(cfg.sandbox)
    task = EpisodeTask(key=f"play:{spec.id}:{seed}:{int(hint)}", env=spec, solver=str(name),
                       seed=seed, trial=0, hinted=hint, max_turns=max_turns)
    console = Console(highlight=False, emoji=False, markup=False)

    async def main() -> Any:
        pool = EnvPool(limits, unsafe_no_sandbox=unsafe_no_sandbox, warm=0)
        try:
            return await play_episode(task, solver, lambda: pool.open(
                spec.source, class_name=spec.class_name, max_turns=spec.max_turns),
                on_event=_printer(console))
        finally:
            if hasattr(solver, "aclose"):
                await solver.aclose()
            await pool.aclose()

    try:
        result = asyncio.run(main())
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        _exit_at_once(130)
    except StdinClosed:
        print("\nyou closed standard input; episode stopped", file=sys.stderr)
        return 1
    return 0 if result.outcome == "success" else 1
