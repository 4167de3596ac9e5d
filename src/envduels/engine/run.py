"""`envduels run`: run or resume the tournament of a config.

Exit codes of `run`: 0 every round is recorded; 2 bad input (one line on stderr, nothing
written); 3 the budget was reached (raise `budget.max_usd`/`max_tokens` and run again to go
on); 4 some work ended in `error` because a provider kept failing or a sandbox could not start
(run again to retry it);
130 interrupted. In every case finished work is in the run database and is never redone.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from envduels._signals import terminate_as_interrupt
from envduels._text import plural
from envduels.config import RunConfig, load_config
from envduels.engine._bad_requests import guard_bad_requests
from envduels.engine._keys import changed_setting, fingerprint, result_settings
from envduels.engine.checks import check_estimate, check_players, load_fixed_envs
from envduels.engine.progress import LiveView, Progress
from envduels.errors import UserError
from envduels.store import Store, run_lock

if TYPE_CHECKING:
    from envduels.engine.scheduler import RunResult, Sandboxes
    from envduels.envs import EnvSpec

EXIT_OK, EXIT_BUDGET, EXIT_ERRORS = 0, 3, 4


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
    # SIGTERM (a supervisor's, a container's, `kill`'s) as Ctrl-C: the sandboxes and local
    # model servers are closed and nothing is left running (exit 130, as for Ctrl-C)
    with terminate_as_interrupt():
        return _run(config, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet, no_cache=no_cache)


def _run(config: Path, *, unsafe_no_sandbox: bool, quiet: bool, no_cache: bool) -> int:
    from envduels.sandbox import SandboxLimits, check_sandbox

    # Every precondition is checked before anything is created in RUN_DIR.
    cfg = load_config(config)
    fixed_envs = load_fixed_envs(cfg)
    check_players(cfg)   # unreachable servers, missing keys: all of them, before any write
    check_estimate(cfg, fixed_envs)
    if cfg.executor.kind == "local":   # on Ray, every node's host checks its own on start
        check_sandbox(SandboxLimits.from_config(cfg.sandbox), unsafe_no_sandbox=unsafe_no_sandbox)
    else:
        from envduels.sandbox.ray_pool import connect
        connect(cfg.executor.address)   # an unreachable cluster fails before any write
    with run_lock(cfg.run_dir):   # one `envduels run` per folder, for the life of the run
        return _run_locked(cfg, fixed_envs, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet,
                           no_cache=no_cache)


def _run_locked(cfg: RunConfig, fixed_envs: list[EnvSpec], *, unsafe_no_sandbox: bool, quiet: bool,
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

    async def main() -> RunResult:
        from envduels.engine.scheduler import Tournament

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
            sandboxes = EnvPool(SandboxLimits.from_config(cfg.sandbox),
                                unsafe_no_sandbox=unsafe_no_sandbox, warm=limits.warm_sandboxes,
                                max_warm=limits.max_warm_sandboxes)
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
