"""`envduels status`: what a run has done, left and failed, read from its database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envduels._text import plural, printable
from envduels.duel.design import Design
from envduels.duel.usage import Usage
from envduels.store import RunReader

if TYPE_CHECKING:
    from envduels.config import RunConfig
    from envduels.store import EnvRecord


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
