"""Run progress: counters the scheduler updates, shown while a run works.

On a terminal (and without `--quiet`) a rich live view; off a terminal (a CI log, output piped
to a file) one plain line at each phase change (a round's authoring, its solving) and every
`PLAIN_INTERVAL_S` seconds between, so a long run's log is never silent until the end.
The view keeps the run-wide outcomes (this session) apart from the current round's counts, and
shows no episode counts while a round authors.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from envduels._text import plural

PLAIN_INTERVAL_S = 10.0


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

    round_outcomes: dict[str, int] = field(default_factory=dict)

    def begin_solving(self, *, planned: int, done: int) -> None:
        """The current round's episodes: `planned` in all, `done` already recorded (resumed)."""
        self.episodes_planned = planned
        self.episodes_done = done
        self.episodes_resumed += done
        self.round_outcomes = {}
        self.phase = "solving"

    def episode_finished(self, outcome: str) -> None:
        self.episodes_done += 1
        self._session_done += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.round_outcomes[outcome] = self.round_outcomes.get(outcome, 0) + 1

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

    def _round_text(self) -> str:
        if self.phase != "solving":
            return f"- ({self.phase})"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.round_outcomes.items()))
        return (f"{self.episodes_done} done / {max(0, self.episodes_planned - self.episodes_done)}"
                f" left" + (f" ({outcomes})" if outcomes else ""))

    def _run_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "-"

    def render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        eta = self.eta_s() if self.phase == "solving" else None
        table.add_row("round", f"{self.round}/{self.rounds} ({self.phase})")
        table.add_row("environments", f"{self.envs_valid} valid, {self.envs_invalid} invalid")
        table.add_row("this round", f"episodes {self._round_text()}")
        table.add_row("whole run", f"episodes this session: {self._run_text()}")
        table.add_row("calls", f"{self.calls_in_flight} in flight, {self.calls} done "
                      f"({self.cached_calls} from cache), "
                      f"{plural(self.retries, 'retry', 'retries')}")
        table.add_row("spent", f"{self.tokens:,} tokens, ${self.cost_usd:.4f} this session")
        table.add_row("eta", "-" if eta is None else f"{eta:.0f} s for this round")
        return table

    def line(self) -> str:
        """The same as one plain line, for logs: `progress: round 1/2 solving; ...`."""
        return (f"progress: round {self.round}/{self.rounds} {self.phase}; environments "
                f"{self.envs_valid} valid, {self.envs_invalid} invalid; this round: episodes "
                f"{self._round_text()}; whole run: {self._run_text()}; {self.tokens:,} tokens, "
                f"${self.cost_usd:.4f} this session")


class LiveView:
    """Shows a `Progress` while a run works: a rich Live display on a terminal (`enabled`);
    off a terminal (`plain`) a plain line at each phase change and every `interval_s` seconds
    between; nothing with `quiet`."""

    def __init__(self, progress: Progress, *, quiet: bool, console: Console | None = None,
                 interval_s: float = PLAIN_INTERVAL_S) -> None:
        self.progress = progress
        self.console = console or Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self.plain = not quiet and not self.console.is_terminal
        self.interval_s = interval_s
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(get_renderable=lambda: Group(self.progress.render()),
                              console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        elif self.plain:
            # A thread, not a task: the line must come on time even while the event loop is
            # busy, and it only reads counters (a line may mix two updates; the next is right).
            self._thread = threading.Thread(target=self._plain_lines, name="envduels-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def _emit(self) -> None:
        self.console.file.write(self.progress.line() + "\n")
        self.console.file.flush()

    def _plain_lines(self) -> None:
        shown: tuple[int, str] | None = None
        last = time.monotonic()
        while not self._stop.wait(0.2):
            now = time.monotonic()
            phase = (self.progress.round, self.progress.phase)
            if phase != shown and self.progress.round > 0:
                shown, last = phase, now
                self._emit()
            elif now - last >= self.interval_s:
                last = now
                self._emit()

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
