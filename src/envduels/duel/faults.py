"""The author's-fault rule (SPEC §4, §11): an environment the replay audit caught, or one
validation's degenerate-policy battery beat, is its author's fault in every episode.

One rule, asked by everything that reads a run: the run database's analysis tables
(`store.Tables`, whose episodes read judged) and the analysis's flags
(`analysis.metrics.environment_flags`). It reads typed facts, the audits' `AuditState` and the
battery's `Flag`, never a reason text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from envduels.duel.outcomes import BATTERY_FLAGS, AuditState, Flag, Outcome

AUDIT_REASON = "replay audit"
"""Every episode the replay audit holds against its environment has a reason starting with this:
the episode that did not replay (`"replay audit: DETAIL"`, written by the store with the audit)
and every other played episode of that environment (`AuthorFault.reason`)."""
BATTERY_REASON = "degenerate-policy battery"
"""Every played episode of an environment the battery flagged reads as `incomplete` with a reason
starting with this."""


@dataclass(frozen=True)
class AuthorFault:
    """Why every episode of one environment is its author's fault: the flag and its detail (the
    audit's first difference, or the battery's one-line finding)."""

    flag: Flag
    detail: str

    @property
    def reason(self) -> str:
        """The reason a played episode of the environment reads with once judged."""
        if self.flag is Flag.NONDETERMINISTIC:
            return f"{AUDIT_REASON}: the environment is nondeterministic ({self.detail})"
        return f"{BATTERY_REASON}: {self.flag}: {self.detail}"


def author_faults(audits: Iterable[tuple[str, str, str | None]],
                  battery: Mapping[str, object]) -> dict[str, AuthorFault]:
    """env_id -> its `AuthorFault`, for every environment that is its author's fault.

    `audits`: (env_id, state, detail) of the recorded replay audits, oldest first; an
    environment with a `mismatch` is `nondeterministic` with the detail of its first one.
    `battery`: env_id -> the battery's findings (`Verdict.battery`: a mapping whose `flag` is
    `trivial`, `hint_is_key` or None); it counts only for an environment the audit did not
    catch (one flag per environment, `nondeterministic` first).
    """
    out: dict[str, AuthorFault] = {}
    for env_id, state, detail in audits:
        if state == AuditState.MISMATCH and env_id not in out:
            out[env_id] = AuthorFault(Flag.NONDETERMINISTIC, str(detail))
    for env_id, found in battery.items():
        if not isinstance(found, Mapping) or env_id in out:
            continue
        flag = found.get("flag")
        if isinstance(flag, str) and flag in BATTERY_FLAGS:
            out[env_id] = AuthorFault(Flag(flag), str(found.get("detail", "")))
    return out


def judged(outcome: str, reason: str, fault: AuthorFault | None) -> tuple[str, str]:
    """(outcome, reason) of an episode once its environment's fault is counted: a success or
    failure of an environment at fault is `incomplete` with the fault's reason; any other
    episode (already `incomplete`, or `error`) reads as recorded."""
    if fault is not None and outcome in (Outcome.SUCCESS, Outcome.FAILURE):
        return Outcome.INCOMPLETE, fault.reason
    return outcome, reason
