"""The duel's vocabulary: the rules every part of envduels plays by, pure and typed.

Below the engine, the store, the analysis and every output; it imports nothing of envduels and
nothing outside the standard library, so anything may import it. It holds the names results
are spelled in (`outcomes`: `Outcome`, `Flag`, `AuditState`), the one shape of token and cost
figures (`usage.Usage`) and the episode protocol
(`protocol`: the solver's prompts and hint prefix, `last_boxed`, the format-error turn, the
turn cap, success, and the `Episode` state machine the engine, the Gym adapter and
`envduels serve` all drive).
"""

from envduels.duel.outcomes import (
    AUTHOR_FAULT_FLAGS,
    BATTERY_FLAGS,
    FLAGS,
    INFORMATIONAL_FLAGS,
    AuditState,
    Flag,
    Outcome,
)
from envduels.duel.protocol import (
    ACTION_SEARCH_MAX_CHARS,
    FORMAT_ERROR,
    HINT_LABEL,
    SYSTEM_PROMPT,
    Entry,
    Episode,
    EpisodeOver,
    first_turn,
    hint_prefix,
    is_success,
    last_boxed,
    next_turn,
    turn_cap,
)
from envduels.duel.usage import Usage

__all__ = [
    "ACTION_SEARCH_MAX_CHARS",
    "AUTHOR_FAULT_FLAGS",
    "BATTERY_FLAGS",
    "FLAGS",
    "INFORMATIONAL_FLAGS",
    "AuditState",
    "Flag",
    "FORMAT_ERROR",
    "HINT_LABEL",
    "SYSTEM_PROMPT",
    "Entry",
    "Episode",
    "EpisodeOver",
    "Outcome",
    "first_turn",
    "hint_prefix",
    "is_success",
    "last_boxed",
    "next_turn",
    "turn_cap",
    "Usage",
]
