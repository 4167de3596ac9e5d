"""The records a run database keeps, typed: what the engine hands the writer and what every
reader gets back.

Each is a frozen dataclass, so a record made with a field it does not have is refused where it
is made (TypeError), and a reader never parses a shape again. The model calls' record,
`players.CallRecord`, is the players' own (they make it, below the store); the store keeps it
as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envduels.duel.outcomes import AuditState
from envduels.duel.protocol import Entry
from envduels.envs._spec import EnvSpec

if TYPE_CHECKING:
    from envduels.envs._spec import Verdict, VerdictRecord


@dataclass(frozen=True)
class EnvRecord:
    """A run's record of one environment: the environment itself (`spec`, the one description
    of an environment, exactly as the run played it) and what the run found out about it.

    Every `EnvSpec` field and property reads through (`record.author` is `record.spec.author`,
    `record.hint` is `record.spec.hint`); `env_id` is `spec.id`. A fixed-pool environment is
    recorded in round 1, slot 0.
    """

    spec: EnvSpec
    round: int
    slot: int = 0
    valid: bool = True
    invalid_reason: str | None = None
    """Why the environment is invalid (one line); None when it is valid."""
    fixed_pool: bool = False
    """From a fixed pool (library or export), not authored in this run."""

    @property
    def env_id(self) -> str:
        return self.spec.id

    def __getattr__(self, name: str) -> Any:
        # only called for names the record lacks: the environment's own fields and properties
        if name.startswith("__") or name == "spec":
            raise AttributeError(name)
        return getattr(self.spec, name)


@dataclass(frozen=True)
class EpisodeRow:
    """One finished episode (any outcome, `error` included)."""

    episode_key: str
    env_id: str
    author: str
    solver: str
    round: int
    domain: str
    seed: int
    trial: int
    hinted: bool
    outcome: str
    reason: str
    turns: int
    self_play: bool
    transcript: list[Entry] = field(default_factory=list)


@dataclass(frozen=True)
class ValidationRecord:
    """One authoring attempt (or a fixed-pool environment's validation) and its verdict.

    `valid` and `reasons` are the attempt's: a reply that could not be parsed has reasons and
    no `verdict` (the validator never ran). `verdict` is the validator's `Verdict` as recorded
    (`Verdict.to_json`); a database from before a key existed lacks it.
    """

    env_id: str
    attempt: int
    author: str
    round: int
    valid: bool
    reasons: list[str]
    verdict: VerdictRecord | None
    reply: str

    @classmethod
    def of(cls, env_id: str, attempt: int, *, author: str, round: int,
           verdict: Verdict | None, reply: str,
           problems: list[str] | None = None) -> ValidationRecord:
        """The record of an attempt: judged by `verdict`, or refused before validation for
        `problems` (then `verdict` is None)."""
        reasons = list(problems) if problems else list(verdict.reasons) if verdict else []
        return cls(env_id, attempt, author, round, valid=not reasons, reasons=reasons,
                   verdict=verdict.to_json() if verdict is not None else None, reply=reply)


@dataclass(frozen=True)
class AuditRecord:
    """One replay audit of a played episode: its verdict (`AuditState`), the first difference
    when it is a mismatch, and the episode's outcome as played (before the audit judged it)."""

    episode_key: str
    env_id: str
    state: AuditState
    detail: str | None
    played_outcome: str | None


@dataclass(frozen=True)
class AuditCounts:
    """Replay audits recorded by state, and played episodes still waiting for theirs."""

    passed: int
    mismatch: int
    pending: int


@dataclass(frozen=True)
class AuthoringError:
    """An authoring job whose last try ended in `error` and that has no environment yet
    (`RunReader.authoring_errors`): a resumed run retries it."""

    author: str
    round: int
