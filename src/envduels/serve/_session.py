"""One served session: a sandboxed environment instance and a duel `Episode`, and the hub that
holds every session's sandbox and every WebSocket connection (capacity, idle reaping).

A session runs one episode at a time; every reset starts a fresh sandboxed instance (the
previous one is killed), so nothing an environment did in one episode reaches the next, and no
two sessions ever share a process. An episode that ends frees its sandbox at once.

Idle reaping frees everything an idle client holds: its sandbox, and over the WebSocket its
connection (closed with `CLOSE_IDLE` and the reason, which frees OpenEnv's slot), whether or not
it ever reset; an HTTP episode reaped answers its next `/step` with 410 and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import TYPE_CHECKING, TypedDict

from fastapi import HTTPException

from envduels._text import valid_text
from envduels.duel.faults import Phase, fail, session_ended
from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import FORMAT_ERROR, SYSTEM_PROMPT, Episode, turn_cap
from envduels.sandbox import (
    EnvInstance,
    EnvPool,
    HarnessCapacity,
    HarnessPool,
    RemoteEnvInstance,
    SandboxLimits,
    sandbox_pool,
)
from envduels.serve._connection import Connection
from envduels.serve._descriptors import Descriptors
from envduels.serve._shared import Held, Place

if TYPE_CHECKING:
    from envduels.serve._catalog import Served

log = logging.getLogger("envduels.serve")

EXPIRED_REMEMBERED = 4096
"""How many reaped HTTP episode ids the hub remembers, to answer their next `/step` with why."""


class Fields(TypedDict, total=False):
    """A session's answer to a reset or a step: the fields of `DuelObservation` (see there)."""

    text: str
    system: str
    turn: int
    max_turns: int
    env_id: str
    seed: int | None
    hint: int
    episode_id: str | None
    panel: dict[str, float | None] | None
    done: bool
    reward: float
    format_error: bool
    success: bool


class ServeError(HTTPException):
    """A request the server refuses or an episode that ended badly: one line for the client.

    Over HTTP it is the response (`status` and `{"detail": line}`); over the WebSocket,
    OpenEnv's error message (`str()` of it is the line)."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(status_code=status, detail=line)
        self.line = line

    def __str__(self) -> str:
        return self.line


class Hub:
    """Every session's sandbox in this server process: one `EnvPool` per distinct limits, at
    most `max_sessions` instances alive at once in all the server's processes together
    (`place`), every WebSocket connection, and a reaper that ends a session or connection idle
    for `idle_timeout_s`. Bound to the event loop of its first `open` or `connect` (the
    server's)."""

    def __init__(self, served: dict[str, Served], *, max_sessions: int, idle_timeout_s: float,
                 unsafe_no_sandbox: bool = False, place: Place | None = None,
                 harness_workers: int = 0) -> None:
        self.served = served
        self.max_sessions = max_sessions
        self.place = place or Place.alone(max_sessions)
        # 0: the sandboxes in this process (what `serve` runs); N: in N harness worker
        # processes behind this one (one front routing to them: measured in bench_serve.py)
        self.harness_workers = harness_workers
        self.idle_timeout_s = idle_timeout_s
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.sessions: set[ServedSession] = set()
        self.http: dict[str, ServedSession] = {}
        self.connections: set[Connection] = set()
        self._expired: OrderedDict[str, str] = OrderedDict()   # HTTP episode id -> why
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pools: dict[SandboxLimits, EnvPool | HarnessPool] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.descriptors = Descriptors()
        self._closed = False

    def live(self) -> int:
        """Sandboxes alive or being opened now in this server process."""
        return self.place.held(Held.SANDBOXES)

    def spawn(self, close: Coroutine[object, None, None]) -> None:
        """Run `close` on the hub's loop, from any thread, keeping the task referenced until
        it is done (the event loop holds tasks weakly)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            close.close()
            return

        def start() -> None:
            task = loop.create_task(close)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            start()
        else:
            loop.call_soon_threadsafe(start)

    def admit(self) -> None:
        """Claim one of the `max_sessions` places for the sandbox the next `open` starts (which
        gives it back when none could start). ServeError 503 at `max_sessions` or while
        shutting down: no episode begins."""
        if self._closed:
            raise ServeError(503, "the server is shutting down")
        self._start_reaper()
        if not self.place.claim(Held.SANDBOXES):
            everywhere = f" (its {self.place.count} processes together)" \
                if self.place.count > 1 else ""
            raise ServeError(503, f"the server is at --max-sessions {self.max_sessions} "
                                  f"sandboxes{everywhere}: end another episode or session, or "
                                  "try again later")

    async def open(self, session: ServedSession, served: Served
                   ) -> EnvInstance | RemoteEnvInstance:
        """A fresh sandboxed instance of `served` for `session` (whose previous one is closed),
        in the place `admit` claimed, which it holds until `release`d. HarnessCapacity when
        this process is short of descriptors; the pool's faults when no sandbox could start."""
        try:
            if not self.descriptors.room():
                raise HarnessCapacity("the harness is out of capacity and started no sandbox: "
                                      + self.descriptors.why())
            pool = self._pools.get(served.limits)
            if pool is None:
                pool = self._pools[served.limits] = sandbox_pool(
                    served.limits, workers=self.harness_workers,
                    unsafe_no_sandbox=self.unsafe_no_sandbox, warm=min(2, self.max_sessions),
                    max_warm=self.max_sessions)
            self.sessions.add(session)
            spec = served.spec
            return await pool.open(spec.source, class_name=spec.class_name,
                                   max_turns=spec.max_turns)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give back the place of a sandbox that `open` returned, once it is closed."""
        self.place.release(Held.SANDBOXES)

    def connect(self, connection: Connection) -> None:
        """Track a new WebSocket `connection` (reaped when idle, reset or not)."""
        self._start_reaper()
        self.connections.add(connection)

    def disconnect(self, connection: Connection) -> None:
        self.connections.discard(connection)

    def expired(self, episode_id: str) -> str | None:
        """Why the HTTP episode `episode_id` was reaped, if it was (and is remembered)."""
        return self._expired.get(episode_id)

    def forget_expired(self, episode_id: str) -> None:
        self._expired.pop(episode_id, None)

    def remember_expired(self, episode_id: str, why: str) -> None:
        self._expired[episode_id] = why
        self._expired.move_to_end(episode_id)
        while len(self._expired) > EXPIRED_REMEMBERED:
            self._expired.popitem(last=False)

    def _start_reaper(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self._reaper is None:
            self._reaper = self.loop.create_task(self._reap())

    async def _reap(self) -> None:
        """End what has been idle past the timeout: a WebSocket connection (its session's
        sandbox killed, the socket closed with the reason) and an HTTP session (its sandbox
        killed; its next `/step` hears why)."""
        interval = max(0.2, min(self.idle_timeout_s / 4, 10.0))
        why = f"it was idle for more than {self.idle_timeout_s:g} s"
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            on_socket = {s.connection: s for s in self.sessions if s.connection is not None}
            for connection in list(self.connections):
                session = on_socket.get(connection)
                last = max(connection.last_active, session.last_active if session else 0.0)
                if now - last > self.idle_timeout_s and not (session and session.busy):
                    if session is not None:
                        await session.expire(why)
                    connection.expire(f"session expired: {why}; reconnect and reset to "
                                      "start another")
            for session in list(self.sessions):
                if session.connection is None and not session.busy \
                        and now - session.last_active > self.idle_timeout_s:
                    await session.expire(why)

    async def aclose(self) -> None:
        """Kill every sandbox; the hub refuses new ones."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        for session in list(self.sessions):
            await session.close()
        for pool in self._pools.values():
            await pool.aclose()


class ServedSession:
    """One client's episodes, one at a time, each in a fresh sandbox; see the module docstring.

    Calls are serialized. `reset` and `step` return the observation's fields as a dict; bad
    requests and ended episodes raise ServeError with one line naming the problem and the fix.
    """

    def __init__(self, hub: Hub, *, episode_id: str | None = None,
                 connection: Connection | None = None) -> None:
        self.hub = hub
        self.episode_id = episode_id
        self.connection = connection   # its WebSocket; None over HTTP
        self.instance: EnvInstance | RemoteEnvInstance | None = None
        self.episode: Episode | None = None
        self.served: Served | None = None
        self.seed: int | None = None
        self.hint = 0
        self.ended: str | None = None   # why the last episode ended early (fault, idle)
        self.last_active = time.monotonic()
        self.busy = False
        self._lock = asyncio.Lock()

    def fields(self, text: str) -> Fields:
        """The observation of the episode now, with `text`; the caller adds what it knows."""
        assert self.served is not None and self.episode is not None
        return Fields(text=text, turn=self.episode.turn, max_turns=self.episode.max_turns,
                      env_id=self.served.id, seed=self.seed, hint=self.hint,
                      episode_id=self.episode_id, panel=self.served.panel,
                      done=self.episode.done)

    async def reset(self, served: Served, *, seed: int, hint: int,
                    max_turns: int | None) -> Fields:
        """Start an episode of `served` on `seed` at hint level `hint` in a fresh sandbox;
        the observation's `text` is the duel's first solver turn."""
        async with self._lock:
            self.busy, self.last_active = True, time.monotonic()
            try:
                await self._close_instance()
                episode = Episode(turn_cap(served.max_turns, max_turns),
                                  hint=served.hint_text(hint))
                self.episode = None
                self.hub.admit()   # at --max-sessions: ServeError 503, and no episode begins
                self.served, self.seed, self.hint, self.ended = served, seed, hint, None
                self.episode = episode
                try:
                    self.instance = await self.hub.open(self, served)
                    observation, _info = await self.instance.reset(seed)
                except Exception as err:
                    return await self._fault(err, Phase.START)
                return self.fields(episode.start(observation)) | {"system": SYSTEM_PROMPT}
            finally:
                self.busy, self.last_active = False, time.monotonic()

    async def step(self, message: str) -> Fields:
        """Play the model's whole reply `message` as this turn, by the duel's rules."""
        async with self._lock:
            self.busy, self.last_active = True, time.monotonic()
            try:
                return await self._step(valid_text(message))
            finally:
                self.busy, self.last_active = False, time.monotonic()

    async def _step(self, message: str) -> Fields:
        episode = self.episode
        if self.ended is not None:
            raise ServeError(410, f"this session's episode ended because {self.ended}; "
                                  "reset to start another")
        if episode is None:
            raise ServeError(409, "no episode is running: reset first")
        if episode.done:
            raise ServeError(409, f"the episode is over ({episode.outcome}: {episode.reason}); "
                                  "reset to start another")
        action = episode.act(message)
        if action is None:
            if episode.done:
                await self._close_instance()
            return self.fields(FORMAT_ERROR) | {"reward": 0.0, "format_error": True}
        assert self.instance is not None
        try:
            result = await self.instance.step(action)
        except Exception as err:
            return await self._fault(err, Phase.STEP)
        upcoming = episode.observe(result.observation, result.reward, result.terminated,
                                   result.truncated)
        if episode.done:
            await self._close_instance()
        text = upcoming if upcoming is not None else result.observation
        return self.fields(text) | {"reward": result.reward, "success": episode.success}

    async def _fault(self, err: BaseException, phase: Phase) -> Fields:
        """End the episode for a failure of its environment (or sandbox) in `phase`, as
        `duel.faults` decides: this client gets the error, no one else notices. No sandbox
        for a reset (the host's) is a 503 the client may simply retry."""
        episode = self.episode
        assert episode is not None and self.served is not None
        try:
            fault = fail(episode, err, phase)
        finally:   # whatever it was, this session's sandbox is gone
            await self._close_instance()
        if episode.outcome is Outcome.ERROR and phase is Phase.START:
            raise ServeError(503, f"no sandbox could start ({fault}); try again")
        self.ended = episode.reason
        log.warning("session on %s seed %s ended: %s", self.served.id, self.seed, episode.reason)
        raise ServeError(503 if episode.outcome is Outcome.ERROR else 502,
                         f"{episode.reason}; the episode ended ({episode.outcome}), reset to "
                         "start another")

    async def expire(self, why: str) -> None:
        """End this session from outside (idle reaping): a running episode ends, its sandbox
        is killed, and the client's next step hears why (over HTTP, from the hub)."""
        if self.episode is not None and not self.episode.done:
            self.episode.end(*session_ended(why))
            self.ended = why
        if self.connection is None and self.episode_id is not None:
            self.hub.remember_expired(self.episode_id, why)
        await self.close()

    async def _close_instance(self) -> None:
        instance, self.instance = self.instance, None
        if instance is not None:
            self.hub.release()
            with contextlib.suppress(Exception):
                await instance.close(wait=False)
        # an HTTP episode that ended is forgotten: its id answers 404 from now on
        if self.episode_id is not None and self.episode is not None and self.episode.done \
                and self.hub.http.get(self.episode_id) is self:
            del self.hub.http[self.episode_id]

    async def close(self) -> None:
        """Kill the sandbox and forget the session; idempotent."""
        await self._close_instance()
        self.hub.sessions.discard(self)
        if self.episode_id is not None and self.hub.http.get(self.episode_id) is self:
            del self.hub.http[self.episode_id]
