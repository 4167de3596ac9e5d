"""`envduels run` and `envduels.run(...)`: run or resume the tournament of a config.

The work is `run_session` (or `run_session_async` inside an event loop): it checks every
precondition (`check_run`), holds the run lock, plays and returns a `Session`; it raises a
`UserError` on bad input and never prints or exits. `run_command` is the CLI's caller of it:
it adds the SIGTERM-as-Ctrl-C handling, the live display and the printed summary, and turns
the `Session` into an exit code.

Exit codes of `run`: 0 every round is recorded; 2 bad input (one line on stderr, nothing
written); 3 the budget was reached (raise `budget.max_usd`/`max_tokens` and run again to go
on); 4 some work ended in `error` because a provider kept failing or a sandbox could not start
(run again to retry it);
130 interrupted. In every case finished work is in the run database and is never redone.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envduels._signals import terminate_as_interrupt
from envduels._text import plural
from envduels.config import RunConfig, load_config
from envduels.engine._bad_requests import AnsweredGuard, guard_bad_requests
from envduels.engine._keys import changed_setting, fingerprint, result_settings
from envduels.engine.checks import check_estimate, check_players, load_fixed_envs
from envduels.engine.progress import LiveView, Progress
from envduels.errors import UserError
from envduels.store import Store, run_lock

if TYPE_CHECKING:
    from envduels.engine.scheduler import RunResult, Sandboxes
    from envduels.envs import EnvSpec

EXIT_OK, EXIT_BUDGET, EXIT_ERRORS = 0, 3, 4
UNSAFE_WARNING = "WARNING: --unsafe-no-sandbox: environment code runs unconfined on this machine"


@dataclass(frozen=True)
class Session:
    """What one session of a run (one `envduels run` or `envduels.run(...)` call) did.

    `outcomes`: the run's episodes by outcome, every session's together (what the database
    holds now). `tokens` and `cost_usd`: spent by this session alone. `budget_reached`: it
    stopped at `budget.max_usd`/`max_tokens` (raise them and run again to go on). `errors`: units
    of work that ended in `error` (a provider kept failing, a sandbox could not start); running
    again retries them. `complete`: neither happened, every round is recorded."""

    name: str
    run_dir: Path
    outcomes: dict[str, int]
    tokens: int
    cost_usd: float
    budget_reached: bool
    errors: int

    @property
    def complete(self) -> bool:
        return not self.budget_reached and not self.errors


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


def _nothing(*_: object) -> None:
    pass


def check_run(cfg: RunConfig, *, unsafe_no_sandbox: bool,
              say: Callable[[str], None] = _nothing) -> list[EnvSpec]:
    """Every precondition of running `cfg`, checked before anything is created in its run
    folder: the fixed pool (returned, loaded), the players (unreachable servers, missing keys:
    all of them at once), the estimated cost against the budget (its one line goes to `say`),
    the sandbox (or the Ray cluster). Raises one UserError."""
    from envduels.sandbox import SandboxLimits, check_sandbox

    fixed_envs = load_fixed_envs(cfg)
    check_players(cfg)
    check_estimate(cfg, fixed_envs, say=say)
    if cfg.executor.kind == "local":   # on Ray, every node's host checks its own on start
        check_sandbox(SandboxLimits.from_config(cfg.sandbox), unsafe_no_sandbox=unsafe_no_sandbox)
    else:
        from envduels.sandbox.ray_pool import connect
        connect(cfg.executor.address)   # an unreachable cluster fails before any write
    return fixed_envs


def run_session(cfg: RunConfig, fixed_envs: list[EnvSpec], *, unsafe_no_sandbox: bool = False,
                no_cache: bool = False, quiet: bool = True,
                on_start: Callable[[], None] = _nothing) -> Session:
    """Play (or resume) the run of `cfg`, already checked by `check_run`, to its end, the
    budget, or Ctrl-C (KeyboardInterrupt; finished work is saved). Holds the run lock for the
    whole session. `on_start` runs once the database is open and the players are built.
    Prints nothing with `quiet` (the live display is the only output)."""
    return asyncio.run(run_session_async(cfg, fixed_envs, unsafe_no_sandbox=unsafe_no_sandbox,
                                         no_cache=no_cache, quiet=quiet, on_start=on_start))


async def run_session_async(cfg: RunConfig, fixed_envs: list[EnvSpec], *,
                            unsafe_no_sandbox: bool = False, no_cache: bool = False,
                            quiet: bool = True,
                            on_start: Callable[[], None] = _nothing) -> Session:
    """`run_session` in the running event loop (cancelling it stops the run as Ctrl-C does)."""
    progress = Progress(rounds=cfg.tournament.rounds)
    with run_lock(cfg.run_dir), _opened(cfg, no_cache=no_cache) as (store, fp, players):
        on_start()
        result = await _play(cfg, fixed_envs, store=store, fp=fp, players=players,
                             progress=progress, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet)
        counts = store.episode_counts()
    return Session(name=cfg.name, run_dir=cfg.run_dir, outcomes=counts, tokens=progress.tokens,
                   cost_usd=progress.cost_usd, budget_reached=result.budget_reached,
                   errors=result.errors)


@contextmanager
def _opened(cfg: RunConfig, *, no_cache: bool) -> Iterator[tuple[Store, str, dict[str, AnsweredGuard]]]:
    """The run database (open for writing) and the players; the database closes afterwards."""
    from envduels.players import build_players

    store, fp = open_run(cfg)
    try:
        players = guard_bad_requests(
            build_players(cfg, cache=store.recorder() if no_cache else store, run_seed=cfg.seed),
            answered={name for name, u in store.usage_by_player().items() if u.calls})
        yield store, fp, players
    finally:
        store.close()


async def _play(cfg: RunConfig, fixed_envs: list[EnvSpec], *, store: Store, fp: str,
                players: dict[str, AnsweredGuard], progress: Progress, unsafe_no_sandbox: bool,
                quiet: bool) -> RunResult:
    from envduels.engine.scheduler import Tournament
    from envduels.sandbox import SandboxLimits, sandbox_pool

    limits = cfg.concurrency
    sandboxes: Sandboxes
    cluster = None
    if cfg.executor.kind == "ray":
        from envduels.sandbox.ray_pool import RayEnvPool
        sandboxes = cluster = RayEnvPool(SandboxLimits.from_config(cfg.sandbox),
                                         unsafe_no_sandbox=unsafe_no_sandbox,
                                         address=cfg.executor.address,
                                         sandboxes_per_cpu=cfg.executor.sandboxes_per_cpu)
    else:
        sandboxes = sandbox_pool(SandboxLimits.from_config(cfg.sandbox),
                                 workers=cfg.sandbox.workers, unsafe_no_sandbox=unsafe_no_sandbox,
                                 warm=limits.warm_sandboxes, max_warm=limits.max_warm_sandboxes)
    try:
        if cluster is not None:
            await cluster.start()   # a host per node, each checking its sandbox
        with LiveView(progress, quiet=quiet):
            return await Tournament(cfg, store=store, players=players, sandboxes=sandboxes,
                                    fingerprint=fp, fixed_envs=fixed_envs,
                                    progress=progress).run()
    finally:
        for p in players.values():
            await p.aclose()
        await sandboxes.aclose()


def run_command(config: Path, *, unsafe_no_sandbox: bool, quiet: bool,
                no_cache: bool = False, workers: int | None = None) -> int:
    """Run or resume the tournament of `config`; see the module docstring for exit codes.

    `no_cache`: every model call goes to the provider, also one the run has recorded (it is
    still recorded, a repeat as a repeat). Finished work is still never redone; what a resume
    replays (episodes in `error` or cut by a kill, unfinished authoring) is paid again.
    `workers` (the CLI's --workers) replaces the config's `sandbox.workers`.
    """
    # SIGTERM (a supervisor's, a container's, `kill`'s) as Ctrl-C: the sandboxes and local
    # model servers are closed and nothing is left running (exit 130, as for Ctrl-C)
    with terminate_as_interrupt():
        return _run(config, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet, no_cache=no_cache,
                    workers=workers)


def _run(config: Path, *, unsafe_no_sandbox: bool, quiet: bool, no_cache: bool,
         workers: int | None = None) -> int:
    cfg = load_config(config)
    if workers is not None:   # no result depends on it: the run's fingerprint stays
        cfg = cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(update={"workers": workers})})
    fixed_envs = check_run(cfg, unsafe_no_sandbox=unsafe_no_sandbox,
                           say=lambda line: print(line, flush=True))

    def warn_unsafe() -> None:
        if unsafe_no_sandbox:
            print(UNSAFE_WARNING, file=sys.stderr)

    try:
        session = run_session(cfg, fixed_envs, unsafe_no_sandbox=unsafe_no_sandbox,
                              no_cache=no_cache, quiet=quiet, on_start=warn_unsafe)
    except KeyboardInterrupt:
        print("interrupted; finished work is saved, run the same command again to resume",
              file=sys.stderr)
        raise
    summary = ", ".join(f"{k} {v}" for k, v in sorted(session.outcomes.items())) or "no episodes"
    print(f"{cfg.name}: {summary}; {session.tokens:,} tokens and ${session.cost_usd:.4f} this "
          f"session; results in {cfg.run_dir}")
    print(f"watch it live: envduels view {cfg.run_dir}")
    if session.budget_reached:
        print("budget reached: raise budget.max_usd or budget.max_tokens and run again to go on",
              file=sys.stderr)
        return EXIT_BUDGET
    if session.errors:
        print(f"{plural(session.errors, 'unit')} of work ended in provider or sandbox errors; "
              "run again to retry them", file=sys.stderr)
        return EXIT_ERRORS
    return EXIT_OK
