"""The answer must depend on the instance (SPEC §13): what "the answer" of a win is, and when
one answer wins every seed.

A hint is the same text on every seed, so all it can hand over is something that does not
depend on the instance: a password, a code, "yes". An answer that changes with the seed has
to be worked out, which is what teaching is. So an environment whose winning answer is the
same on every seed is its author's fault (`Flag.FIXED_ANSWER`), however the hint disguises it
(reversed, spelled out, behind a step every solver passes, or the reply to a question about
the hint): the rule never reads the hint, it compares answers across seeds. Answers are
compared as `answer_key` writes them: case, surrounding quotes and punctuation, runs of spaces
and digits written out or apart ("four-one-nine-seven", "4 1 9 7") make no difference.

Two places ask, each with the evidence it has:
- validation (`envs._answer_check`) asks the oracle. The answer of its win is the decisive,
  final action (`decisive_action`): steps before it (a knock every solver passes, a first
  "yes") may change with the seed while the answer does not. The final answers on the
  benchmark seeds and, while those agree, on seeds drawn so that no author can know them, up
  to `ANSWER_SEEDS` in all: one answer on all of them is `fixed_answer`.
- the analysis of play (`fixed_in_play`) asks the rescues: an oracle can box a different answer
  per seed while the environment also takes a constant one, which only play shows. There the
  answer of a hinted win is what the hint changed (`hint_changed`): its steps from the first
  one that the same solver's episode without the hint (same seed and trial), which lost, did
  not play. Steps every solver passes drop out as the common start; a solver's habit of ending
  every game with the same move does not, since the route before it changed too. One such
  answer on the seeds it rescued, where validation's oracle won otherwise, is `fixed_answer`
  when chance cannot explain it (`PLAY_ALPHA`).

Pure: the standard library only.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

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

PLAY_ALPHA = 0.01
"""The analysis flags an answer the rescues share across seeds when the chance of that for an
answer that depends on the seed is at most this (`fixed_in_play`): on 4 seeds, the worst case
for an honest environment is 2 (1/4)^4 = 0.0078."""

ROUTE_CHANCE = 0.25
"""The most often a seed's rescues can all give answer c while the oracle won that seed with
another final answer, for an answer that depends on the seed: f(1 - f) <= 1/4 when solvers and
oracle each end with c with probability f, independently (the worst case: solvers that win by
another route than the oracle's, in an answer space of two)."""

UNKNOWN_CHANCE = 0.5
"""The same on a seed whose oracle answer validation did not record (a database from before the
answer check, an environment without an oracle): assumed at most 1/2."""

ANSWERS_AT_WORST = 2
"""How many answers can be that likely at once (two of share 1/2): the chance of one answer
is counted this many times, for any of them could be the one chance favoured."""

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
    included: the one that won a won episode (the answer validation compares). A transcript without steps falls back to the last
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
    """What validation's answer check recorded of the oracle: seed -> the `answer_digest` of
    its final answer, on the benchmark seeds (the seeds a run plays). Empty: no evidence."""

    by_seed: Mapping[int, str] = field(default_factory=dict)


Answer = tuple[str, ...]
"""What the hint changed in one rescue: the `answer_key`s of its steps from the first that
differs from the episode without the hint."""


def step_answers(transcript: object) -> list[str]:
    """The `answer_key` of every action a transcript stepped (`{"role": "env", "action": ...}`),
    in order."""
    if not isinstance(transcript, list | tuple):
        return []
    return [answer_key(e["action"]) for e in transcript
            if isinstance(e, dict) and e.get("role") == "env" and isinstance(e.get("action"), str)]


def hint_changed(hinted: object, unhinted: object) -> Answer | None:
    """The steps of the winning hinted transcript from the first one the losing `unhinted` one
    (same solver, seed and trial) did not play at that point: what the hint changed. None when
    there is none (a transcript without steps)."""
    with_hint, without = step_answers(hinted), step_answers(unhinted)
    same = 0
    while same < min(len(with_hint), len(without)) and with_hint[same] == without[same]:
        same += 1
    return tuple(with_hint[same:]) or None


def rescue_answers(rescues: Iterable[tuple[str, int, object, object]]) -> dict[str, dict[int, set[Answer]]]:
    """env_id -> seed -> the `hint_changed` answers of the rescues given as (env_id, seed,
    hinted transcript, unhinted transcript): the panel's matched pairs whose hinted episode won
    and whose unhinted one lost, as played."""
    out: dict[str, dict[int, set[Answer]]] = {}
    for env_id, seed, hinted, unhinted in rescues:
        answer = hint_changed(hinted, unhinted)
        if answer is not None:
            out.setdefault(str(env_id), {}).setdefault(int(seed), set()).add(answer)
    return out


def rescues(episodes: Iterable[Mapping[str, object]]) -> list[tuple[str, int, object, object]]:
    """The rescues among `episodes` (rows with `env_id`, `solver`, `seed`, `trial`, `hinted`,
    `outcome`, `self_play` and `transcript`, as played): (env_id, seed, hinted transcript,
    unhinted transcript) of every panel pair whose hinted episode is a `success` and whose
    unhinted one a `failure`."""
    pairs: dict[tuple[object, ...], dict[bool, Mapping[str, object]]] = {}
    for ep in episodes:
        if ep.get("self_play"):
            continue
        key = (ep.get("env_id"), ep.get("solver"), ep.get("seed"), ep.get("trial"))
        pairs.setdefault(key, {})[bool(ep.get("hinted"))] = ep
    out = []
    for (env_id, _solver, seed, _trial), pair in pairs.items():
        hinted, unhinted = pair.get(True), pair.get(False)
        if (hinted is not None and unhinted is not None and hinted.get("outcome") == Outcome.SUCCESS
                and unhinted.get("outcome") == Outcome.FAILURE):
            try:   # a seed read back from a data frame may be a numpy integer
                number = int(seed)  # type: ignore[call-overload]
            except (TypeError, ValueError):
                continue
            out.append((str(env_id), number, hinted.get("transcript"), unhinted.get("transcript")))
    return out


def fixed_in_play(by_seed: Mapping[int, Collection[Answer]], oracle: OracleAnswers) -> str | None:
    """Whether the rescues give one answer (`hint_changed`) on too many seeds to be chance: the
    one line saying so, else None.

    `by_seed`: seed -> the answers of the rescues on it. A seed counts for answer c when every
    rescue on it gave c. Evidence comes only from seeds where validation's oracle won with
    another final answer than c's last step (each at most `ROUTE_CHANCE` likely for an answer
    that depends on the seed) and from seeds it has no record of (`UNKNOWN_CHANCE`); a seed
    whose oracle ends as c does explains c there. The chance of at least that many such seeds
    (binomial, over the seeds of each kind with a rescue), times `ANSWERS_AT_WORST`, at most
    `PLAY_ALPHA` is `fixed_answer`: with the oracle's record, every one of 4 seeds; without it,
    8 of 8.

    An environment whose solvers win as its oracle does is never flagged here (validation
    compared those answers, and more); a hint's password behind an oracle that boxes another
    answer on each seed is, on 4 rescued seeds."""
    won = {seed: frozenset(answers) for seed, answers in by_seed.items() if answers}
    if len(won) < 2:
        return None
    known = [seed for seed in won if seed in oracle.by_seed]
    unknown = [seed for seed in won if seed not in oracle.by_seed]
    best: tuple[float, int, int] | None = None
    for answer in {next(iter(a)) for a in won.values() if len(a) == 1}:
        alone = {seed for seed, a in won.items() if a == {answer}}
        other = sum(1 for seed in known if seed in alone
                    and oracle.by_seed[seed] != answer_digest(answer[-1]))
        blind = sum(1 for seed in unknown if seed in alone)
        chance = min(1.0, ANSWERS_AT_WORST * upper_tail(len(known), other, ROUTE_CHANCE)
                     * upper_tail(len(unknown), blind, UNKNOWN_CHANCE))
        if best is None or chance < best[0]:
            best = (chance, len(alone), other)
    if best is None or best[0] > PLAY_ALPHA:
        return None
    chance, seeds, other = best
    return (f"what the hint changed in the panel's rescues (their steps from the first one the "
            f"same solver's losing episode without the hint did not play) is the same on {seeds} "
            f"of the {len(won)} seeds they rescued, on {other} of them where validation's oracle "
            f"won with another answer: the chance of that for an answer that depends on the seed "
            f"is at most {chance:.1g}")
