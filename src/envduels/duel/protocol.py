"""The episode protocol of a duel (SPEC §2 and §4), in one implementation.

Everything that plays an episode follows these rules through this module: the engine
(`engine.solving.play_episode`, hence `envduels run` and `envduels play`), the Gymnasium adapter
(`envduels.gym`) and the OpenEnv server (`envduels serve`). None of them keeps a copy, so their
transcripts for the same environment, seed, condition and replies are identical
(tests/serve/test_one_protocol.py plays one episode through all of them).

The rules:

- The solver's system prompt is `SYSTEM_PROMPT`; its first user turn is `first_turn(obs, hint=)`:
  `Hint: {hint}` and a blank line first in the hinted condition only, then the observation and
  the request for one boxed action. Later user turns are `next_turn(obs)`.
- The action is the last balanced `\\boxed{...}` of the whole reply, wrapper included
  (`last_boxed`). A reply without one costs the turn: the environment is not stepped and the
  solver's next user turn is `FORMAT_ERROR`.
- The turn cap is `turn_cap(env_max_turns, limit)`; reaching it is a failure.
- Success is a step that returns `terminated=True` with `reward > 0` (`is_success`).

`Episode` is the state machine a player drives: `start(observation)` gives the first user turn,
`act(reply)` the action to step (or None: a format error), `observe(...)` the step's result and
the next user turn; `end(outcome, reason)` closes it (for a failure, `duel.faults.fail` does, as
the failure vocabulary decides). It records the transcript every caller keeps. Pure: the
standard library only, no sandbox, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from envduels.duel.outcomes import Outcome

EntryValue = str | int | float | bool | None
"""What a transcript entry holds under a key: text, a count, a reward, a flag, or nothing."""

Entry = dict[str, EntryValue]
"""One transcript entry, as the run database stores it: `role` is `system`, `user` (a user turn;
`format_error: True` on the format-error turn), `assistant` (the reply, with its `turn`),
`env` (a step: `action`, `reward`, `terminated`, `truncated`, `content`; or `action` and `fault`)
or `outcome` (`outcome` and `content` "OUTCOME: reason")."""

SYSTEM_PROMPT = ("You are playing an interactive language game. Make one valid action per turn. "
                 "Reason carefully and put the action for that turn inside \\boxed{}.")
FORMAT_ERROR = "Invalid action format. Use \\boxed{ACTION}."
HINT_LABEL = "Hint: "
_RESPOND = "Respond with exactly one action for this turn inside \\boxed{}."


def hint_prefix(hint: str) -> str:
    """What the hinted condition puts before the first observation: `Hint: {hint}` and a blank
    line. The hint appears verbatim there and nowhere in the other condition."""
    return f"{HINT_LABEL}{hint}\n\n"


def first_turn(observation: str, *, hint: str | None) -> str:
    """The solver's first user turn; `hint` is given only in the hinted condition (None
    otherwise; an empty string still shows the `Hint: ` line)."""
    prefix = "" if hint is None else hint_prefix(hint)
    return f"{prefix}Observation: {observation}\n\n{_RESPOND}"


def next_turn(observation: str) -> str:
    """A later user turn carrying the environment's next observation."""
    return f"Observation: {observation}\n\n{_RESPOND}"


def turn_cap(env_max_turns: int, limit: int | None = None) -> int:
    """The most solver turns an episode gets: the environment's own `max_turns`, lowered to
    `limit` when one is given (a run's `tournament.max_turns`, validation's cap, a Gym or server
    caller's `max_turns`), and at least 1.

    A limit only ever lowers the environment's own: an environment is always constructed with
    its own `max_turns`, so one that declares 5 is never played for 24 turns it does not expect.
    """
    cap = env_max_turns if limit is None else min(env_max_turns, limit)
    return max(1, int(cap))


def is_success(terminated: bool, reward: float) -> bool:
    """Whether a step wins the episode: it terminated with a reward above 0 (SPEC §2).
    Intermediate rewards never count."""
    return bool(terminated) and reward > 0


_BOXED = "\\boxed{"
_BRACES = re.compile(r"[{}]")

# Only the end of a longer reply is searched for the answer (the answer is the LAST box): the
# scan is linear, but a reply is untrusted and the event loop waits on it. docs/engine.md.
ACTION_SEARCH_MAX_CHARS = 100_000


def last_boxed(text: str) -> str | None:
    """The last balanced `\\boxed{...}` in `text`, wrapper included, or None.

    "Last" is the one that closes last; of nested ones that close together, the outermost.
    An unbalanced `\\boxed{` (a reply cut off mid-answer) is skipped. Only the last
    `ACTION_SEARCH_MAX_CHARS` characters of `text` are searched. One pass over the braces.
    """
    if len(text) > ACTION_SEARCH_MAX_CHARS:
        text = text[-ACTION_SEARCH_MAX_CHARS:]
    opens_box = {m.end() - 1: m.start() for m in re.finditer(re.escape(_BOXED), text)}
    if not opens_box:
        return None
    stack: list[int] = []          # positions of the open braces not yet closed
    best: tuple[int, int] | None = None
    for m in _BRACES.finditer(text, min(opens_box)):
        i = m.start()
        if text[i] == "{":
            stack.append(i)
        elif stack:
            start = opens_box.get(stack.pop())
            if start is not None:
                best = (start, i)  # closes after every earlier candidate
    return None if best is None else text[best[0]: best[1] + 1]


class EpisodeOver(Exception):
    """`act` or `observe` was called on an episode that has ended (or `observe` without an
    action to observe): a caller's bug, or a client stepping past the end."""


class Episode:
    """One episode's rules and transcript; see the module docstring for the rules.

    Drive it as: `text = start(obs)`; then per turn `action = act(reply)`: None is a format
    error (the turn is spent; the solver's next user turn is `FORMAT_ERROR`), otherwise step the
    environment with `action` and pass the result to `observe`, which returns the solver's next
    user turn (None once the episode ended). When the environment or the solver fails,
    `duel.faults.fail` ends it as the failure vocabulary decides (a failed step logged first).

    `turn` counts the replies taken; `done` says the episode ended, `outcome` and `reason` how.
    `on_event` sees every transcript entry as it is appended.
    """

    def __init__(self, max_turns: int, *, hint: str | None = None,
                 on_event: Callable[[Entry], None] | None = None) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        self.max_turns = max_turns
        self.hint = hint
        self.transcript: list[Entry] = []
        self.turn = 0
        self.outcome: Outcome | None = None
        self.reason = ""
        self._on_event = on_event
        self._action: str | None = None

    @property
    def done(self) -> bool:
        """Whether the episode has ended (`outcome` is set)."""
        return self.outcome is not None

    @property
    def success(self) -> bool:
        return self.outcome is Outcome.SUCCESS

    def _log(self, entry: Entry) -> None:
        self.transcript.append(entry)
        if self._on_event is not None:
            self._on_event(entry)

    def messages(self) -> list[dict[str, str]]:
        """The chat so far as the solver sees it: system, user and assistant turns, in order."""
        return [{"role": str(e["role"]), "content": str(e["content"])} for e in self.transcript
                if e["role"] in ("system", "user", "assistant")]

    def start(self, observation: str) -> str:
        """Log the system prompt and the first user turn for the reset's `observation`; return
        that first user turn (`first_turn`)."""
        text = first_turn(observation, hint=self.hint)
        self._log({"role": "system", "content": SYSTEM_PROMPT})
        self._log({"role": "user", "content": text})
        return text

    def act(self, reply: str, *, parse: bool = True, **extra: EntryValue) -> str | None:
        """Take the solver's whole `reply` as this turn's: log it (with `extra`, e.g. token
        counts) and return the action to step, its last balanced `\\boxed{}` (the reply itself
        when `parse` is false). None: no box, a format error, logged; the turn is spent, and at
        the turn cap the episode ends as a failure. EpisodeOver when it has ended."""
        if self.done:
            raise EpisodeOver(f"the episode is over ({self.outcome}: {self.reason})")
        self.turn += 1
        self._log({"role": "assistant", "content": reply, "turn": self.turn, **extra})
        action = last_boxed(reply) if parse else reply
        if action is None:
            self._log({"role": "user", "content": FORMAT_ERROR, "format_error": True})
            self._end_at_cap()
            return None
        self._action = action
        return action

    def observe(self, observation: str, reward: float, terminated: bool,
                truncated: bool) -> str | None:
        """Log the result of stepping the action `act` returned. The episode ends on
        termination (success iff reward > 0), on truncation and at the turn cap. Returns the
        solver's next user turn (`next_turn`; also logged), None when the episode ended for
        any reason but the cap."""
        action, self._action = self._action, None
        if self.done or action is None:
            raise EpisodeOver("observe() needs an action from act() on a running episode")
        self._log({"role": "env", "action": action, "reward": reward, "terminated": terminated,
                   "truncated": truncated, "content": observation})
        if terminated:
            outcome = Outcome.SUCCESS if is_success(terminated, reward) else Outcome.FAILURE
            self.end(outcome, f"terminated with reward {reward:g}")
            return None
        if truncated:
            self.end(Outcome.FAILURE, "truncated by the environment")
            return None
        text = next_turn(observation)
        self._log({"role": "user", "content": text})
        self._end_at_cap()
        return text

    def step_failed(self, fault: str) -> None:
        """Log that stepping the pending action failed with `fault` (one line); `end` next."""
        action, self._action = self._action, None
        self._log({"role": "env", "action": action, "fault": fault})

    def end(self, outcome: Outcome, reason: str) -> None:
        """End the episode (once; later calls are ignored) and log its outcome."""
        if self.done:
            return
        self.outcome, self.reason = outcome, reason
        self._log({"role": "outcome", "content": f"{outcome}: {reason}", "outcome": outcome})

    def _end_at_cap(self) -> None:
        if self.turn >= self.max_turns:
            self.end(Outcome.FAILURE, f"turn cap {self.max_turns} reached")
