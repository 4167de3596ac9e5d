"""A bad request after a player has answered is one unit's error, not a run's end.

The players raise `BadRequest` (a `UserError`) at once for a request the server refuses (400,
413, 422 that is not a context overflow): before a player has answered that means its configuration is wrong
(bad parameters), and the run should stop with that one line. Once the player has answered in
this run (this session, or a call recorded by an earlier one), the same refusal is about one
request, e.g. a content filter on one environment's observation: aborting would stop the run
and every resume would repeat the request forever. So it becomes a `ProviderError`, and the
episode (or authoring job) is `error` with the reason, like any provider failure (exit 4).
Other refusals (key, model, quota) stay immediate aborts. A solver's request refused for its
content (`ContentRefused`: a content filter on the environment's text) is neither: it is the
episode's outcome, `incomplete`, the author's fault, so an environment can neither stop a run by
tripping a filter on a solver's first request nor drop a lost pair by tripping it on a win.
docs/engine.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envduels.config import PlayerConfig
    from envduels.players import ChatResult, Player


class AnsweredGuard:
    """`player` (a `players.Player`) whose bad requests, once it has answered, are
    `ProviderError`s. Everything else is the player's own."""

    def __init__(self, player: Player, *, answered: bool) -> None:
        self._player = player
        self.answered = answered
        self.name: str = player.name
        self.config: PlayerConfig = player.config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._player, name)

    async def chat(self, messages: list[dict[str, str]], **kwargs: Any) -> ChatResult:
        from envduels.players import BadRequest, ContentRefused, ProviderError

        try:
            result = await self._player.chat(messages, **kwargs)
        except BadRequest as err:
            if isinstance(err, ContentRefused) and kwargs.get("role") == "solver":
                raise   # about the environment's text, answered or not: the episode's outcome
            if self.answered:
                raise ProviderError(f"{err} (this request only: the player has answered others "
                                    "in this run)") from None
            raise
        self.answered = True
        return result


def guard_bad_requests(players: dict[str, Player], answered: set[str]
                       ) -> dict[str, AnsweredGuard]:
    """Each player wrapped in `AnsweredGuard`; `answered`: players with a call recorded in the
    run already."""
    return {name: AnsweredGuard(p, answered=name in answered) for name, p in players.items()}
