"""Errors a user can act on.

A `UserError` carries one line that names the problem and the fix; the CLI prints it and exits
non-zero. Anything else escaping to the CLI is a bug in envduels and stays loud. In an episode
it is no outcome (`stops_run`, which `duel.faults.ending` reads): every driver lets it through
and the run stops.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or machine, stated in one actionable line."""

    exit_code: int = 2
    stops_run: bool = True
    """No episode's outcome (`duel.faults.ending` raises it again): the run stops. Read by
    attribute so that `import envduels` loads this module alone, not the duel's vocabulary."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
