"""Scheduling a tournament: rounds of authoring, then every episode of the round in flight at once.

Per round: every authoring player writes `envs_per_author` environments (concurrently, each
validated in the sandbox pool); then every valid environment of the round (and, in round 1, the
fixed pools) is played by every solver on its benchmark seeds, `trials_per_seed` times, in both
conditions. Each episode is an `EpisodeTask` with a deterministic key; keys the store already
holds (any outcome but `error`) are skipped, so a resumed run redoes nothing finished.

Concurrency (`RunConfig.concurrency` decides every limit): a player never has more units of work
in flight than its `concurrency.units`, episodes it solves and environments it authors together
(each holds at most one model call at a time), and at most `concurrency.open_sandboxes`
sandboxes are open at once.
The sandbox pool is told how many episodes are coming (`EnvPool.expect`: an upper bound
before a round's authoring, the exact batch before its episodes), so workers start before the
episodes ask, and no more than they need.
Audit: every episode that ends in success or failure is replayed in a fresh sandbox (see
`engine.audit`), in one batch after the round's plays, in an order drawn from the operating
system's randomness: an environment cannot line a replay up with its play ("the last mark in a
shared counter is my play's"), nor tell a replay by its place right after a play. The run does
not finish before its audits do, and a resumed run first audits (also shuffled) what an earlier
session played but did not audit. A mismatch flags the environment `nondeterministic`
(`RunWriter.put_audit`); its episodes of later rounds (and of this round, if the session stops
before it audits) are recorded `incomplete` without a model call.
So are all episodes of an environment that validation's degenerate-policy battery flagged
(`trivial`, `hint_is_key`, `fixed_answer`). Fixed-pool environments (library, exports) are
validated at the start of a run like authored ones (the same checks, battery and answer check;
their verdicts cached per user), so the same flags hold for them; an invalid one is not played.

Last resort: no exception from one episode or authoring job cancels the others or the run. An
episode that raises anyway is recorded `error` (the host's fault: retried on resume); an
authoring job that raises is left unrecorded and counted as an error (retried on resume).

The order of the two conditions of a matched pair is drawn per pair from the run's fingerprint
and its random secret (`run_draw_secret`, kept in the run database), so an environment can
neither count on "unhinted first" nor compute the order from the config.

The executor is a small seam: `AsyncioExecutor` runs tasks in this event loop; a distributed
executor only needs the same `map`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from envduels.config import RunConfig
from envduels.duel.design import LIBRARY_AUTHOR, AuthoringSlot, Design
from envduels.duel.faults import Phase, describe, ending, not_played
from envduels.duel.outcomes import BATTERY_FLAGS, Flag, Outcome
from envduels.engine._keys import episode_key
from envduels.engine.audit import ReplayHostError, replay_episode
from envduels.engine.authoring import (
    SandboxDown,
    author_env,
    author_prompt,
    library_examples,
)
from envduels.engine.history import history_digest
from envduels.engine.progress import Progress
from envduels.engine.solving import (
    EnvLike,
    EpisodeResult,
    EpisodeTask,
    PlayerLike,
    play_episode,
)
from envduels.errors import UserError
from envduels.store import EnvRecord, EpisodeRow, ValidationRecord
from envduels.store.writer import RunWriter

if TYPE_CHECKING:
    from envduels.duel.protocol import Entry
    from envduels.envs import EnvSpec, Verdict
    from envduels.envs._verdict_cache import VerdictCache
    from envduels.players import ChatResult
    from envduels.sandbox import SandboxPool
    from envduels.sandbox.ray_pool import RayEnvPool

    Sandboxes: TypeAlias = SandboxPool | RayEnvPool
    """The sandbox pool a run's environments run in: on this machine (in harness workers or
    in-process), or on a Ray cluster."""

log = logging.getLogger("envduels.engine")

T = TypeVar("T")
R = TypeVar("R")


AUDIT_EPISODES = True
"""Internal switch for `bench/bench_engine.py` (the audit's cost, measured against a run
without it): never a user setting, since a run without the audit can be gamed."""

PREPARED_REPLAY_SOURCES = 8
"""A round whose plays come from at most this many sources has its replays' templates started
during the plays (`Tournament._play`); a larger one starts them in the audit, as they come."""

_AUDIT_ORDER = random.SystemRandom()
"""Draws the order of a batch of replays: unpredictable and never derived from the run (its
config, its secret), so nothing an environment sees tells it which replay comes when."""


@dataclass(frozen=True)
class PendingAudit:
    """A played episode waiting for its replay: what `Tournament._audit` needs."""

    key: str
    env: EnvSpec
    seed: int
    hinted: bool
    transcript: list[Entry]
    played_in: object | None = None   # the harness process that held its play (this session)


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

    def __init__(self, player: PlayerLike, progress: Progress) -> None:
        self._player = player
        self._progress = progress
        self.name = player.name
        self.config = player.config

    async def chat(self, messages: list[dict[str, str]], *, call_id: str, role: str,
                   max_tokens: int | None = None) -> ChatResult:
        self._progress.calls_in_flight += 1
        try:
            result = await self._player.chat(messages, call_id=call_id, role=role,
                                             max_tokens=max_tokens)
        finally:
            self._progress.calls_in_flight -= 1
        self._progress.call_finished(tokens=result.input_tokens + result.output_tokens,
                                     cost_usd=result.cost_usd, retries=result.retries,
                                     cached=result.cached)
        return result


def fixed_env_record(spec: EnvSpec, *, run_seed: int, seeds_per_env: int) -> EnvRecord:
    """A fixed-pool environment (library or export) as the run records it: valid, in round 1,
    its author "library" and its title its id when it names none, its benchmark seeds its own
    or, when it has none, `seeds_per_env` derived from the run seed."""
    from envduels.envs import benchmark_seeds

    seeds = tuple(spec.benchmark_seeds) or tuple(benchmark_seeds(run_seed, spec.id, seeds_per_env))
    return EnvRecord(replace(spec, author=spec.author or LIBRARY_AUTHOR, title=spec.title or spec.id,
                             benchmark_seeds=seeds), round=1, fixed_pool=True)


def condition_order(fingerprint: str, env_id: str, solver: str, seed: int,
                    trial: int) -> tuple[bool, bool]:
    """The order (hinted flags) in which a matched pair's two episodes are queued: drawn per
    pair from `fingerprint` (a run passes its fingerprint and its secret, `run_draw_secret`),
    so the same run queues the same order on resume, and an environment cannot know or count
    on either condition coming first."""
    rng = random.Random(f"envduels-condition-order/v1|{fingerprint}|{env_id}|{solver}|{seed}|"
                        f"{trial}")
    return (False, True) if rng.random() < 0.5 else (True, False)


DRAW_SECRET_KEY = "draw_secret"


def run_draw_secret(writer: RunWriter) -> str:
    """The run's random secret (128 bits, hex): created at the run's first session and kept in
    its database, so a resume draws the same probes and condition orders. It salts both draws
    beside the fingerprint, which is a plain hash of the config that an author can compute:
    without the secret an environment could know its probes and which condition comes first.
    It is never sent to a sandbox, a model, a log or a report."""
    value = writer.reader.meta(DRAW_SECRET_KEY)
    if not (isinstance(value, str) and len(value) == 32):
        value = secrets.token_hex(16)
        writer.set_meta(DRAW_SECRET_KEY, value)
    return value


def planned_episodes(cfg: RunConfig, envs: Iterable[EnvRecord], rounds: Iterable[int]) -> int:
    """Episodes `rounds` of a run play in all (`duel.design.Design.planned_episodes`): every
    solver on each valid recorded environment of those rounds, plus each one not recorded yet
    as if valid with `seeds_per_env` seeds. The one count behind `status`, the viewer's progress
    and the sandbox pool's sizing (`Tournament`)."""
    return Design.of(cfg).planned_episodes(envs, rounds)


class Tournament:
    """One session of a run: plays what its database does not hold yet, round by round."""

    def __init__(self, cfg: RunConfig, *, writer: RunWriter, players: Mapping[str, PlayerLike],
                 sandboxes: Sandboxes, fingerprint: str, fixed_envs: list[EnvSpec],
                 progress: Progress,
                 executor: Executor | None = None, audit: bool | None = None) -> None:
        """`sandboxes`: the sandbox pool every environment runs in (`EnvPool`, `RayEnvPool`);
        `fixed_envs`: the fixed-pool environments (`tournament.environments`), played in round 1;
        `audit` (default `AUDIT_EPISODES`): replay-audit every played episode."""
        self.cfg = cfg
        self.writer = writer
        self.reader = writer.reader
        self.players = {n: _TrackedPlayer(p, progress) for n, p in players.items()}
        self.sandboxes = sandboxes
        self.fingerprint = fingerprint
        # salts the drawn probes and condition orders: the fingerprint alone is predictable
        self._draw_salt = f"{fingerprint}|{run_draw_secret(writer)}"
        self.fixed_envs = fixed_envs
        self.progress = progress
        self.executor = executor or AsyncioExecutor()
        limits = cfg.concurrency
        # a player's units of work in flight, episodes it solves and environments it authors
        self._player_slots = {name: asyncio.Semaphore(c.units) for name, c in limits.players.items()}
        self._env_slots = asyncio.Semaphore(limits.open_sandboxes)
        self._budget_reached = False
        self._errors = 0
        self.audit = AUDIT_EPISODES if audit is None else audit
        self._caught: set[str] = set(self.reader.nondeterministic_environments())
        self._pending: list[PendingAudit] = []   # this round's played episodes, unaudited
        self._battery_flags: dict[str, str | None] = {}   # env id -> its battery flag, once read

    @functools.cached_property
    def design(self) -> Design:
        """The run's design (`duel.design`): its authoring jobs and the pairs of every
        environment, the one source of the scheduler's work and of every count of it."""
        return Design.of(self.cfg)

    # -- budget -----------------------------------------------------------------------------

    def budget_reached(self) -> bool:
        if not self._budget_reached:
            b = self.cfg.budget
            totals = self.writer.totals()
            if (b.max_usd is not None and totals.cost_usd >= b.max_usd) or (
                    b.max_tokens is not None and totals.tokens >= b.max_tokens):
                self._budget_reached = True
        return self._budget_reached

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> RunResult:
        t = self.cfg.tournament
        await self._validate_fixed_envs()
        await self._audit_unaudited()
        for rnd in range(1, t.rounds + 1):
            self.progress.round = rnd
            if self.budget_reached():
                break
            self.progress.phase = "authoring"
            # workers for the episodes start while the authors write (model-bound time)
            self.sandboxes.expect(self._upcoming_episodes(rnd))
            authored = await self._author_round(rnd)
            envs = [e for e in authored if e.valid]
            if rnd == 1:
                envs = [e for e in self.reader.environments() if e.fixed_pool and e.valid] + envs
            await self._play(self._tasks(envs))
        return RunResult(complete=not self._budget_reached, budget_reached=self._budget_reached,
                         errors=self._errors)

    def _upcoming_episodes(self, rnd: int) -> int:
        """At most how many episodes round `rnd` still plays: `planned_episodes` for the
        round, less those of its recorded environments already finished."""
        recorded = self.reader.environments()
        envs = [e for e in recorded if e.valid and (
            (e.fixed_pool and rnd == 1) or (not e.fixed_pool and e.round == rnd))]
        finished = self.writer.finished_episode_keys()
        done = sum(1 for task in self._tasks(envs) if task.key in finished)
        return self.design.planned_episodes(recorded, [rnd]) - done

    async def _validate_fixed_envs(self) -> None:
        """Validate and record every fixed-pool environment not recorded yet, as an authored
        one is: the same checks, battery and answer check on its benchmark seeds, under the
        run's hint rules and the environment's own turn cap (as `envduels validate` does), its
        verdict recorded as attempt 0. An invalid one is recorded invalid (never played); a
        flagged one is its author's fault. A verdict judged before in a sandbox with the same
        source, seeds, options and validator comes from the verdict cache
        (`envs._verdict_cache`). A sandbox that cannot start leaves the environment unrecorded
        (an error: a resumed run validates it again)."""
        from envduels.envs._verdict_cache import VerdictCache

        todo = [s for s in self.fixed_envs if self.reader.environment(s.id) is None]
        if not todo:
            return
        # checked once per run: an untrusted folder is one warning line, then never read
        cache = None if self.sandboxes.unsafe_no_sandbox else VerdictCache.open()

        async def one(spec: EnvSpec) -> None:
            record = fixed_env_record(spec, run_seed=self.cfg.seed,
                                      seeds_per_env=self.cfg.tournament.seeds_per_env)
            try:
                async with self._env_slots:   # one sandbox at a time per validation
                    verdict = await self._fixed_verdict(record.spec, cache)
            except SandboxDown as err:
                log.error("validating %s failed: a sandbox could not start (%s)", spec.id, err)
                self._errors += 1
                return
            self.writer.put_validation(ValidationRecord(
                spec.id, 0, author=record.author, round=1, valid=verdict.valid,
                reasons=list(verdict.reasons), verdict=verdict.to_json(), reply=""))
            self.writer.put_environment(replace(
                record, spec=replace(record.spec, class_name=record.class_name or verdict.class_name),
                valid=verdict.valid, invalid_reason="; ".join(verdict.reasons) or None))

        await asyncio.gather(*(one(spec) for spec in todo))

    async def _fixed_verdict(self, spec: EnvSpec, cache: VerdictCache | None) -> Verdict:
        """`spec`'s verdict on its benchmark seeds: cached, or judged in the run's sandboxes
        (and cached in `cache`; None where no sandbox confines it). Raises `SandboxDown`."""
        from envduels.envs import _verdict_cache, validate_env
        from envduels.sandbox import SandboxStartError

        t = self.cfg.tournament
        seeds = list(spec.benchmark_seeds)
        # the options and turn cap of `envduels validate`: a verdict one of them judged serves
        # the other; the environment's own turn cap, not the run's (a pool environment has
        # always been played under the run's cap, winnable in it or not)
        options = {"require_oracle": t.require_oracle, "hint_max_chars": t.hint_max_chars,
                   "fixed_pool": True}
        key = _verdict_cache.verdict_key(spec, seeds=seeds, options=options) if cache is not None else ""
        cached = cache.load(key, seeds=seeds) if cache is not None else None
        if cached is not None:
            return cached
        try:
            verdict = await validate_env(spec, self.sandboxes, seeds=seeds,
                                         require_oracle=t.require_oracle,
                                         hint_max_chars=t.hint_max_chars, fixed_pool=True,
                                         probe_seed=self._draw_salt)
        except SandboxStartError as err:   # the host's failure: no verdict on the environment
            raise SandboxDown(err.reason) from None
        if cache is not None:
            cache.store(key, verdict)
        return verdict

    async def _author_round(self, rnd: int) -> list[EnvRecord]:
        from envduels.envs import benchmark_seeds, validate_env

        t = self.cfg.tournament
        jobs = self.design.authoring_jobs_of_round(rnd)
        done = {j.env_id: self.reader.environment(j.env_id) for j in jobs}
        todo = [j for j in jobs if done[j.env_id] is None]
        if todo:
            examples = library_examples(2)
            tables = self.reader.tables() if rnd > 1 and t.history != "none" else None
            prompts = {
                author: author_prompt(self.cfg, examples=examples, history=history_digest(
                    tables, author=author, round_=rnd, mode=t.history,
                    max_chars=t.history_chars) if tables is not None else "")
                for author in {j.author for j in todo}
            }

            async def validate(spec: EnvSpec, *, seeds: list[int]) -> Verdict:
                from envduels.sandbox import SandboxStartError

                try:
                    return await validate_env(spec, self.sandboxes, seeds=seeds,
                                              require_oracle=t.require_oracle,
                                              hint_max_chars=t.hint_max_chars,
                                              max_turns=t.max_turns,
                                              probe_seed=self._draw_salt)
                except SandboxStartError as err:  # the host's failure: the attempt stays unjudged
                    raise SandboxDown(err.reason) from None

            async def one(job: AuthoringSlot) -> EnvRecord | None:
                if self.budget_reached():
                    return None
                async with self._player_slots[job.author]:
                    row = await author_env(
                        job, self.players[job.author], cfg=self.cfg, writer=self.writer,
                        validate=validate, prompt=prompts[job.author],
                        seeds=benchmark_seeds(self.cfg.seed, job.env_id, t.seeds_per_env))
                if row is None and not self.budget_reached():
                    self._errors += 1
                    self.writer.put_authoring_error(job.env_id, author=job.author, round=rnd)
                return row

            async def guarded(job: AuthoringSlot) -> EnvRecord | None:
                try:
                    return await one(job)
                except UserError:
                    raise   # the player's configuration: the run stops with its one line
                except Exception as err:  # last resort: never cancels the other jobs
                    log.error("authoring %s failed unexpectedly: %s", job.env_id, describe(err))
                    self._errors += 1
                    with contextlib.suppress(Exception):   # `status` says it; never raises here
                        self.writer.put_authoring_error(job.env_id, author=job.author, round=rnd)
                    return None

            async for row in self.executor.map(guarded, todo):
                if row is not None:
                    done[row.env_id] = row
        rows = [row for j in jobs if (row := done[j.env_id]) is not None]
        recorded = self.reader.environments()
        self.progress.envs_valid = sum(1 for e in recorded if e.valid)
        self.progress.envs_invalid = len(recorded) - self.progress.envs_valid
        return rows

    def _tasks(self, envs: list[EnvRecord]) -> list[EpisodeTask]:
        """Every episode of `envs` (valid ones), as the design pairs them: per environment, per
        solver, seed and trial, both conditions in the pair's drawn order."""
        tasks = []
        for env in envs:
            spec = env.spec
            cap = self.design.turn_cap(env.max_turns)
            for _solver, pairs in self.design.pairs(env.author, env.benchmark_seeds):
                for pair in pairs:
                    for hinted in self._condition_order(env.env_id, pair.solver, pair.seed,
                                                        pair.trial):
                        key = episode_key(self.fingerprint, env.env_id, env.source_sha256,
                                          pair.solver, pair.seed, pair.trial, hinted)
                        tasks.append(EpisodeTask(
                            key=key, env=spec, solver=pair.solver, seed=pair.seed,
                            trial=pair.trial, hinted=hinted, max_turns=cap, round=env.round,
                            self_play=pair.self_play))
        return tasks

    def _condition_order(self, env_id: str, solver: str, seed: int,
                         trial: int) -> tuple[bool, bool]:
        return condition_order(self._draw_salt, env_id, solver, seed, trial)

    async def _play(self, tasks: list[EpisodeTask]) -> None:
        finished = self.writer.finished_episode_keys()
        todo = [task for task in tasks if task.key not in finished]
        self.progress.begin_solving(planned=len(tasks), done=len(tasks) - len(todo))
        # the plays now, their replays after them: no worker started for nothing
        self.sandboxes.expect(len(todo))
        # the first wave's instances forked at once, not one fork per open in a queue
        wave = todo[:self.cfg.concurrency.max_warm_sandboxes]
        for source, count in Counter(task.env.source for task in wave).items():
            self.sandboxes.prepare([source], instances=count)
        replayed = {task.env.source for task in todo}
        if self.audit and todo and len(replayed) <= PREPARED_REPLAY_SOURCES:
            # the replays' templates and first instances are made while the plays wait on the
            # models, not after the last play (neither has run environment code: no play can
            # reach them); not for many sources, whose replay templates would push the plays'
            # out of a worker's 32 while the plays still need them
            for source, count in Counter(task.env.source for task in wave).items():
                self.sandboxes.prepare([source], replay=True, instances=count)
        async for _ in self.executor.map(self._episode, todo):
            pass
        pending, self._pending = self._pending, []
        await self._audit_batch(pending)

    async def _episode(self, task: EpisodeTask) -> EpisodeResult | None:
        """Play and record one episode, and queue its replay for the round's audit batch.
        Raises only `UserError` (the run must stop) and cancellation."""
        placed: list[object | None] = []
        try:
            result = await self._play_one(task, placed)
        except Exception as err:  # last resort, the host's (`faults`: a UserError stops the run)
            result = EpisodeResult(*ending(err, Phase.HARNESS), 0)
            log.error("episode %s failed unexpectedly: %s", task.key, describe(err))
            self._errors += 1
            try:
                self._record(task, result)
            except Exception as store_err:
                log.error("episode %s not recorded: %s", task.key, describe(store_err))
            self.progress.episode_finished(result.outcome)
            return result
        if result is not None and self.audit and result.outcome in (Outcome.SUCCESS, Outcome.FAILURE):
            self._pending.append(PendingAudit(task.key, task.env, task.seed, task.hinted,
                                              result.transcript, placed[-1] if placed else None))
        return result

    async def _play_one(self, task: EpisodeTask,
                        placed: list[object | None]) -> EpisodeResult | None:
        async with self._player_slots[task.solver], self._env_slots:
            if self.budget_reached():
                return None
            env = task.env
            if env.id in self._caught:
                result = EpisodeResult(*not_played(Flag.NONDETERMINISTIC), 0)
            elif flag := self._battery_flag(env.id):   # its author's fault already: no token spent
                result = EpisodeResult(*not_played(Flag(flag)), 0)
            else:
                result = await play_episode(task, self.players[task.solver],
                                            self._opener(env, placed=placed))
        self._record(task, result)
        if result.outcome == Outcome.ERROR:
            self._errors += 1
        self.progress.episode_finished(result.outcome)
        return result

    def _battery_flag(self, env_id: str) -> str | None:
        """The flag validation's degenerate-policy battery gave `env_id` (`trivial`,
        `hint_is_key`, `fixed_answer`), or None. A verdict is final before its environment is played, so it is
        read once per environment."""
        if env_id not in self._battery_flags:
            found = self.reader.battery_verdicts()
            self._battery_flags.update({e: b.get("flag") if b.get("flag") in BATTERY_FLAGS else None
                                        for e, b in found.items()})
            self._battery_flags.setdefault(env_id, None)
        return self._battery_flags[env_id]

    def _opener(self, env: EnvSpec, *, replay: bool = False, apart_from: object | None = None,
                placed: list[object | None] | None = None) -> Callable[[], Awaitable[EnvLike]]:
        """Opens an instance of `env`; `replay=True` for the audit: an instance that shares no
        template, process or tmpfs with any play (`EnvPool.open`), and in a harness worker
        other than `apart_from`, the one that held its play (`HarnessPool.open`). `placed`
        collects the `holder` of what it opens (None: held by this process)."""
        async def open_env() -> EnvLike:
            instance = await self.sandboxes.open(env.source, class_name=env.class_name,
                                                 max_turns=env.max_turns, replay=replay,
                                                 apart_from=apart_from)
            if placed is not None:
                placed.append(getattr(instance, "holder", None))
            return instance
        return open_env

    def _record(self, task: EpisodeTask, result: EpisodeResult) -> None:
        env = task.env
        self.writer.put_episode(EpisodeRow(
            episode_key=task.key, env_id=env.id, author=env.author, solver=task.solver,
            round=task.round, domain=env.domain, seed=task.seed, trial=task.trial,
            hinted=task.hinted, outcome=result.outcome, reason=result.reason, turns=result.turns,
            self_play=task.self_play, transcript=result.transcript))

    async def _audit(self, key: str, env: EnvSpec, *, seed: int, hinted: bool,
                     transcript: list[Entry], played_in: object | None = None) -> None:
        """Replay one played episode and record the verdict; a sandbox that cannot start
        leaves it unaudited (an error, retried on resume)."""
        opener = self._opener(env, replay=True, apart_from=played_in)
        try:
            async with self._env_slots:
                verdict = await replay_episode(transcript, seed=seed,
                                               hint=env.hint if hinted else None,
                                               open_env=opener)
                if verdict.faulted:
                    # a fault where the play had none may be the host's (a deadline missed
                    # under load): condemn the environment only if a second replay agrees
                    verdict = await replay_episode(transcript, seed=seed,
                                                   hint=env.hint if hinted else None,
                                                   open_env=opener)
        except ReplayHostError as err:   # the host's: no verdict, audited again on resume
            log.error("episode %s not audited: %s", key, err)
            self._errors += 1
            return
        except UserError:
            raise   # the user's input or machine: the run stops with its one line
        except Exception as err:   # last resort: a harness bug ends no session, blames no one
            log.error("episode %s not audited: %s", key, describe(err))
            self._errors += 1
            return
        try:
            self.writer.put_audit(key, env.id, passed=verdict.passed, detail=verdict.detail)
        except Exception as err:
            log.error("episode %s: audit not recorded: %s", key, describe(err))
            self._errors += 1
            return
        if not verdict.passed and env.id not in self._caught:
            self._caught.add(env.id)
            log.warning("environment %s is nondeterministic: %s", env.id, verdict.detail)

    async def _audit_batch(self, pending: list[PendingAudit]) -> None:
        """Replay `pending` (played episodes) in an order drawn by `_AUDIT_ORDER`. Called once
        the round's plays are over, so no replay runs between two plays, or right after its
        own play because it is next in line."""
        if not pending:
            return
        order = list(pending)
        _AUDIT_ORDER.shuffle(order)
        self.sandboxes.expect(len(order))

        async def one(item: PendingAudit) -> None:
            await self._audit(item.key, item.env, seed=item.seed, hinted=item.hinted,
                              transcript=item.transcript, played_in=item.played_in)

        # the executor starts them in this order; the sandbox slots let them in first come,
        # first served
        async for _ in self.executor.map(one, order):
            pass

    async def _audit_unaudited(self) -> None:
        """Audit what an earlier session played but did not audit (killed in between, or a
        run database from before audits existed)."""
        if not self.audit:
            return
        specs = {e.env_id: e.spec for e in self.reader.environments()}
        await self._audit_batch([
            PendingAudit(ep.episode_key, specs[ep.env_id], ep.seed, ep.hinted, ep.transcript)
            for ep in self.writer.unaudited_episodes() if ep.env_id in specs])
