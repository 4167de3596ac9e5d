"""The engine's commands: `envduels run`, `status`, `play` and `estimate`, as the CLI calls them.

Each parses nothing (the CLI did), calls the engine, prints what the user reads and returns the
exit code; the work is the engine's modules' (`run`, `play`, `estimate`) and the run database's
reader (`status`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envduels._fixed_envs import load_fixed_envs
from envduels._signals import terminate_as_interrupt
from envduels._text import plural, printable
from envduels.config import load_config
from envduels.duel.design import Design
from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import turn_cap
from envduels.duel.usage import Usage
from envduels.engine.checks import check_reachable
from envduels.engine.estimate import Range, dollars, estimate_for
from envduels.engine.play import HumanSolver, StdinClosed, _printer
from envduels.engine.run import check_run, run_session
from envduels.engine.solving import EpisodeResult, EpisodeTask, play_episode
from envduels.envs import resolve
from envduels.errors import UserError
from envduels.store import RunReader

if TYPE_CHECKING:
    from envduels.config import RunConfig
    from envduels.players import Player
    from envduels.store import EnvRecord

EXIT_OK, EXIT_BUDGET, EXIT_ERRORS = 0, 3, 4
"""`envduels run`'s exit codes: every round recorded, the budget reached, work ended in `error`."""
UNSAFE_WARNING = "WARNING: --unsafe-no-sandbox: environment code runs unconfined on this machine"


# -- envduels run ---------------------------------------------------------------------------------

def run_command(config: Path, *, unsafe_no_sandbox: bool, quiet: bool,
                no_cache: bool = False, workers: int | None = None) -> int:
    """Run or resume the tournament of `config`; exit codes: `EXIT_OK` (0) every round is
    recorded; 2 bad input (one line on stderr, nothing written); `EXIT_BUDGET` (3) the budget
    was reached (raise `budget.max_usd`/`max_tokens` and run again to go on); `EXIT_ERRORS`
    (4) some work ended in `error` because a provider kept failing or a sandbox could not
    start (run again to retry it); 130 interrupted. In every case finished work is in the run
    database and is never redone.

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
    checked = check_run(cfg, unsafe_no_sandbox=unsafe_no_sandbox,
                        say=lambda line: print(line, flush=True))

    def warn_unsafe() -> None:
        if unsafe_no_sandbox:
            print(UNSAFE_WARNING, file=sys.stderr)

    try:
        session = run_session(cfg, checked, unsafe_no_sandbox=unsafe_no_sandbox,
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


# -- envduels status ------------------------------------------------------------------------------

def expected_episodes(cfg: RunConfig | None, envs: list[EnvRecord]) -> int:
    """Episodes a complete run plays (`duel.design.Design.expected_episodes`): every round of
    the run (and any recorded beyond `tournament.rounds`), the environments not authored yet
    counted as if valid (an upper bound until they are). 0 without a config (no solvers
    known)."""
    return 0 if cfg is None else Design.of(cfg).expected_episodes(envs)


def _instance_mode(cfg: object) -> str:
    """Where a run's episode instances come from on this machine: templates or, and why,
    fresh sandboxes (checked without starting a sandbox)."""
    from envduels.sandbox._template import describe_mode, host_template_problem

    runtime = str(getattr(getattr(cfg, "sandbox", None), "runtime", "bubblewrap"))
    return describe_mode(host_template_problem(runtime))


def status_command(run_dir: Path) -> int:
    """Print what a run has done, left and failed, and its tokens and cost, from its database."""
    store = RunReader(run_dir)
    cfg = store.run_config()
    envs = store.environments()
    counts = store.episode_counts()
    done = sum(v for k, v in counts.items() if k != "error")
    expected = expected_episodes(cfg, envs)
    authoring_errors = store.authoring_errors()
    rounds_seen = max([e.round for e in envs if not e.fixed_pool]
                      + [e.round for e in authoring_errors.values()], default=0)
    totals = store.totals()
    console = Console()
    table = Table(title=f"run {cfg.name if cfg is not None else run_dir} ({run_dir})",
                  show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rounds = cfg.tournament.rounds if cfg is not None else "?"
    table.add_row("rounds", f"{rounds_seen}/{rounds} started")
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
    table.add_row("replay audits", f"{audits.passed} passed, {audits.mismatch} mismatch, "
                  f"{audits.pending} pending")
    for env_id, detail in store.nondeterministic_environments().items():
        table.add_row(f"  {escape(printable(env_id))}",
                      f"nondeterministic: {escape(printable(detail))}")
    table.add_row("sandbox instances", _instance_mode(cfg))
    table.add_row("calls", f"{totals.calls} ({totals.input_tokens:,} in + "
                  f"{totals.output_tokens:,} out tokens)")
    table.add_row("input", _input_split(totals))
    table.add_row("cost", f"${totals.cost_usd:.4f} (prompt caching saved ${totals.saved_usd:.4f})")
    for name, u in sorted(store.usage_by_player().items(), key=lambda kv: str(kv[0])):
        # recorded calls: whole counts (a Usage holds floats only for estimates)
        table.add_row(f"  {name}", f"{plural(int(u.calls), 'call')}, "
                      f"{plural(int(u.tokens), 'token')}, "
                      f"${u.cost_usd:.4f} (saved ${u.saved_usd:.4f})")
    console.print(table)
    console.print(f"watch it live: envduels view {run_dir}", markup=False, highlight=False,
                  soft_wrap=True)
    store.close()
    return 0


def _input_split(t: Usage) -> str:
    """Input tokens as billed: uncached, read from and written to the prompt cache; reasoning."""
    return (f"{t.uncached_input_tokens:,} uncached + {t.cache_read_tokens:,} cache read + "
            f"{t.cache_write_tokens:,} cache write; {t.reasoning_tokens:,} of the output "
            "tokens reasoning")


# -- envduels play --------------------------------------------------------------------------------

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
                 seed: int, unsafe_no_sandbox: bool, workers: int | None = None) -> int:
    """Play one episode in the terminal; exit 0 on success, 1 otherwise (also when the person
    at `--human` closes standard input); Ctrl-C ends the process at once with exit 130."""
    from envduels.sandbox import SandboxLimits, sandbox_pool

    if human == (player is not None) or (player is not None and config is None):
        raise UserError("choose who plays: --human, or --config CONFIG --player NAME")
    spec = resolve(path).one()
    if hint and not spec.hint:
        raise UserError(f"{path} has no hint to show; play without --hint")
    max_turns = turn_cap(spec.max_turns)
    limits = SandboxLimits()
    solver: HumanSolver | Player
    if human or player is None or config is None:   # checked above: --human, or both given
        solver, name = HumanSolver(), "human"
    else:
        from envduels.players import build_players

        cfg = load_config(config)
        cfg.player(player)
        check_reachable(cfg)
        solver, name = build_players(cfg, cache=None, run_seed=cfg.seed)[player], player
        max_turns = turn_cap(spec.max_turns, cfg.tournament.max_turns)
        limits = SandboxLimits.from_config(cfg.sandbox)
    task = EpisodeTask(key=f"play:{spec.id}:{seed}:{int(hint)}", env=spec, solver=str(name),
                       seed=seed, trial=0, hinted=hint, max_turns=max_turns)
    console = Console(highlight=False, emoji=False, markup=False)

    async def main() -> EpisodeResult:
        # one episode lives in one worker: more would start processes for nothing
        pool = sandbox_pool(limits, workers=1 if workers is None else workers,
                            unsafe_no_sandbox=unsafe_no_sandbox, warm=0)
        try:
            return await play_episode(task, solver, lambda: pool.open(
                spec.source, class_name=spec.class_name, max_turns=spec.max_turns),
                on_event=_printer(console))
        finally:
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
    return 0 if result.outcome == Outcome.SUCCESS else 1


# -- envduels estimate ----------------------------------------------------------------------------

def _count(x: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.0f}"


def _n(r: Range) -> str:
    return f"{_count(r.low)}-{_count(r.high)}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _hours(r: Range) -> str:
    return f"{_duration(r.low)}-{_duration(r.high)}"


def estimate_command(config: Path, *, json_out: bool) -> int:
    """Print the estimate of `config` (a table, or with `json_out` one JSON object); exit 0."""

    from envduels.config import load_config

    cfg = load_config(config)
    est = estimate_for(cfg, load_fixed_envs(cfg))
    if json_out:
        print(json.dumps(est.to_json(), indent=2))
        return 0
    rows = [("player/role", "calls", "input tokens", "cached", "output", "USD", "wall",
             "unknowns from")]
    for name, roles in est.roles.items():
        for role, e in roles.items():
            rows.append((f"{name}/{role}", _n(e.range("calls")), _n(e.range("input_tokens")),
                         _n(e.range("cache_read_tokens")), _n(e.range("output_tokens")),
                         dollars(e.range("cost_usd")), _hours(e.wall_s()), e.source))
    rows.append(("total", _n(est.total("calls")), _n(est.total("input_tokens")),
                 _n(est.total("cache_read_tokens")), _n(est.total("output_tokens")),
                 dollars(est.total("cost_usd")), _hours(est.wall_s()), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"estimate for {cfg.name} (low-high; player/role as configured)")
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1],
                                                                     strict=True)] + [r[-1]]
        print("  ".join(cells).rstrip())
    if est.spent_usd:
        print(f"already spent: ${est.spent_usd:,.4f} (included above)")
    return 0
