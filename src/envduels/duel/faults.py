"""The author's-fault rule (SPEC §4, §11, §13): an environment the replay audit caught, one
validation's degenerate-policy battery beat, or one whose hinted wins give the same answer on
every seed, is its author's fault in every episode.

One rule, asked by everything that reads a run: the run database's analysis tables
(`store.Tables`, whose episodes read judged) and the analysis's flags
(`analysis.metrics.environment_flags`). It reads typed facts, the audits' `AuditState`, the
battery's `Flag` and what the hint changed in the rescues as played (`duel.answers`), never a
reason text.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from envduels.duel.answers import Answer, OracleAnswers, fixed_in_play
from envduels.duel.outcomes import BATTERY_FLAGS, AuditState, Flag, Outcome

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


def judged(outcome: str, reason: str, fault: AuthorFault | None) -> tuple[str, str]:
    """(outcome, reason) of an episode once its environment's fault is counted: a success or
    failure of an environment at fault is `incomplete` with the fault's reason; any other
    episode (already `incomplete`, or `error`) reads as recorded."""
    if fault is not None and outcome in (Outcome.SUCCESS, Outcome.FAILURE):
        return Outcome.INCOMPLETE, fault.reason
    return outcome, reason
