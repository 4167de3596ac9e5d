"""What the viewer reads from one run folder, and the caches that keep pages fast.

The database is read through a live `store.RunReader` (read-only, following a run that starts
writing) and every read is one short autocommit query, so a tournament writing to it is never
blocked. Everything is cached against the database's change counter
(`RunReader.data_version`):

- a `Snapshot` per version: the episode index (every episode without its transcript, kept
  grouped by environment and by solver) and the usage per player and role, both grown
  incrementally from the rows written since the last look; the environments, re-read only when
  one was written; progress counts. A change costs about a millisecond on a 30,000-episode run;
- the analysis (ratings with intervals, flags, lift, headline), computed in a worker process
  (the bootstrap would hold the GIL and slow every page if it ran in a thread of the server),
  at most every `REFRESH_S` while a run goes on, while pages answer from the previous one: no
  page waits for a bootstrap.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from envduels._text import one_line
from envduels.analysis.result import RatingRow
from envduels.config import RunConfig
from envduels.duel.outcomes import Flag, Outcome
from envduels.store import EnvRecord, EpisodeRow, RunReader, ValidationRecord

_log = logging.getLogger(__name__)

BOOTSTRAP = 500
"""Bootstrap draws for the viewer's rating intervals (the report's default is 1000): enough for
a stable 95% interval, and half the wait on a large run in progress."""
LATEST = 12
"""Episodes listed as "latest" on a run's overview."""
REFRESH_S = 10.0
"""Shortest time between two analyses of a run in progress."""


class EnvFacts(TypedDict):
    """What the analysis says about one environment (`analysis.result.EnvironmentRow`'s)."""

    flags: list[Flag]
    lift: float | None
    no_hint: float | None
    with_hint: float | None
    pairs: int


@dataclass
class PageAnalysis:
    """The numbers a run's pages show, as of one database version."""

    version: int
    computed_at: float
    seconds: float                    # how long computing it took
    episodes: int
    ratings: dict[str, list[RatingRow]]  # "duel", "author", "solver": the report's rows, best first
    headline: list[str]
    envs: dict[str, EnvFacts]         # env_id -> flags, lift, pass rates, pairs
    attempts: dict[str, int] = field(default_factory=dict)
    pending: bool = False             # a placeholder: the first analysis is not done yet
    error: str = ""                   # why the analysis failed (one line); empty when it did not


def failed_analysis(version: int, err: BaseException, seconds: float) -> PageAnalysis:
    """An empty analysis saying, in one line, why computing it failed."""
    why = one_line(f"{type(err).__name__}: {err}", 300)
    return PageAnalysis(version=version, computed_at=time.time(), seconds=seconds, episodes=0,
                    ratings={"duel": [], "author": [], "solver": []}, headline=[], envs={},
                    error=why)


PENDING = PageAnalysis(version=-1, computed_at=0.0, seconds=0.0, episodes=0,
                   ratings={"duel": [], "author": [], "solver": []}, headline=[], envs={},
                   pending=True)


def analyse_run(run_dir: str | Path, version: int, bootstrap: int = BOOTSTRAP) -> PageAnalysis:
    """`analyse` on its own read-only connection: what the worker process runs (one read,
    so not `live`: it follows no run and leaves nothing in the folder)."""
    with RunReader(run_dir) as reader:
        return analyse(reader, version, bootstrap=bootstrap)


def analysis_pool() -> Executor:
    """One worker process for the analyses of every run a viewer shows (spawned, not forked:
    the server has threads)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def analyse(reader: RunReader, version: int, *, bootstrap: int = BOOTSTRAP) -> PageAnalysis:
    """The report's analysis of the run `reader` reads, as of now (`envduels.analysis.analyze`,
    without design convergence: it needs the embedding model and says nothing a page here
    shows), with the report's headline findings."""
    from envduels.analysis import analyze
    from envduels.report.html import headline

    started = time.perf_counter()
    tables = reader.tables(transcripts="hinted wins")
    attempts = dict(Counter(v.env_id for v in reader.validations()))
    if tables.environments.empty or tables.episodes.empty:
        return PageAnalysis(version=version, computed_at=time.time(),
                            seconds=time.perf_counter() - started, episodes=len(tables.episodes),
                            ratings={"duel": [], "author": [], "solver": []}, headline=[],
                            envs={}, attempts=attempts)
    j = analyze(tables, bootstrap=bootstrap, convergence=False).result
    envs = {e.id: EnvFacts(flags=e.flags, lift=e.lift, no_hint=e.panel_no_hint, with_hint=e.panel_with_hint,
                           pairs=e.pairs)
            for e in j.environments}
    return PageAnalysis(version=version, computed_at=time.time(),
                        seconds=time.perf_counter() - started, episodes=len(tables.episodes),
                        ratings={"duel": j.ratings.duel, "author": j.ratings.author,
                                 "solver": j.ratings.solver},
                        headline=headline(j), envs=envs, attempts=attempts)


@dataclass(frozen=True)
class Snapshot:
    """The small facts about a run as of one database version (lists of episodes are asked of
    the reader, which copies only the group wanted)."""

    version: int
    config: RunConfig | None         # as recorded (RunReader.run_config); None: none readable
    environments: list[EnvRecord]
    episode_counts: dict[str, int]                 # env_id -> episodes recorded
    latest: list[dict[str, Any]]                   # the last LATEST episodes, newest first
    usage: list[dict[str, Any]]                    # per player and role
    progress: dict[str, Any]


class ViewedRun:
    """One run folder as the viewer shows it, read-only, shared by every request
    (thread-safe)."""

    def __init__(self, run_dir: str | Path, *, bootstrap: int = BOOTSTRAP,
                 pool: Executor | None = None) -> None:
        """`pool`: where analyses run (`analysis_pool()`); None runs them in this process."""
        self.run_dir = Path(run_dir)
        self.reader = RunReader(self.run_dir, live=True)
        self.bootstrap = bootstrap
        self.pool = pool
        self._lock = threading.Lock()
        # the episode index, kept grouped as it grows (dicts keep insertion order)
        self._index: dict[str, dict[str, Any]] = {}
        self._by_env: dict[str, dict[str, dict[str, Any]]] = {}
        self._by_solver: dict[str, dict[str, dict[str, Any]]] = {}
        self._outcomes: Counter[str] = Counter()
        self._index_rowid = 0
        self._usage: dict[tuple[str, str], dict[str, Any]] = {}
        self._usage_rowid = 0
        self._envs: tuple[tuple[int, int], list[EnvRecord]] | None = None
        self._snapshot: Snapshot | None = None
        self._analysis: PageAnalysis | None = None
        self._analysing = False
        self._analysis_lock = threading.Lock()
        self._first = threading.Lock()
        self._closed = False

    @property
    def config(self) -> RunConfig | None:
        return self.snapshot().config

    @property
    def name(self) -> str:
        config = self.config
        return (config.name if config is not None else "") or self.run_dir.name

    @property
    def player_names(self) -> list[str]:
        """The run's players, in config order (empty when no config could be read)."""
        config = self.config
        return [p.name for p in config.players] if config is not None else []

    def version(self) -> int:
        return self.reader.data_version()

    # -- one row by key, always read fresh ---------------------------------------------------

    def environment(self, env_id: str) -> EnvRecord | None:
        return self.reader.environment(env_id)

    def validations(self, env_id: str) -> list[ValidationRecord]:
        return self.reader.validations(env_id)

    def episode(self, key: str) -> EpisodeRow | None:
        return self.reader.episode(key)

    # -- cached by version -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The run as of now: rebuilt only when the database changed, reading only the
        episodes and calls written since the last look (and the environments when they did)."""
        version = self.version()
        with self._lock:
            if self._snapshot is not None and self._snapshot.version == version:
                return self._snapshot
            self._take_new_episodes()
            self._take_new_calls()
            stamp = self.reader.environments_stamp()
            if self._envs is None or self._envs[0] != stamp:
                self._envs = (stamp, self.reader.environments())
            envs = self._envs[1]
            config = self.reader.run_config()
            usage = [self._usage[k] for k in sorted(self._usage, key=lambda k: (str(k[0]), str(k[1])))]
            latest = list(itertools.islice(reversed(self._index.values()), LATEST))
            self._snapshot = Snapshot(
                version, config, envs, {k: len(v) for k, v in self._by_env.items()}, latest,
                usage, _progress(config, envs, self._outcomes, usage))
            return self._snapshot

    def _take_new_episodes(self) -> None:
        for row in self.reader.episode_index(self._index_rowid):
            key = row["episode_key"]
            old = self._index.pop(key, None)   # replaced (an error retried): it moves to the end
            if old is not None:
                self._outcomes[old["outcome"]] -= 1
                self._by_env[old["env_id"]].pop(key, None)
                self._by_solver[old["solver"]].pop(key, None)
            self._index[key] = row
            self._by_env.setdefault(row["env_id"], {})[key] = row
            self._by_solver.setdefault(row["solver"], {})[key] = row
            self._outcomes[row["outcome"]] += 1
            self._index_rowid = max(self._index_rowid, row["rowid"])

    def _take_new_calls(self) -> None:
        for row in self.reader.usage_by_player_role(self._usage_rowid):
            old = self._usage.get((row["player"], row["role"]))
            if old is not None:
                for k in ("calls", "input_tokens", "output_tokens", "cost_usd", "retries"):
                    row[k] += old[k]
            self._usage[(row["player"], row["role"])] = row
            self._usage_rowid = max(self._usage_rowid, row["last_rowid"])

    def episodes_of(self, *, env_id: str | None = None, solver: str | None = None
                    ) -> list[dict[str, Any]]:
        """The episodes (without transcripts) of one environment, or of one solver, or all,
        oldest first, as of now."""
        self.snapshot()
        with self._lock:
            if env_id is not None:
                return list(self._by_env.get(env_id, {}).values())
            if solver is not None:
                return list(self._by_solver.get(solver, {}).values())
            return list(self._index.values())

    def progress(self) -> dict[str, Any]:
        """Counts a live page shows: episodes done, left, by outcome; calls, tokens, cost."""
        return self.snapshot().progress

    def environments(self) -> list[EnvRecord]:
        return self.snapshot().environments

    def usage(self) -> list[dict[str, Any]]:
        """Calls, tokens, cost and retries per player and role."""
        return self.snapshot().usage

    def analysis(self, *, wait: bool = True) -> PageAnalysis:
        """The latest analysis. When the run has changed since it was computed, a fresh one
        is started in the background (at most every `REFRESH_S`, or four times as long as the
        last one took, so that a run in progress is not analysed back to back) and this one is
        returned. The very first one is computed in the caller, or, with `wait=False`, started
        in the background while `PENDING` (empty, `pending=True`) is returned."""
        version = self.version()
        with self._analysis_lock:
            current = self._analysis
            if current is not None:
                due = time.time() - current.computed_at >= max(REFRESH_S, 4 * current.seconds)
                if current.version != version and due and not self._analysing:
                    self._analysing = True
                    threading.Thread(target=self._quietly, args=(self._refresh, version),
                                     daemon=True).start()
                return current
        if not wait:
            if not self._first.locked():
                self.warm()
            return PENDING
        with self._first:   # one first computation, however many pages ask at once
            if self._analysis is None:
                started = time.time()
                try:
                    fresh = self._compute(version)
                except Exception as err:
                    if self._closed:
                        raise
                    # kept like a result: asked again only when the run changes (as a refresh,
                    # at most every REFRESH_S), not on every page, each of which paid for the
                    # whole failing computation again
                    _log.exception("envduels view: the analysis of %s failed", self.run_dir)
                    fresh = failed_analysis(version, err, time.time() - started)
                with self._analysis_lock:
                    self._analysis = fresh
            return self._analysis

    def _compute(self, version: int) -> PageAnalysis:
        pool = self.pool
        if pool is not None:
            try:
                return pool.submit(analyse_run, self.run_dir, version, self.bootstrap).result()
            except BrokenProcessPool:
                if self._closed:
                    raise
                # the worker died (killed, out of memory, or this process's main module cannot
                # be re-imported by a spawned child): analyse here from now on
                self.pool = None
        return analyse(self.reader, version, bootstrap=self.bootstrap)

    def warm(self) -> None:
        """Start the first analysis in the background (imports and bootstrap take seconds), so
        that the first overview opened usually finds it done."""
        threading.Thread(target=self._quietly, args=(self.analysis,), daemon=True).start()

    def _quietly(self, work: Any, *args: Any) -> None:
        """Run background `work`; once the reader is closed, its failure is expected."""
        try:
            work(*args)
        except Exception:
            if not self._closed:
                raise

    def _refresh(self, version: int) -> None:
        try:
            fresh = self._compute(version)
            with self._analysis_lock:
                self._analysis = fresh
        finally:
            with self._analysis_lock:
                self._analysing = False

    def close(self) -> None:
        self._closed = True
        self.reader.close()


def _progress(config: RunConfig | None, envs: list[EnvRecord], counts: Counter[str],
              usage: list[dict[str, Any]]) -> dict[str, Any]:
    from envduels.duel.design import Design

    done = sum(v for k, v in counts.items() if k != Outcome.ERROR)
    expected = max(Design.of(config).expected_episodes(envs) if config is not None else 0, done)
    return {
        "episodes_done": done, "episodes_expected": expected, "episodes_left": expected - done,
        "percent": round(100 * done / expected) if expected else 0,
        "outcomes": {str(k): counts.get(k, 0) for k in Outcome},
        "environments": len(envs), "valid": sum(1 for e in envs if e.valid),
        "calls": sum(u["calls"] for u in usage),
        "tokens": sum(u["input_tokens"] + u["output_tokens"] for u in usage),
        "cost_usd": round(sum(u["cost_usd"] for u in usage), 4),
    }
