"""Errors a user can act on.

A `UserError` carries one line that names the problem and the fix; the CLI prints it and exits
non-zero. Anything else escaping to the CLI is a bug in envduels and stays loud. In an episode
it is no outcome (`duel.faults.StopRun`): every driver lets it through and the run stops.
"""

from __future__ import annotations

from envduels.duel.faults import StopRun


class UserError(StopRun):
    """A problem with the user's input or machine, stated in one actionable line."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
