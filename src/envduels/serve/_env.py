"""The OpenEnv `Environment` that `envduels serve` hands to OpenEnv's server, and its models.

OpenEnv's server makes one `DuelEnvironment` per WebSocket connection (a session: its own
sandbox, episode after episode) and one per HTTP request. OpenEnv's HTTP `/reset` and `/step`
are stateless (each request gets a fresh environment, closed after it), so over HTTP an episode
lives in the hub under its `episode_id`: `/reset` returns one (or takes the caller's), `/step`
passes it back. Everything a client sends is checked here before a sandbox sees it.
"""

from __future__ import annotations

import contextvars
import re
import uuid
from typing import TYPE_CHECKING

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import BaseModel, Field

from envduels.duel.protocol import Entry
from envduels.serve._connection import CONNECTION
from envduels.serve._session import Hub, ServeError, Session

if TYPE_CHECKING:
    from envduels.serve._catalog import Served

# Set by the app's middleware for each request: "http" or "websocket" (ASGI scope types).
TRANSPORT: contextvars.ContextVar[str] = contextvars.ContextVar("envduels_transport",
                                                                default="websocket")
SEED_RANGE = (-(2**63), 2**63 - 1)   # what an environment's `reset(seed)` is promised: 64 bits
RESET_KEYS = ("env_id", "seed", "hint", "max_turns", "episode_id")
STEP_KEYS = ("episode_id", "timeout_s", "request_id")
_EPISODE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class DuelAction(Action):
    """One turn: the model's whole reply. The environment receives its last balanced
    `\\boxed{...}`, wrapper included; a reply without one costs the turn."""

    message: str = Field(description="The model's whole reply for this turn.")


class Panel(BaseModel):
    """The panel's results on an environment, from its export or run (None: not measured)."""

    no_hint_rate: float | None = None
    hinted_rate: float | None = None
    learnability: float | None = None


class DuelObservation(Observation):
    """What a solver sees next, and where the episode stands. `text` after a reset is the
    duel's first solver turn (`Hint: ...` first when hinted); after a step, the solver's next
    user turn (the format-error message when the reply had no box), or, once the episode ended
    on the environment's word, its last observation. `reward` is the environment's; `success`
    is the duel's (terminated with reward > 0)."""

    text: str = ""
    system: str = Field(default="", description="After a reset: the duel's solver system "
                        "prompt, to send as the system message (empty after a step).")
    turn: int = 0
    max_turns: int = 0
    env_id: str = ""
    seed: int | None = None
    hint: int = 0
    episode_id: str | None = None
    format_error: bool = False
    success: bool = False
    panel: Panel | None = None


class DuelState(State):
    """A session's episode: where it stands and its transcript, as a duel records it."""

    env_id: str | None = None
    seed: int | None = None
    hint: int = 0
    turn: int = 0
    max_turns: int = 0
    done: bool = False
    outcome: str | None = None
    reason: str = ""
    transcript: list[Entry] = Field(default_factory=list)


def _unknown(kwargs: dict[str, object], allowed: tuple[str, ...], what: str) -> None:
    extra = sorted(k for k in kwargs if k not in allowed)
    if extra:
        raise ServeError(400, f"unknown {what} field(s) {', '.join(map(repr, extra[:5]))}; "
                              f"{what} takes {', '.join(allowed)}")


def _int(value: object, name: str, low: int, high: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServeError(400, f"{name} must be an integer from {low} to {high} (got "
                              f"{_short(value)}); {fix}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _episode_id(value: object) -> str:
    if not isinstance(value, str) or _EPISODE_ID.fullmatch(value) is None:
        raise ServeError(400, f"episode_id must be 1-128 letters, digits or _.:- (got "
                              f"{_short(value)}); omit it and /reset picks one")
    return value


class DuelEnvironment(Environment[DuelAction, DuelObservation, DuelState]):
    """The served environments behind OpenEnv's interface, with the duel's rules.

    `reset(env_id=..., seed=..., hint=0|1|2, max_turns=..., episode_id=...)`: `env_id` may be
    left out when one environment is served; `seed` defaults to 0 (as `envduels play`);
    `max_turns` only lowers the environment's cap. `step(DuelAction(message=REPLY))`.
    Each session is its own sandbox, so concurrent sessions are safe.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, hub: Hub) -> None:
        super().__init__()
        self._hub = hub
        self._session: Session | None = None   # this WebSocket connection's own

    # -- OpenEnv's interface ------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: object) -> DuelObservation:
        raise ServeError(400, "this server resets asynchronously; use /reset or the WebSocket")

    def step(self, action: DuelAction, timeout_s: float | None = None,
             **kwargs: object) -> DuelObservation:
        raise ServeError(400, "this server steps asynchronously; use /step or the WebSocket")

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          **kwargs: object) -> DuelObservation:
        _unknown(kwargs, RESET_KEYS, "reset")
        served = self._served(kwargs.get("env_id"))
        seed = _int(0 if seed is None else seed, "seed", *SEED_RANGE, "pass seed=N")
        hint = _int(kwargs.get("hint", 0), "hint", 0, 2,
                    "0 is no hint, 1 the hint (hint_1 of a graded pair), 2 hint_2")
        if hint and served.hint_text(hint) is None:
            raise ServeError(400, f"environment {served.id!r} has no hint of level {hint}; "
                                  f"it offers hint levels {served.hint_levels()}")
        asked = kwargs.get("max_turns")
        max_turns = None if asked is None else _int(asked, "max_turns", 1, 2**31 - 1,
                                                    "it only lowers the environment's own cap")
        session = self._session_for_reset(episode_id)
        try:
            fields = await session.reset(served, seed=seed, hint=hint, max_turns=max_turns)
        except ServeError:
            if session.episode_id is not None and session is not self._session:
                await session.close()   # an HTTP episode that never began holds nothing
            raise
        return DuelObservation(**fields)

    async def step_async(self, action: DuelAction, timeout_s: float | None = None,
                         **kwargs: object) -> DuelObservation:
        _unknown(kwargs, STEP_KEYS, "step")
        if TRANSPORT.get() == "http":
            if "episode_id" not in kwargs:
                raise ServeError(400, "over HTTP, /step needs the episode_id that /reset "
                                      "returned (or use the WebSocket /ws, where a connection "
                                      "is a session)")
            episode_id = _episode_id(kwargs["episode_id"])
            session = self._hub.http.get(episode_id)
            if session is None and (why := self._hub.expired(episode_id)) is not None:
                raise ServeError(410, f"episode {episode_id!r} expired: {why}; /reset to "
                                      "start another")
            if session is None:
                raise ServeError(404, f"no running episode {episode_id!r}: it ended or never "
                                      "began; /reset it")
        else:
            session = self._session
            if session is None:
                # OpenEnv's client reconnects silently once the server closed its socket: a
                # trainer that sat idle meets this on its next step, so say why it may be here
                raise ServeError(409, "no episode is running: reset first (a session idle for "
                                      f"more than {self._hub.idle_timeout_s:g} s is ended and "
                                      "its WebSocket closed; OpenEnv's client then connects "
                                      "afresh)")
        message = action.message
        if not isinstance(message, str):   # pydantic checked it; a caller in Python may not
            raise ServeError(400, "step needs {\"message\": REPLY} with the reply as a string")
        return DuelObservation(**await session.step(message))

    @property
    def state(self) -> DuelState:
        session = self._session
        episode = session.episode if session is not None else None
        if session is None or episode is None or session.served is None:
            return DuelState()
        return DuelState(episode_id=session.episode_id, step_count=episode.turn,
                         env_id=session.served.id, seed=session.seed, hint=session.hint,
                         turn=episode.turn, max_turns=episode.max_turns, done=episode.done,
                         outcome=episode.outcome, reason=episode.reason,
                         transcript=list(episode.transcript))

    def get_metadata(self) -> EnvironmentMetadata:
        ids = list(self._hub.served)
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        return EnvironmentMetadata(
            name="envduels", version=_version(),
            description=("EnvDuels environments played by the duel's rules, each session in "
                         f"its own sandbox: {shown}. GET /environments lists them."))

    def close(self) -> None:
        """Kill this connection's sandbox. OpenEnv may call it from a worker thread."""
        session, self._session = self._session, None
        if session is not None:
            self._hub.spawn(session.close())

    # -- helpers --------------------------------------------------------------------------

    def _served(self, env_id: object) -> Served:
        served = self._hub.served
        if env_id is None:
            if len(served) == 1:
                return next(iter(served.values()))
            raise ServeError(400, f"reset needs env_id: one of {_ids(served)} "
                                  "(GET /environments lists them)")
        if not isinstance(env_id, str) or env_id not in served:
            raise ServeError(400, f"unknown env_id {_short(env_id)}: choose one of "
                                  f"{_ids(served)} (GET /environments lists them)")
        return served[env_id]

    def _session_for_reset(self, episode_id: object) -> Session:
        if TRANSPORT.get() == "http":
            key = uuid.uuid4().hex if episode_id is None else _episode_id(episode_id)
            self._hub.forget_expired(key)
            session = self._hub.http.get(key)
            if session is None:
                session = self._hub.http[key] = Session(self._hub, episode_id=key)
            return session
        if self._session is None:
            self._session = Session(self._hub, connection=CONNECTION.get())
        if episode_id is not None:
            self._session.episode_id = _episode_id(episode_id)
        return self._session


def _ids(served: dict[str, Served]) -> str:
    ids = list(served)
    return ", ".join(ids[:8]) + (f" ({len(ids)} in all)" if len(ids) > 8 else "")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envduels")
    except PackageNotFoundError:
        return "0"


__all__ = ["DuelAction", "DuelEnvironment", "DuelObservation", "DuelState", "Panel"]
