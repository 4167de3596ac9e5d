"""Run progress: counters the scheduler updates, a rich live view, and the same view from a DB.

The live view is shown only on a terminal and without `--quiet`; elsewhere a run is silent
until its one-line summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table


@dataclass
class Progress:
    """What a run has done so far in this session (plus what the store already held)."""

    rounds: int
    round: int = 0
    phase: str = "starting"
    episodes_done: int = 0
    episodes_planned: int = 0
    episodes_resumed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    envs_valid: int = 0
    envs_invalid: int = 0
    calls_in_flight: int = 0
    calls: int = 0
    cached_calls: int = 0
    retries: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)
    _session_done: int = 0

    def episode_finished(self, outcome: str) -> None:
        self.episodes_done += 1
        self._session_done += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def call_finished(self, *, tokens: int, cost_usd: float, retries: int, cached: bool) -> None:
        self.calls += 1
        self.retries += retries
        if cached:
            self.cached_calls += 1
        else:
            self.tokens += tokens
            self.cost_usd += cost_usd

    def eta_s(self) -> float | None:
        left = self.episodes_planned - self.episodes_done
        elapsed = time.monotonic() - self.started
        if self._session_done == 0 or left <= 0:
            return None
        return elapsed / self._session_done * left

    def render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        eta = self.eta_s()
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "-"
        table.add_row("round", f"{self.round}/{self.rounds} ({self.phase})")
        table.add_row("environments", f"{self.envs_valid} valid, {self.envs_invalid} invalid")
        table.add_row("episodes", f"{self.episodes_done} done / "
                      f"{max(0, self.episodes_planned - self.episodes_done)} left in this round "
                      f"({outcomes})")
        table.add_row("calls", f"{self.calls_in_flight} in flight, {self.calls} done "
                      f"({self.cached_calls} from cache), {self.retries} retries")
        table.add_row("spent", f"{self.tokens:,} tokens, ${self.cost_usd:.4f} this session")
        table.add_row("eta", "-" if eta is None else f"{eta:.0f} s for this round")
        return table


class LiveView:
    """A rich Live display of a `Progress`, or nothing when off a terminal or quiet."""

    def __init__(self, progress: Progress, *, quiet: bool, console: Console | None = None) -> None:
        self.progress = progress
        self.console = console or Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(get_renderable=lambda: Group(self.progress.render()),
                              console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
