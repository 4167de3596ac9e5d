"""The names a duel's results are spelled in: episode outcomes, environment flags, audit states.

This is the only module of `src/` that spells these names as strings (a test walks the AST of
every other module: tests/test_vocabulary.py); everything else imports the members. Each is a
`StrEnum`, so a member is also the plain string the run database, `report --json` and an
EnvDuels export store (`Outcome.SUCCESS == "success"`): databases written before these types
existed read back unchanged, and a value read from a file becomes a member with `Outcome(text)`
(ValueError for an unknown name).

Adding an outcome or a flag is one edit here plus its rendering (the wording in
`report/story.py` and the viewer's legend).
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How an episode ended (SPEC §4)."""

    SUCCESS = "success"
    """A step returned `terminated=True` with `reward > 0`."""
    FAILURE = "failure"
    """The solver did not win: the turn cap, a losing end, or the solver's own fault."""
    INCOMPLETE = "incomplete"
    """The environment's fault, hence its author's: it raised, timed out, broke a limit, or is
    flagged as the author's fault (`Flag.author_fault`). Scored against the author."""
    ERROR = "error"
    """The host's or the provider's fault: no verdict on anyone; played again on resume."""

    @property
    def played(self) -> bool:
        """The episode gave the solver a verdict (success or failure): it counts for the
        solver's rates and is held to the replay audit."""
        return self in (Outcome.SUCCESS, Outcome.FAILURE)

    @property
    def final(self) -> bool:
        """A resumed run keeps this episode (every outcome but `error`, which is replayed)."""
        return self is not Outcome.ERROR


class Flag(StrEnum):
    """What the analysis (or validation's degenerate-policy battery) says about an environment.

    The first four are the author's fault: every episode of a flagged environment scores as
    `incomplete`, and an environment flagged in validation is not played. The others describe
    an environment and change no score.
    """

    NONDETERMINISTIC = "nondeterministic"
    """The replay audit found a played episode a fresh instance did not reproduce."""
    TRIVIAL = "trivial"
    """The degenerate-policy battery won without the hint (set in validation)."""
    HINT_IS_KEY = "hint_is_key"
    """The degenerate-policy battery won by copying the hint (set in validation)."""
    FIXED_ANSWER = "fixed_answer"
    """The winning answer is the same on every seed, so a hint can simply hand it over (set in
    validation from the oracle's final actions, or in the analysis from the hinted wins)."""
    UNSOLVED_WITH_HINT = "unsolved_with_hint"
    """No panel solver won even with the hint."""
    HINT_GATED = "hint_gated"
    """The panel's no-hint pass rate is near 0 and its hinted rate near 1."""
    HINT_LEAK = "hint_leak"
    """The hinted wins copy the hint."""

    @property
    def author_fault(self) -> bool:
        """Whether the flag scores every episode of its environment as its author's fault."""
        return self in AUTHOR_FAULT_FLAGS


AUTHOR_FAULT_FLAGS: tuple[Flag, ...] = (Flag.NONDETERMINISTIC, Flag.TRIVIAL, Flag.HINT_IS_KEY,
                                        Flag.FIXED_ANSWER)
"""Flags that score every episode of their environment as `incomplete`, in listing order."""
INFORMATIONAL_FLAGS: tuple[Flag, ...] = (Flag.UNSOLVED_WITH_HINT, Flag.HINT_GATED, Flag.HINT_LEAK)
"""Flags that describe an environment and change no score, in listing order."""
BATTERY_FLAGS: tuple[Flag, ...] = (Flag.TRIVIAL, Flag.HINT_IS_KEY, Flag.FIXED_ANSWER)
"""The flags validation's degenerate-policy battery gives (`envs._battery`, its answer check
`envs._answer_check`)."""
FLAGS: tuple[Flag, ...] = (*AUTHOR_FAULT_FLAGS, *INFORMATIONAL_FLAGS)
"""Every flag, in the order reports list them."""


class AuditState(StrEnum):
    """The replay audit's verdict on one played episode (the run database's `audits.state`)."""

    PASSED = "passed"
    """A fresh instance, given the same seed and actions, reproduced every observation."""
    MISMATCH = "mismatch"
    """It did not: the environment is flagged `nondeterministic`."""
