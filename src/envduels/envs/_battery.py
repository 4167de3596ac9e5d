"""The degenerate-policy battery: can an environment be won without any intelligence?

Validation plays every valid environment with policies that read nothing but text (no model
call): random actions, constant actions (`yes`, `no`, `hint`, the empty box), an echo policy
that boxes what the last observation showed (a quoted word, a code, a number), a hint-copy
policy that boxes the hint's phrases and words in turn, and hint-copying combined with echoing
(a password from the hint, then the code the environment prints). A policy that wins on most
benchmark seeds (more than half) flags the environment:

- `trivial`: a policy that never reads the hint wins: the environment does not need a solver;
- `hint_is_key`: only the hint-copying policies win: the hint is a password or the answer
  itself, not teaching.

Both are the author's fault (the run scores every episode of such an environment like those of
a `nondeterministic` one). A hint that teaches a procedure is not flagged: boxing the steps it
names is not enough when the answer must then be worked out, and the battery measures exactly
that. When no policy won, validation's answer check (`envs._answer_check`) adds the third
flag, `fixed_answer`: the oracle's winning answer is the same on every seed.

A policy that lost shows nothing about the hint: it may have lost before it could use it (a
knock every solver passes, then the hint's password). The findings record how far the hint
policies got, but nothing the analysis reads from play is ever cleared by them.

Cost is kept small (docs/environments.md has the measured figures): each policy stops as soon
as its verdict is settled (a majority of seeds won, or too many lost to reach one), the hint
policies get `HINT_EPISODES` fresh episodes per seed and try at most `MAX_HINT_PHRASES`
phrases, and the hint policies do not run once a hint-free policy has made the environment
`trivial`. Everything is deterministic: the random policy draws from an RNG seeded by the
validation's salt, the source's hash and the seed.

The text helpers (`hint_phrases`, `shown_items`, `normalized`) are also the analysis's
definition of "copied from the hint" and "echoed from the observation" (`hint_leak`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from envduels._text import plural
from envduels.duel import faults, outcomes
from envduels.duel.outcomes import Flag

TRIVIAL = Flag.TRIVIAL
"""Verdict flag: a policy that never reads the hint wins on most seeds."""
HINT_IS_KEY = Flag.HINT_IS_KEY
"""Verdict flag: boxing the hint's words (and echoing what the environment shows) wins on most
seeds, while no hint-free policy does."""
FIXED_ANSWER = Flag.FIXED_ANSWER
"""Verdict flag: the oracle's winning answer is the same on every seed it played
(`envs._answer_check`, run after the policies when none of them won)."""
BATTERY_FLAGS = outcomes.BATTERY_FLAGS
"""The battery's flags (`duel.outcomes.BATTERY_FLAGS`); each makes the environment its
author's fault."""
BATTERY_REASON = faults.BATTERY_REASON
"""Every episode of an environment the battery flagged reads as `incomplete` with a reason
starting with this (`store.Tables`; the rule is `duel.faults`)."""

CONSTANTS = {"yes": "yes", "no": "no", "hint": "hint", "empty": ""}
"""The constant policies: name -> the text boxed on every turn."""
HINT_EPISODES = 3
"""Fresh episodes per seed for each hint policy (an environment that ends at the first wrong
answer is tried with that many phrases)."""
ECHO_EPISODES = 1
"""Fresh episodes per seed for the echo policy."""
MAX_HINT_PHRASES = 40
"""At most this many hint phrases are tried (quoted phrases, "is X" tails and numbers first)."""
ECHOES_PER_OBSERVATION = 2
"""The combined policy echoes at most this many new items of one observation before it goes
back to the hint."""

_QUOTED = re.compile(r"'([^'\n]{1,60})'|\"([^\"\n]{1,60})\"|`([^`\n]{1,60})`|“([^”\n]{1,60})”"
                     r"|‘([^’\n]{1,60})’")
_TAIL = re.compile(r"(?:\bis|\bare|\bwas|:|=)\s+([^.;!?\n]{1,60})")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_TOKEN = re.compile(r"[A-Za-z0-9-]{3,}")   # a code is such a token with a letter and a digit
_CAPS = re.compile(r"\b[A-Z]{3,}\b")
_SENTENCE = re.compile(r"[^.;!?\n]+")
_EDGE = " \t\r\n.,;:!?\"'`“”‘’()[]"


def normalized(text: str) -> str:
    """`text` as compared for copying: lower case, runs of white space as one space, surrounding
    punctuation and quotes dropped."""
    return " ".join(text.lower().split()).strip(_EDGE)


def _unique(items: Iterable[str], limit: int | None = None) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        item = item.strip(_EDGE)
        key = normalized(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
    return out


def _quoted(text: str) -> list[str]:
    return [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(text)]


def hint_tokens(hint: str) -> list[str]:
    """The hint's tokens, the ones a copying solver boxes first: quoted phrases, what follows
    "is"/"are"/":"/"=" up to the end of its sentence, numbers, then every word, in hint order,
    without repeats."""
    return _unique([*_quoted(hint), *(m.group(1) for m in _TAIL.finditer(hint)),
                    *_NUMBER.findall(hint), *_WORD.findall(hint)])


def hint_phrases(hint: str, limit: int | None = None) -> list[str]:
    """`hint_tokens`, then the hint's sentences, the whole hint, and every run of two and three
    consecutive words: everything "a token or phrase of the hint" can mean. At most `limit`."""
    words = _WORD.findall(hint)
    grams = [" ".join(words[i:i + n]) for n in (2, 3) for i in range(len(words) - n + 1)]
    return _unique([*hint_tokens(hint), *_SENTENCE.findall(hint), hint, *grams], limit)


SCAN_CHARS = 10_000
"""Only this much of an observation is searched for items (the harness caps observations at
8,000 characters by default; a transcript read from a file may hold longer ones)."""


def shown_items(observation: str) -> list[str]:
    """What an observation shows that a solver could box back: quoted words, codes (letters and
    digits together), numbers and capitalised words, in that order, without repeats. Linear in
    the text (every pattern is; the text is an adversary's)."""
    text = observation[:SCAN_CHARS]
    codes = [t for t in _TOKEN.findall(text)
             if any(c.isdigit() for c in t) and any(c.isalpha() for c in t)]
    return _unique([*_quoted(text), *codes, *_NUMBER.findall(text), *_CAPS.findall(text)])


def boxed(text: str) -> str:
    return f"\\boxed{{{text}}}"


class Policy(Protocol):
    """A policy without intelligence. `begin()` starts an episode; `act(observation)` is the
    next action, or None when the policy has nothing left to try (the episode stops there)."""

    name: str
    episodes: int

    def begin(self) -> None: ...

    def act(self, observation: str) -> str | None: ...

    @property
    def exhausted(self) -> bool: ...


@dataclass
class _Constant:
    name: str
    text: str
    episodes: int = 1
    exhausted: bool = False

    def begin(self) -> None:
        pass

    def act(self, observation: str) -> str | None:
        return boxed(self.text)


@dataclass
class _Random:
    rng: random.Random
    name: str = "random"
    episodes: int = 1
    exhausted: bool = False

    def begin(self) -> None:
        pass

    def act(self, observation: str) -> str | None:
        # no common words: "random" must win only where nearly any action does, not where the
        # answer happens to be a word such as "open"
        shape = self.rng.randrange(4)
        if shape == 0:
            return boxed(str(self.rng.randint(0, 999)))
        if shape == 1:
            return boxed("".join(self.rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(5)))
        if shape == 2:
            return boxed(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        return boxed(f"{self.rng.randint(0, 9)} {self.rng.randint(0, 9)}")


@dataclass
class _Echo:
    """Boxes the items the current observation shows, each once (an observation seen again,
    such as the same first observation in the next episode, offers its untried items)."""

    name: str = "echo"
    episodes: int = ECHO_EPISODES
    tried: dict[str, set[str]] = field(default_factory=dict)
    exhausted: bool = False
    _turn: int = 0

    def begin(self) -> None:
        self._turn = 0

    def act(self, observation: str) -> str | None:
        self._turn += 1
        done = self.tried.setdefault(observation, set())
        for item in shown_items(observation):
            if item not in done:
                done.add(item)
                return boxed(item)
        if self._turn == 1:
            self.exhausted = True   # the first observation has nothing left: every episode ends here
        return None


class BatteryFindings(TypedDict, total=False):
    """What the battery found, as a verdict records it (`BatteryResult.to_json`): a database
    written by an older envduels may lack any of it."""

    seeds: int
    policies: dict[str, dict[str, int]]
    flag: str | None
    detail: str
    episodes: int
    hint_phrases: int
    hint_tokens: int
    hint_tokens_covered: bool
    answer_seeds: int
    answers: dict[str, str]


def _hint_copier(phrases: list[str], echo: bool) -> Callable[[int], Policy]:
    """The battery's maker of a `_HintCopy` (the same policy on every seed)."""
    def make(seed: int) -> Policy:
        return _HintCopy(phrases, echo)
    return make


@dataclass
class _HintCopy:
    """Boxes the hint's phrases in turn, across episodes; with `echo`, first boxes up to
    `ECHOES_PER_OBSERVATION` items an observation shows that no earlier one of the episode did
    (the code a vault prints once the password is said, or shows from the start)."""

    phrases: list[str]
    echo: bool
    name: str = "hint_copy"
    episodes: int = HINT_EPISODES
    next: int = 0
    _seen: set[str] = field(default_factory=set)
    _fresh: dict[str, list[str]] = field(default_factory=dict)
    saw_fresh: bool = False
    """Whether some observation showed something new: if none did, the echoing variant would
    have played exactly these episodes."""

    def __post_init__(self) -> None:
        if self.echo:
            self.name = "hint_copy+echo"

    @property
    def exhausted(self) -> bool:
        return self.next >= len(self.phrases)

    def begin(self) -> None:
        self._seen, self._fresh = set(), {}

    def act(self, observation: str) -> str | None:
        if observation not in self._fresh:
            items = shown_items(observation)
            self._fresh[observation] = [i for i in items if normalized(i) not in self._seen][
                :ECHOES_PER_OBSERVATION]
            self._seen.update(normalized(i) for i in items)
        fresh = self._fresh[observation]
        self.saw_fresh |= bool(fresh)
        if self.echo and fresh:
            return boxed(fresh.pop(0))
        if self.exhausted:
            return None
        self.next += 1
        return boxed(self.phrases[self.next - 1])


class Play(Protocol):
    """Plays one episode of `policy` on `seed` in a fresh sandboxed instance; True if it won."""

    def __call__(self, seed: int, policy: Policy) -> Awaitable[bool]: ...


@dataclass
class BatteryResult:
    """What the battery found: per policy, seeds won of seeds played (a policy stops once its
    verdict is settled), the flag (`trivial`, `hint_is_key`, `fixed_answer` from the answer
    check, or None) with a one-line detail, how far the hint policies got
    (`hint_tokens_covered`: every `hint_tokens` entry was tried on every seed they played; a
    record for the reader only: a copying policy that lost proves nothing about the hint, since
    it may have lost before it could use it), and the oracle's answers (`answer_seeds`,
    `answers`)."""

    seeds: int
    policies: dict[str, dict[str, int]] = field(default_factory=dict)
    flag: Flag | None = None
    detail: str = ""
    episodes: int = 0
    hint_phrases: int = 0
    hint_tokens: int = 0
    hint_tokens_covered: bool = False
    answer_seeds: int = 0
    """Seeds on which the answer check compared the oracle's final answer (0: it did not run)."""
    answers: dict[str, str] = field(default_factory=dict)
    """Benchmark seed (as text: a JSON key) -> `duel.answers.answer_digest` of the oracle's
    final answer on it."""

    def to_json(self) -> BatteryFindings:
        """A JSON-ready dict with exactly the fields above."""
        return {"seeds": self.seeds, "policies": {k: dict(v) for k, v in self.policies.items()},
                "flag": self.flag, "detail": self.detail, "episodes": self.episodes,
                "hint_phrases": self.hint_phrases, "hint_tokens": self.hint_tokens,
                "hint_tokens_covered": self.hint_tokens_covered,
                "answer_seeds": self.answer_seeds, "answers": dict(self.answers)}

    @property
    def hint_copy_won(self) -> bool:
        """Whether a hint-copying policy won on at least one seed."""
        return any(self.policies.get(k, {}).get("won", 0) > 0 for k in ("hint_copy", "hint_copy+echo"))


def _describe(name: str) -> str:
    if name in CONSTANTS:
        return f"constant \\boxed{{{CONSTANTS[name]}}}"
    return {"random": "random-action", "echo": "observation-echo", "hint_copy": "hint-copy",
            "hint_copy+echo": "hint-copy-and-echo"}.get(name, name)


async def run_battery(play: Play, seeds: list[int], hint: str, salt: str) -> BatteryResult:
    """Play the battery on `seeds` through `play`; `hint` empty skips the hint policies.

    Deterministic in its arguments (and the environment, itself deterministic by then). Each
    policy plays seeds in order until it has won more than half of them or can no longer."""
    n = len(seeds)
    need = n // 2 + 1
    result = BatteryResult(seeds=n)
    phrases = hint_phrases(hint, MAX_HINT_PHRASES) if hint.strip() else []
    result.hint_phrases = len(phrases)
    result.hint_tokens = min(len(hint_tokens(hint)), len(phrases)) if phrases else 0
    tokens_covered = bool(phrases)

    copy_lost_alike: set[int] = set()   # seeds the echoing variant would play identically

    async def judge(make: Callable[[int], Policy]) -> bool:
        nonlocal tokens_covered
        won = played = 0
        name = make(seeds[0]).name
        for seed in seeds:
            if won >= need or played - won > n - need:
                break
            policy = make(seed)
            played += 1
            if isinstance(policy, _HintCopy) and policy.echo and seed in copy_lost_alike:
                continue   # the same episodes as hint_copy's on this seed, which lost
            for _ in range(policy.episodes):
                result.episodes += 1
                if await play(seed, policy):
                    won += 1
                    break
                if policy.exhausted:
                    break
            if isinstance(policy, _HintCopy) and not policy.echo:
                tokens_covered &= policy.next >= result.hint_tokens
                if not policy.saw_fresh:
                    copy_lost_alike.add(seed)
        result.policies[name] = {"won": won, "seeds": played}
        if won >= need and result.flag is None:
            result.flag = HINT_IS_KEY if isinstance(make(seeds[0]), _HintCopy) else TRIVIAL
            played_of = (f"{won} of the {plural(played, 'seed')} it played" if played < n
                         else f"{won} of {plural(n, 'seed')}")
            result.detail = (f"the {_describe(name)} policy won {played_of} (more than half of "
                             f"the benchmark seeds) without any reasoning")
            return True
        return False

    free: list[Callable[[int], Policy]] = [
        lambda seed: _Random(random.Random(f"envduels-battery/v1|{salt}|{seed}")),
        *(lambda seed, k=k, v=v: _Constant(k, v) for k, v in CONSTANTS.items()),
        lambda seed: _Echo(),
    ]
    for make in free:
        if await judge(make):
            break
    if result.flag is None and phrases:
        for echo in (False, True):
            if await judge(_hint_copier(list(phrases), echo)):
                break
    result.hint_tokens_covered = tokens_covered and "hint_copy" in result.policies
    if result.flag == TRIVIAL:
        result.detail += "; the environment does not need a solver"
    elif result.flag == HINT_IS_KEY:
        result.detail += "; the hint is the answer (or a password), not teaching"
    return result
