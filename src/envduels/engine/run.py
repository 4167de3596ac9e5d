"""Running or resuming the tournament of a config: what `envduels run` and `envduels.run(...)`
both do.

`check_run` checks every precondition before anything is written and returns what the rest of
the run takes from it (`Checked`: the fixed pool, the sandbox limits, built once); then
`run_session` (or `run_session_async` inside an event loop) holds the run lock and the run
database (`RunWriter.locked`), plays, and returns a `Session`. Both raise a `UserError` on bad
input and never print or exit; `engine.commands.run_command` is the CLI's caller of them (the
live display, the printed summary, the exit codes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envduels.config import RunConfig
from envduels.engine._bad_requests import AnsweredGuard, guard_bad_requests
from envduels.engine._keys import changed_setting, fingerprint, result_settings
from envduels.engine.checks import check_estimate, check_players, load_fixed_envs
from envduels.engine.progress import LiveView, Progress
from envduels.errors import UserError
from envduels.sandbox import (
    HarnessPool,
    SandboxLimits,
    SandboxStartError,
    SandboxUnavailable,
    check_sandbox,
    sandbox_pool,
)
from envduels.store.writer import RunWriter

if TYPE_CHECKING:
    from envduels.engine.scheduler import RunResult, Sandboxes
    from envduels.envs import EnvSpec

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


def record_config(writer: RunWriter, cfg: RunConfig) -> str:
    """Record `cfg` as the run's config and return its fingerprint; refuse (UserError) a config
    that would change the results the run folder already holds."""
    settings = result_settings(cfg)
    old = writer.reader.meta("settings")
    if old is not None and (writer.totals().calls or writer.reader.environments()):
        changed = changed_setting(old, settings)
        if changed is not None:
            raise UserError(
                f"{cfg.run_dir} was run with a different '{changed}'; restore it to resume, or set "
                "output_dir to a new folder for a new run")
    writer.set_meta("settings", settings)
    writer.set_meta("fingerprint", fingerprint(settings))
    writer.set_meta("config", cfg.model_dump(mode="json"))
    return fingerprint(settings)


def _nothing(*_: object) -> None:
    pass


@dataclass(frozen=True)
class Checked:
    """What `check_run` found, which the run takes from it: the config's fixed-pool
    environments, loaded, and the sandbox limits its `sandbox:` section asks for, built once
    (every sandbox of the run, on this machine or a Ray cluster, gets these); and the harness
    pool whose workers `check_run` started while it checked (`take_pool`)."""

    fixed_envs: list[EnvSpec]
    limits: SandboxLimits
    _pools: list[HarnessPool] = field(default_factory=list, repr=False, compare=False)

    def take_pool(self) -> HarnessPool | None:
        """The harness pool started by `check_run`, to the first session that asks (None
        after, or where the run's sandboxes are not harness workers on this machine)."""
        return self._pools.pop() if self._pools else None


def _early_pool(cfg: RunConfig, limits: SandboxLimits, fixed_envs: list[EnvSpec], *,
                unsafe_no_sandbox: bool) -> HarnessPool | None:
    """The run's harness pool with its worker processes started now, the fixed pool's
    templates starting in them, so the checks and imports that follow overlap their start
    (docs/engine.md). None where the run's sandboxes are elsewhere (Ray, `workers: 0`) or no
    sandbox can run here (the sandbox check says why, in its turn)."""
    if cfg.executor.kind != "local" or cfg.sandbox.workers == 0:
        return None
    concurrency = cfg.concurrency
    try:
        pool = sandbox_pool(limits, workers=cfg.sandbox.workers,
                            unsafe_no_sandbox=unsafe_no_sandbox,
                            warm=concurrency.warm_sandboxes,
                            max_warm=concurrency.max_warm_sandboxes)
    except SandboxUnavailable:
        return None
    if not isinstance(pool, HarnessPool):
        return None
    # and the first wave's instances, forked while this process imports and checks (on a
    # resume with nothing left to play they are closed unused: a fork each)
    share = -(-concurrency.max_warm_sandboxes // max(1, len(fixed_envs)))
    pool.prepare([spec.source for spec in fixed_envs], instances=share)
    try:
        pool.spawn()
    except SandboxStartError:
        pool.discard()
        return None   # the run's own start reports it
    return pool


def check_run(cfg: RunConfig, *, unsafe_no_sandbox: bool,
              say: Callable[[str], None] = _nothing) -> Checked:
    """Every precondition of running `cfg`, checked before anything is created in its run
    folder: the fixed pool (loaded), the players (unreachable servers, missing keys: all of
    them at once), the estimated cost against the budget (its one line goes to `say`), the
    sandbox (or the Ray cluster). Raises one UserError."""
    fixed_envs = load_fixed_envs(cfg)
    limits = SandboxLimits.from_config(cfg.sandbox)
    pool = _early_pool(cfg, limits, fixed_envs, unsafe_no_sandbox=unsafe_no_sandbox)
    # the test sandbox starts in a thread while the players are checked (it mostly waits on
    # its process); its verdict is read after theirs, so the errors keep their order
    checking = ThreadPoolExecutor(1, thread_name_prefix="envduels-check")
    try:
        sandbox = None
        if cfg.executor.kind == "local":   # on Ray, every node's host checks its own on start
            sandbox = checking.submit(check_sandbox, limits, unsafe_no_sandbox=unsafe_no_sandbox)
        check_players(cfg)
        check_estimate(cfg, fixed_envs, say=say)
        if sandbox is not None:
            sandbox.result()
        else:
            from envduels.sandbox.ray_pool import connect
            connect(cfg.executor.address)   # an unreachable cluster fails before any write
    except BaseException:
        if pool is not None:
            pool.discard()
        raise
    finally:
        checking.shutdown(wait=True)
    return Checked(fixed_envs, limits, [pool] if pool is not None else [])


def run_session(cfg: RunConfig, checked: Checked, *, unsafe_no_sandbox: bool = False,
                no_cache: bool = False, quiet: bool = True,
                on_start: Callable[[], None] = _nothing) -> Session:
    """Play (or resume) the run of `cfg`, already checked by `check_run`, to its end, the
    budget, or Ctrl-C (KeyboardInterrupt; finished work is saved). Holds the run lock for the
    whole session. `on_start` runs once the database is open and the players are built.
    Prints nothing with `quiet` (the live display is the only output)."""
    return asyncio.run(run_session_async(cfg, checked, unsafe_no_sandbox=unsafe_no_sandbox,
                                         no_cache=no_cache, quiet=quiet, on_start=on_start))


async def run_session_async(cfg: RunConfig, checked: Checked, *,
                            unsafe_no_sandbox: bool = False, no_cache: bool = False,
                            quiet: bool = True,
                            on_start: Callable[[], None] = _nothing) -> Session:
    """`run_session` in the running event loop (cancelling it stops the run as Ctrl-C does)."""
    progress = Progress(rounds=cfg.tournament.rounds)
    pool = checked.take_pool()
    try:
        with RunWriter.locked(cfg.run_dir) as writer:
            fp = record_config(writer, cfg)
            players = _players(cfg, writer, no_cache=no_cache)
            on_start()
            result = await _play(cfg, checked, writer=writer, fp=fp, players=players,
                                 progress=progress, unsafe_no_sandbox=unsafe_no_sandbox,
                                 quiet=quiet, pool=pool)
            counts = writer.reader.episode_counts()
    finally:
        if pool is not None:   # closed by the play already, unless it never began
            await pool.aclose()
    return Session(name=cfg.name, run_dir=cfg.run_dir, outcomes=counts, tokens=progress.tokens,
                   cost_usd=progress.cost_usd, budget_reached=result.budget_reached,
                   errors=result.errors)


def _players(cfg: RunConfig, writer: RunWriter, *, no_cache: bool) -> dict[str, AnsweredGuard]:
    """The run's players, answering from (and recording into) the run database."""
    from envduels.players import build_players

    return guard_bad_requests(
        build_players(cfg, cache=writer.recorder() if no_cache else writer, run_seed=cfg.seed),
        answered={name for name, u in writer.reader.usage_by_player().items() if u.calls})


async def _play(cfg: RunConfig, checked: Checked, *, writer: RunWriter, fp: str,
                players: dict[str, AnsweredGuard], progress: Progress, unsafe_no_sandbox: bool,
                quiet: bool, pool: HarnessPool | None = None) -> RunResult:
    from envduels.engine.scheduler import Tournament

    concurrency = cfg.concurrency
    sandboxes: Sandboxes
    cluster = None
    if cfg.executor.kind == "ray":
        from envduels.sandbox.ray_pool import RayEnvPool
        sandboxes = cluster = RayEnvPool(checked.limits, unsafe_no_sandbox=unsafe_no_sandbox,
                                         address=cfg.executor.address,
                                         sandboxes_per_cpu=cfg.executor.sandboxes_per_cpu)
    elif pool is not None:
        sandboxes = pool
    else:
        sandboxes = sandbox_pool(checked.limits, workers=cfg.sandbox.workers,
                                 unsafe_no_sandbox=unsafe_no_sandbox,
                                 warm=concurrency.warm_sandboxes,
                                 max_warm=concurrency.max_warm_sandboxes)
    try:
        if cluster is not None:
            await cluster.start()   # a host per node, each checking its sandbox
        with LiveView(progress, quiet=quiet):
            return await Tournament(cfg, writer=writer, players=players, sandboxes=sandboxes,
                                    fingerprint=fp, fixed_envs=checked.fixed_envs,
                                    progress=progress).run()
    finally:
        for p in players.values():
            await p.aclose()
        await sandboxes.aclose()
