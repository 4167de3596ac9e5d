"""Scheduling a tournament: rounds of authoring, then every episode of the round in flight at once.

Per round: every authoring player writes `envs_per_author` environments (concurrently, each
validated in the sandbox pool); then every valid environment of the round (and, in round 1, the
fixed pools) is played by every solver on its benchmark seeds, `trials_per_seed` times, in both
conditions. Each episode is an `EpisodeTask` with a deterministic key; keys the store already
holds (any outcome but `error`) are skipped, so a resumed run redoes nothing finished.

Concurrency: a solver never has more episodes in flight than its `max_concurrency` (an episode
holds at most one model call at a time), and at most `MAX_OPEN_ENVS` sandboxes are open at once.
The sandbox pool is told how many episodes are coming (`EnvPool.expect`: an upper bound
before a round's authoring, the exact batch before its episodes), so workers start before the
episodes ask, and no more than they need.
The executor is a small seam: `AsyncioExecutor` runs tasks in this event loop; a distributed
executor only needs the same `map`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from envduels.config import RunConfig
from envduels.engine._keys import authored_env_id, episode_key
from envduels.engine.authoring import (
    AuthoringJob,
    SandboxDown,
    author_env,
    author_prompt,
    library_examples,
)
from envduels.engine.history import history_digest
from envduels.engine.progress import Progress
from envduels.engine.solving import EpisodeResult, EpisodeTask, play_episode, turn_cap
from envduels.store import EnvironmentRow, EpisodeRow, Store

T = TypeVar("T")
R = TypeVar("R")

MAX_OPEN_ENVS = 64


class Executor(Protocol):
    """Runs `fn` over `items` concurrently, yielding results as they finish."""

    def map(self, fn: Callable[[T], Awaitable[R]], items: Iterable[T]) -> AsyncIterator[R]: ...


class AsyncioExecutor:
    """Every item as a task in the running event loop."""

    async def map(self, fn: Callable[[T], Awaitable[R]], items: Iterable[T]) -> AsyncIterator[R]:
        tasks = [asyncio.ensure_future(fn(item)) for item in items]
        try:
            for done in asyncio.as_completed(tasks):
                yield await done
        finally:
            for t in tasks:
                t.cancel()


@dataclass
class RunResult:
    """How a session of a run ended."""

    complete: bool          # every round's work is recorded (errors aside)
    budget_reached: bool
    errors: int             # episodes or authoring jobs left in `error` (retried on resume)


class _TrackedPlayer:
    """A player whose calls update the progress counters."""

    def __init__(self, player: Any, progress: Progress) -> None:
        self._player = player
        self._progress = progress
        self.name = player.name
        self.config = player.config

    async def chat(self, messages: list[dict[str, str]], **kw: Any) -> Any:
        self._progress.calls_in_flight += 1
        try:
            result = await self._player.chat(messages, **kw)
        finally:
            self._progress.calls_in_flight -= 1
        self._progress.call_finished(tokens=result.input_tokens + result.output_tokens,
                                     cost_usd=result.cost_usd, retries=result.retries,
                                     cached=result.cached)
        return result


def to_spec(row: EnvironmentRow) -> Any:
    """The `envs.EnvSpec` of a recorded environment."""
    from envduels.envs import EnvSpec

    return EnvSpec(id=row.env_id, source=row.source, class_name=row.class_name,
                   max_turns=row.max_turns, domain=row.domain, author=row.author, title=row.title,
                   hints=dict(row.hints), benchmark_seeds=tuple(row.benchmark_seeds),
                   metadata=dict(row.metadata))


def pool_row(spec: Any, *, run_seed: int, seeds_per_env: int) -> EnvironmentRow:
    """A fixed-pool environment (library or export) as a round-1 environment row."""
    from envduels.envs import benchmark_seeds

    seeds = tuple(spec.benchmark_seeds) or tuple(benchmark_seeds(run_seed, spec.id, seeds_per_env))
    return EnvironmentRow(
        env_id=spec.id, author=spec.author or "library", round=1, slot=0, domain=spec.domain,
        title=spec.title or spec.id, valid=True, invalid_reason=None, hints=dict(spec.hints),
        source=spec.source, source_sha256=spec.source_sha256, class_name=spec.class_name,
        max_turns=spec.max_turns, fixed_pool=True, benchmark_seeds=seeds,
        metadata=dict(spec.metadata))


class Tournament:
    """One session of a run: plays what the store does not hold yet, round by round."""

    def __init__(self, cfg: RunConfig, *, store: Store, players: dict[str, Any], pool: Any,
                 fingerprint: str, pool_specs: list[Any], progress: Progress,
                 executor: Executor | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.players = {n: _TrackedPlayer(p, progress) for n, p in players.items()}
        self.pool = pool
        self.fingerprint = fingerprint
        self.pool_specs = pool_specs
        self.progress = progress
        self.executor = executor or AsyncioExecutor()
        self._solver_slots = {p.name: asyncio.Semaphore(p.max_concurrency) for p in cfg.players}
        self._env_slots = asyncio.Semaphore(MAX_OPEN_ENVS)
        self._budget_reached = False
        self._errors = 0

    # -- budget -----------------------------------------------------------------------------

    def budget_reached(self) -> bool:
        if not self._budget_reached:
            b = self.cfg.budget
            totals = self.store.totals()
            if (b.max_usd is not None and totals.cost_usd >= b.max_usd) or (
                    b.max_tokens is not None and totals.tokens >= b.max_tokens):
                self._budget_reached = True
        return self._budget_reached

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> RunResult:
        t = self.cfg.tournament
        self._record_pools()
        for rnd in range(1, t.rounds + 1):
            self.progress.round = rnd
            if self.budget_reached():
                break
            self.progress.phase = "authoring"
            # workers for the episodes start while the authors write (model-bound time)
            self.pool.expect(self._upcoming_episodes(rnd))
            authored = await self._author_round(rnd)
            envs = [e for e in authored if e.valid]
            if rnd == 1:
                envs = [e for e in self.store.environments() if e.fixed_pool] + envs
            await self._play(self._tasks(envs))
        return RunResult(complete=not self._budget_reached, budget_reached=self._budget_reached,
                         errors=self._errors)

    def _upcoming_episodes(self, rnd: int) -> int:
        """At most how many episodes round `rnd` still plays: those of its recorded valid
        environments not finished yet, plus, for each environment still to be authored, as
        many as if it were valid."""
        t = self.cfg.tournament
        recorded = self.store.environments()
        envs = [e for e in recorded if e.valid and (
            (e.fixed_pool and rnd == 1) or (not e.fixed_pool and e.round == rnd))]
        finished = self.store.finished_episode_keys()
        left = sum(1 for task in self._tasks(envs) if task.key not in finished)
        known = {e.env_id for e in recorded}
        unwritten = sum(1 for p in self.cfg.players if p.authors
                        for slot in range(t.envs_per_author)
                        if authored_env_id(p.name, rnd, slot) not in known)
        solvers = sum(1 for p in self.cfg.players if p.solves)
        return left + unwritten * solvers * t.seeds_per_env * t.trials_per_seed * 2

    def _record_pools(self) -> None:
        for spec in self.pool_specs:
            if self.store.environment(spec.id) is None:
                self.store.put_environment(pool_row(spec, run_seed=self.cfg.seed,
                                                    seeds_per_env=self.cfg.tournament.seeds_per_env))

    async def _author_round(self, rnd: int) -> list[EnvironmentRow]:
        from envduels.envs import benchmark_seeds, validate_env

        t = self.cfg.tournament
        jobs = [AuthoringJob(authored_env_id(p.name, rnd, slot), p.name, rnd, slot)
                for p in self.cfg.players if p.authors for slot in range(t.envs_per_author)]
        done = {j.env_id: self.store.environment(j.env_id) for j in jobs}
        todo = [j for j in jobs if done[j.env_id] is None]
        if todo:
            examples = library_examples(2)
            tables = self.store.tables() if rnd > 1 and t.history != "none" else None
            prompts = {
                author: author_prompt(self.cfg, examples=examples, history=history_digest(
                    tables, author=author, round_=rnd, mode=t.history,
                    max_chars=t.history_chars) if tables is not None else "")
                for author in {j.author for j in todo}
            }

            async def validate(spec: Any, *, seeds: list[int]) -> Any:
                from envduels.sandbox import SandboxStartError

                try:
                    return await validate_env(spec, self.pool, seeds=seeds,
                                              require_oracle=t.require_oracle,
                                              hint_max_chars=t.hint_max_chars,
                                              max_turns=t.max_turns)
                except SandboxStartError as err:  # the host's failure: the attempt stays unjudged
                    raise SandboxDown(err.reason) from None

            async def one(job: AuthoringJob) -> EnvironmentRow | None:
                if self.budget_reached():
                    return None
                async with self._solver_slots[job.author]:
                    row = await author_env(
                        job, self.players[job.author], cfg=self.cfg, store=self.store,
                        validate=validate, prompt=prompts[job.author],
                        seeds=benchmark_seeds(self.cfg.seed, job.env_id, t.seeds_per_env))
                if row is None and not self.budget_reached():
                    self._errors += 1
                    self.store.put_authoring_error(job.env_id, author=job.author, round=rnd)
                return row

            async for row in self.executor.map(one, todo):
                if row is not None:
                    done[row.env_id] = row
        rows = [done[j.env_id] for j in jobs if done[j.env_id] is not None]
        recorded = self.store.environments()
        self.progress.envs_valid = sum(1 for e in recorded if e.valid)
        self.progress.envs_invalid = len(recorded) - self.progress.envs_valid
        return rows

    def _tasks(self, envs: list[EnvironmentRow]) -> list[EpisodeTask]:
        t = self.cfg.tournament
        tasks = []
        for env in envs:
            spec = to_spec(env)
            for p in self.cfg.players:
                if not p.solves:
                    continue
                self_play = p.name == env.author
                if self_play and not t.self_play:
                    continue
                for seed in env.benchmark_seeds:
                    for trial in range(t.trials_per_seed):
                        for hinted in (False, True):
                            key = episode_key(self.fingerprint, env.env_id, env.source_sha256,
                                              p.name, seed, trial, hinted)
                            tasks.append(EpisodeTask(
                                key=key, env=spec, solver=p.name, seed=seed, trial=trial,
                                hinted=hinted, max_turns=turn_cap(env.max_turns, t.max_turns),
                                round=env.round, self_play=self_play))
        return tasks

    async def _play(self, tasks: list[EpisodeTask]) -> None:
        finished = self.store.finished_episode_keys()
        todo = [task for task in tasks if task.key not in finished]
        self.progress.begin_solving(planned=len(tasks), done=len(tasks) - len(todo))
        self.pool.expect(len(todo))   # exactly this batch: no worker started for nothing
        async for _ in self.executor.map(self._episode, todo):
            pass

    async def _episode(self, task: EpisodeTask) -> EpisodeResult | None:
        async with self._solver_slots[task.solver], self._env_slots:
            if self.budget_reached():
                return None
            env = task.env

            async def open_env() -> Any:
                return await self.pool.open(env.source, class_name=env.class_name,
                                            max_turns=env.max_turns)

            result = await play_episode(task, self.players[task.solver], open_env)
        self.store.put_episode(EpisodeRow(
            episode_key=task.key, env_id=env.id, author=env.author, solver=task.solver,
            round=task.round, domain=env.domain, seed=task.seed, trial=task.trial,
            hinted=task.hinted, outcome=result.outcome, reason=result.reason, turns=result.turns,
            self_play=task.self_play, transcript=result.transcript))
        if result.outcome == "error":
            self._errors += 1
        self.progress.episode_finished(result.outcome)
        return result
