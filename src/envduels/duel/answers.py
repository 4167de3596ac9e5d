"""The answer must depend on the instance (SPEC §13): what "the answer" of a win is, and when
one answer wins every seed.

A hint is the same text on every seed, so all it can hand over is something that does not
depend on the instance: a password, a code, "yes". An answer that changes with the seed has
to be worked out, which is what teaching is. So an environment whose winning answer is the
same on every seed is its author's fault (`Flag.FIXED_ANSWER`), however the hint disguises it
(reversed, spelled out, behind a step every solver passes, or the reply to a question about
the hint): the rule never reads the hint, it compares answers across seeds.

**The answer** of a win is its decisive action, the last one, which the environment answered
with the win (`decisive_action`), compared as `answer_key` writes it: case, surrounding quotes
and punctuation, runs of spaces and digits written out or apart ("four-one-nine-seven",
"4 1 9 7") do not make two answers differ. Steps before it (a knock every solver passes, a
first "yes") do not count: they may change with the seed while the answer does not.

Two places ask, both through this module:
- validation (`envs._answer_check`): the oracle's final answer on the benchmark seeds and, when
  those agree, on up to `ANSWER_SEEDS` seeds in all, drawn so that no author can know them;
  one answer on every one of them is `fixed_answer`;
- the analysis of play (`fixed_in_play`): the panel's hinted wins. An oracle can box a
  different answer per seed while the environment also takes a constant one, which only play
  shows. One answer on (nearly) every seed with a hinted win is `fixed_answer` when chance
  cannot explain it (`PLAY_ALPHA`), given how often validation's oracle gave that answer.

Pure: the standard library only.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import last_boxed

ANSWER_SEEDS = 16
"""Validation calls the oracle's answer fixed only when it is the same on this many seeds. An
honest environment with a small answer space (a maze whose last move is east or south, jugs
poured one way or the other) agrees on k seeds by chance with probability about p^(k-1) for
its most common answer's share p: 3e-5 at k = 16 for p = 1/2, 1.5e-4 for the library's most
lopsided (water_jugs, p = 0.56), 0.035 for a last move that is the same 4 times in 5. The
seeds past the benchmark ones are played only while every answer so far agrees, so an
environment whose answers differ pays at most one or two oracle episodes more."""

PLAY_ALPHA = 0.001
"""The analysis flags an answer shared by the hinted wins of many seeds when the chance of that
many for an answer that depends on the seed is at most this (`fixed_in_play`)."""

_DIGIT_NAMES = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9"}
_WORD = re.compile(r"[^\W\d_]+")
_SPLIT_DIGITS = re.compile(r"(?<![\d.])(\d)(?: +|-|_)(?=\d(?![\d.]))")
_EDGE = " \t\r\n.,;:!?\"'`“”‘’"


def answer_key(action: str) -> str:
    """`action`'s answer as answers are compared: the content of its last `\\boxed{}` (the
    whole text when it has none), NFKC-normalised and case-folded, digit names ("four") as
    digits, single digits written apart ("4-1-9-7", "4 1 9 7") joined, runs of white space as
    one space, surrounding punctuation and quotes dropped.

    Not reversed, sorted or otherwise canonicalised further: "a c" and "c a" are different
    moves of an honest game, and an author who varies the oracle's surface per seed is caught
    in play, where solvers box what the hint says."""
    box = last_boxed(action)
    inner = box[len("\\boxed{"):-1] if box is not None else action
    text = unicodedata.normalize("NFKC", inner).casefold()
    text = _WORD.sub(lambda m: _DIGIT_NAMES.get(m.group(), m.group()), text)
    text = _SPLIT_DIGITS.sub(r"\1", text)
    return " ".join(text.split()).strip(_EDGE)


def answer_digest(key: str) -> str:
    """A short stable digest of an `answer_key`: validation records the oracle's answers so, not
    as environment text (what a verdict prints stays free of it, and its size fixed)."""
    return hashlib.sha256(f"envduels-answer/v1|{key}".encode()).hexdigest()[:16]


def decisive_action(transcript: object) -> str | None:
    """The action of a transcript's last step (`{"role": "env", "action": ...}`), wrapper
    included: the one that won a won episode. A transcript without steps falls back to the last
    `\\boxed{}` of an `assistant` message; None when there is neither."""
    if not isinstance(transcript, list | tuple):
        return None
    for entry in reversed(transcript):
        if not isinstance(entry, dict):
            continue
        action = entry.get("action")
        if entry.get("role") == "env" and isinstance(action, str) and action:
            return action
        if entry.get("role") == "assistant":
            box = last_boxed(str(entry.get("content", "")))
            if box is not None:
                return box
    return None


def upper_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return min(1.0, sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(max(k, 0), n + 1)))


@dataclass(frozen=True)
class OracleAnswers:
    """What validation's answer check saw: on `seeds` seeds, how many gave each answer
    (`answer_digest` -> seeds). `seeds == 0`: the oracle never played (absent)."""

    seeds: int = 0
    counts: Mapping[str, int] | None = None

    def seen(self, key: str) -> int:
        """On how many of its seeds the oracle's answer was `key`."""
        return (self.counts or {}).get(answer_digest(key), 0)

    def share(self, key: str) -> float:
        """How often the oracle gives answer `key`, estimated with one such seed and one other
        added (Laplace): 1/2 with no evidence, never 0 or 1."""
        return (self.seen(key) + 1) / (self.seeds + 2)


def fixed_in_play(by_seed: Mapping[int, Collection[str]], oracle: OracleAnswers) -> str | None:
    """Whether the panel's hinted wins give one answer on too many seeds to be chance: the one
    line saying so, else None.

    `by_seed`: seed -> the `answer_key`s of the hinted wins on it. For each answer c won on
    k of the n seeds with a hinted win, the chance of k or more for an answer that depends on
    the seed is `upper_tail(n, k, f)`, f being how often validation's oracle gave c
    (`OracleAnswers.share`): 1/2 without evidence, about 1/(seeds + 2) for an answer the oracle
    never gave (a hint's password behind an oracle that boxes a different code per seed). At
    most `PLAY_ALPHA` is `fixed_answer`. On an environment whose solvers win as its oracle does,
    the hinted wins repeat the oracle's answers on the same seeds, and validation has already
    compared those (and more): this never speaks there."""
    won = {seed: set(answers) for seed, answers in by_seed.items() if answers}
    n = len(won)
    if n < 2:
        return None
    counts = Counter(c for answers in won.values() for c in answers)
    chance, k, answer = min((upper_tail(n, k, oracle.share(c)), k, c) for c, k in counts.items())
    if chance > PLAY_ALPHA:
        return None
    oracle_said = (f"an answer validation's oracle gave on {oracle.seen(answer)} of the "
                   f"{oracle.seeds} seeds it played" if oracle.seeds
                   else "and validation's oracle did not play")
    return (f"the panel's hinted wins end with the same answer on {k} of the {n} seeds they won, "
            f"{oracle_said}: the chance of that for an answer that depends on the seed is "
            f"{chance:.1g}")


def hinted_answers(episodes: Iterable[Mapping[str, object]]) -> dict[str, dict[int, set[str]]]:
    """env_id -> seed -> the `answer_key`s of the panel's hinted wins among `episodes` (rows
    with `env_id`, `seed`, `hinted`, `outcome`, `self_play` and `transcript`, as recorded: a
    win is `Outcome.SUCCESS`, the panel leaves self-play out). A win whose transcript holds no
    action adds nothing."""
    out: dict[str, dict[int, set[str]]] = {}
    for ep in episodes:
        if not ep.get("hinted") or ep.get("self_play") or ep.get("outcome") != Outcome.SUCCESS:
            continue
        action = decisive_action(ep.get("transcript"))
        try:   # a seed read back from a data frame may be a numpy integer
            seed = int(ep.get("seed"))  # type: ignore[call-overload]
        except (TypeError, ValueError):
            continue
        if action is not None:
            out.setdefault(str(ep.get("env_id")), {}).setdefault(seed, set()).add(
                answer_key(action))
    return out
