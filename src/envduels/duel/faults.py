"""What a fault means for an episode, decided in one place: the failure vocabulary.

Two rules live here, and nowhere else decides an outcome for a fault or spells a reason:

**A fault during an episode** (SPEC §4). Whoever raises a failure says what it is by its class,
one of the families below; `ending(err, phase)` says what it means for the episode, in one
line per family and phase, and every episode driver asks it, in one `except` each (the
engine's `solving.play_episode` and its scheduler, hence `envduels run` and `envduels play`;
the Gym adapter; `envduels serve`; the training rollout; the replay audit):

| the failure | raised by | outcome, reason |
|---|---|---|
| `HostFault`: no sandbox could start, a node was lost | `sandbox.SandboxStartError` | `error`, "sandbox error: R" (played again on resume) |
| `EnvironmentFault`: the environment raised, timed out, broke a limit | `sandbox.EnvFault` | `incomplete`, "environment failed to start: R" / "environment fault: R" |
| any other exception while opening or stepping the environment (a value the parent could not take) | | `incomplete`, as an environment fault |
| `ContextFull`: the conversation no longer fits | `players.ContextOverflow` | `failure`, "context overflow: M" (the solver's) |
| `ContentRefusal`: a provider refused the environment's text | `players.ContentRefused` | `incomplete`, "content refused: M" |
| `ProviderFault`: the provider kept failing | `players.ProviderError` | `error`, "provider error: M" |
| any other exception asking the solver | | `error`, "solver call failed: E" |
| any other exception in the harness around an episode | | `error`, "harness error: E" |
| `OutOfTime`: the harness's wall budget for the episode ran out | the training rollout | `incomplete`, its reason |
| a failure whose class says `stops_run = True`: the user's configuration or machine | `errors.UserError` | none: raised again, the run stops |

A `BaseException` that is no `Exception` (Ctrl-C, cancellation, `play --human` closing its
input) is never an outcome either: it passes through every driver. `fail(episode, err, phase)`
ends a `duel.protocol.Episode` as `ending` says, logging a failed step's fault first.

**The author's fault** (SPEC §4, §11, §13): an environment the replay audit caught, one
validation's degenerate-policy battery beat, or one whose hinted wins give the same answer on
every seed, is its author's fault in every episode (`author_faults`, `judged`). Asked by
everything that reads a run: the run database's analysis tables (`store.Tables`, whose
episodes read judged) and the analysis's flags (`analysis.metrics.environment_flags`). It reads
typed facts, the audits' `AuditState`, the battery's `Flag` and what the hint changed in the
rescues as played (`duel.answers`), never a reason text.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, NamedTuple

from envduels.duel.answers import Answer, OracleAnswers, fixed_in_play
from envduels.duel.outcomes import BATTERY_FLAGS, AuditState, Flag, Outcome
from envduels.duel.protocol import Episode

# -- the families of failure ------------------------------------------------------------------


class EpisodeFault(Exception):
    """A failure with a `reason` meant for whoever is at fault (one line) and a `detail` for
    diagnostics (a short traceback or output tail)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class EnvironmentFault(EpisodeFault):
    """The environment misbehaved: it raised, timed out, broke a limit, violated the protocol
    or exited. Its author's fault: the episode is `incomplete`."""


class HostFault(EpisodeFault):
    """The host failed, not the environment: no sandbox could start before any environment
    code ran, or the machine running one was lost. The episode is an `error`, played again on
    resume, and never blamed on the author."""


class OutOfTime(EpisodeFault):
    """The harness's wall budget for the episode ran out (the training rollout's
    `episode_wall_s`): `incomplete`, with the budget's own reason (`OutOfTime.of`)."""

    @classmethod
    def of(cls, wall_s: float) -> OutOfTime:
        """The budget of `wall_s` seconds of environment time ran out: the harness's limit,
        said as such."""
        return cls(f"harness limit: the per-episode wall budget (episode_wall_s={wall_s:g} s "
                   "of environment time) ran out")


class ContextFull(Exception):
    """The conversation no longer fits the solver's context: the solver's `failure`."""


class ContentRefusal(Exception):
    """A provider refused the conversation for what it says. In an episode that text is the
    environment's, so the episode is `incomplete`, its author's fault."""


class ProviderFault(Exception):
    """The provider still failed after every retry: the episode is an `error` (played again)."""


# -- what a failure means for an episode ----------------------------------------------------


class Phase(StrEnum):
    """Where in an episode a failure happened."""

    START = "start"
    """Opening the environment's instance and its reset."""
    SOLVER = "solver"
    """Asking the solver (or the policy) for its reply."""
    STEP = "step"
    """Stepping the environment with the action."""
    HARNESS = "harness"
    """Anywhere else in the harness around an episode (the scheduler's last resort)."""
    REPLAY = "replay"
    """Replaying a played episode's actions in a fresh instance (the replay audit)."""


class Ending(NamedTuple):
    """How an episode ends for a failure: `outcome` and its one-line `reason` (unpack it into
    `Episode.end`)."""

    outcome: Outcome
    reason: str


START_FAILED = "environment failed to start"
ENVIRONMENT_FAULT = "environment fault"
SANDBOX_ERROR = "sandbox error"
CONTEXT_OVERFLOW = "context overflow"
CONTENT_REFUSED = "content refused"
PROVIDER_ERROR = "provider error"
SOLVER_CALL_FAILED = "solver call failed"
HARNESS_ERROR = "harness error"
SESSION_ENDED = "session ended"
REPLAY_FAULTED = "the replay faulted"
REPLAY_FAILED = "the replay failed"

DESCRIBE_MAX_CHARS = 200
"""The longest description of an unexpected exception in a reason."""


def one_line(text: object, limit: int) -> str:
    """`text` as one line: every run of whitespace a single space, cut to `limit` characters
    with a final "…" when longer. The one helper everything that shows text in one line asks
    (reasons, log lines, labels; re-exported by `envduels._text`)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def describe(err: BaseException) -> str:
    """An unexpected exception in one line: its class and message."""
    return one_line(f"{type(err).__name__}: {err}", DESCRIBE_MAX_CHARS)


def ending(err: BaseException, phase: Phase, *, turn: int = 0) -> Ending:
    """What `err`, raised in `phase` of an episode, means for it (the table in the module
    docstring); `turn` is the replay's turn (`Phase.REPLAY`). Raises `err` again when it is no
    episode's to decide: one whose class says `stops_run` (`errors.UserError`: the user's input or
    machine; a content refusal is still the environment's), or a `BaseException` that is
    no `Exception`."""
    if isinstance(err, HostFault):
        return Ending(Outcome.ERROR, f"{SANDBOX_ERROR}: {err.reason}")
    if isinstance(err, OutOfTime):
        return Ending(Outcome.INCOMPLETE, err.reason)
    if isinstance(err, ContentRefusal):   # before stops_run: a refusal is also a bad request
        return Ending(Outcome.INCOMPLETE, f"{CONTENT_REFUSED}: {err}")
    if getattr(err, "stops_run", False) is True or not isinstance(err, Exception):
        raise err
    what = err.reason if isinstance(err, EnvironmentFault) else describe(err)
    if phase is Phase.REPLAY:
        if isinstance(err, EnvironmentFault):
            return Ending(Outcome.INCOMPLETE,
                          f"{REPLAY_FAULTED} at turn {turn} where the play did not ({what})")
        return Ending(Outcome.INCOMPLETE, f"{REPLAY_FAILED}: {what}")
    if phase is Phase.START:
        return Ending(Outcome.INCOMPLETE, f"{START_FAILED}: {what}")
    if phase is Phase.STEP:
        return Ending(Outcome.INCOMPLETE, f"{ENVIRONMENT_FAULT}: {what}")
    if isinstance(err, ContextFull):
        return Ending(Outcome.FAILURE, f"{CONTEXT_OVERFLOW}: {err}")
    if isinstance(err, ProviderFault):
        return Ending(Outcome.ERROR, f"{PROVIDER_ERROR}: {err}")
    if phase is Phase.SOLVER:
        return Ending(Outcome.ERROR, f"{SOLVER_CALL_FAILED}: {what}")
    return Ending(Outcome.ERROR, f"{HARNESS_ERROR}: {what}")


def fail(episode: Episode, err: BaseException, phase: Phase) -> str:
    """End `episode` for `err`, raised in `phase`, as `ending` decides (a failed step is logged
    first, with its fault: `Episode.step_failed`); returns the fault in one line. Raises `err`
    again when no episode decides it (a `UserError`, Ctrl-C, cancellation)."""
    outcome, reason = ending(err, phase)
    fault = err.reason if isinstance(err, EpisodeFault) else describe(err)
    if phase is Phase.STEP:
        episode.step_failed(fault)
    episode.end(outcome, reason)
    return fault


def session_ended(why: str) -> Ending:
    """An episode a server ended from outside (its session reaped for idleness): the solver
    stopped playing, a `failure`."""
    return Ending(Outcome.FAILURE, f"{SESSION_ENDED}: {why}")


# -- the author's fault -----------------------------------------------------------------------

AUDIT_REASON = "replay audit"
"""Every episode the replay audit holds against its environment has a reason starting with this:
the episode that did not replay (`"replay audit: DETAIL"`, written by the store with the audit)
and every other played episode of that environment (`AuthorFault.reason`)."""
BATTERY_REASON = "degenerate-policy battery"
"""Every played episode of an environment the battery flagged reads as `incomplete` with a reason
starting with this."""
PLAY_REASON = "hinted wins in play"
"""Every played episode of an environment flagged `fixed_answer` from its rescues in play (not
by validation) reads as `incomplete` with a reason starting with this."""

Source = Literal["audit", "battery", "play"]
"""Who found an author's fault: the replay audit, validation's battery, the hinted wins."""


@dataclass(frozen=True)
class AuthorFault:
    """Why every episode of one environment is its author's fault: the flag, its one-line detail
    (the audit's first difference, the battery's finding, the hinted wins' shared answer) and
    who found it."""

    flag: Flag
    detail: str
    source: Source = "battery"

    @property
    def reason(self) -> str:
        """The reason a played episode of the environment reads with once judged."""
        if self.source == "audit":
            return f"{AUDIT_REASON}: the environment is nondeterministic ({self.detail})"
        prefix = PLAY_REASON if self.source == "play" else BATTERY_REASON
        return f"{prefix}: {self.flag}: {self.detail}"


def oracle_answers(found: object) -> OracleAnswers:
    """What validation's answer check recorded in the battery's findings (`answers`: seed, as
    text, -> the digest of the oracle's final answer there); no evidence for findings without
    it (a database from before the check, an environment without an oracle)."""
    recorded = found.get("answers") if isinstance(found, Mapping) else None
    if not isinstance(recorded, Mapping):
        return OracleAnswers()
    by_seed: dict[int, str] = {}
    for seed, digest in recorded.items():
        if isinstance(seed, str) and seed.isdigit() and isinstance(digest, str):
            by_seed[int(seed)] = digest
    return OracleAnswers(by_seed)


def author_faults(audits: Iterable[tuple[str, str, str | None]],
                  battery: Mapping[str, object],
                  played: Mapping[str, Mapping[int, Collection[Answer]]] | None = None,
                  ) -> dict[str, AuthorFault]:
    """env_id -> its `AuthorFault`, for every environment that is its author's fault; one flag
    per environment, the first of:

    `audits`: (env_id, state, detail) of the recorded replay audits, oldest first; an
    environment with a `mismatch` is `nondeterministic` with the detail of its first one.
    `battery`: env_id -> the battery's findings (`Verdict.battery`: a mapping whose `flag` is
    `trivial`, `hint_is_key`, `fixed_answer` or None).
    `played`: env_id -> seed -> what the hint changed in the panel's rescues as played, before
    any judging (`duel.answers.rescue_answers`): `fixed_answer` when `duel.answers.fixed_in_play`
    says one answer wins too many seeds, given the oracle's answers the battery's findings
    recorded per seed. What the
    battery did not find never clears it: a battery that lost before it could use the hint
    proves nothing.
    """
    out: dict[str, AuthorFault] = {}
    for env_id, state, detail in audits:
        if state == AuditState.MISMATCH and env_id not in out:
            out[env_id] = AuthorFault(Flag.NONDETERMINISTIC, str(detail), "audit")
    for env_id, found in battery.items():
        if not isinstance(found, Mapping) or env_id in out:
            continue
        flag = found.get("flag")
        if isinstance(flag, str) and flag in BATTERY_FLAGS:
            out[env_id] = AuthorFault(Flag(flag), str(found.get("detail", "")))
    for env_id, by_seed in (played or {}).items():
        if env_id in out:
            continue
        detail = fixed_in_play(by_seed, oracle_answers(battery.get(env_id)))
        if detail is not None:
            out[env_id] = AuthorFault(Flag.FIXED_ANSWER, detail, "play")
    return out


def audit_caught(detail: str) -> Ending:
    """The played episode whose own replay did not reproduce it: its environment's fault,
    `detail` the first difference (the run database judges it so with the audit)."""
    return Ending(Outcome.INCOMPLETE, f"{AUDIT_REASON}: {detail}")


def not_played(flag: Flag) -> Ending:
    """An episode of an environment already known to be its author's fault (`flag`: the replay
    audit caught it, or validation's battery flagged it), recorded without a model call."""
    if flag is Flag.NONDETERMINISTIC:
        return Ending(Outcome.INCOMPLETE,
                      f"{AUDIT_REASON}: the environment is nondeterministic; not played")
    return Ending(Outcome.INCOMPLETE, f"{BATTERY_REASON}: {flag}: not played")


def judged(outcome: str, reason: str, fault: AuthorFault | None) -> tuple[str, str]:
    """(outcome, reason) of an episode once its environment's fault is counted: a success or
    failure of an environment at fault is `incomplete` with the fault's reason; any other
    episode (already `incomplete`, or `error`) reads as recorded."""
    if fault is not None and outcome in (Outcome.SUCCESS, Outcome.FAILURE):
        return Outcome.INCOMPLETE, fault.reason
    return outcome, reason
