"""Authoring, SPEC §3: prompt an author, parse its reply, validate, let it repair, record all.

Pure parts (`parse_reply`, `author_prompt`, `repair_prompt`) are plain functions; `author_env`
is the one coroutine: it talks to the author and the validator and writes every attempt to the
run database, so a resumed run replays the conversation from the response cache and pays nothing twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from envduels._text import valid_text
from envduels.config import RunConfig
from envduels.duel.design import AuthoringSlot
from envduels.envs._spec import EnvSpec
from envduels.prompts import render
from envduels.store import EnvRecord, ValidationRecord
from envduels.store.writer import RunWriter

if TYPE_CHECKING:
    from envduels.engine.solving import PlayerLike
    from envduels.envs import Verdict

_PY_OPEN = re.compile(r"```python", re.IGNORECASE)
_FENCE = "```"
_WORD = re.compile(r"^[a-z][a-z0-9_\-]{0,31}$")


@dataclass(frozen=True)
class AuthorReply:
    """What an author's reply holds. `problems` is empty when source and hint were found."""

    source: str | None
    hint: str | None
    domain: str = "other"
    title: str = ""
    problems: list[str] = field(default_factory=list)


# A longer reply is not parsed: every scan below is linear, but the reply is untrusted and the
# event loop waits on it. The author is told, and may repair. docs/engine.md.
AUTHOR_REPLY_MAX_CHARS = 400_000


def _python_blocks(text: str) -> list[str]:
    """The bodies of ```python ... ``` blocks, left to right (the info string after `python`
    and the newline ending it are not part of the body). One pass."""
    found, pos = [], 0
    while (m := _PY_OPEN.search(text, pos)) is not None:
        newline = text.find("\n", m.end())
        if newline == -1:
            break
        close = text.find(_FENCE, newline + 1)
        if close == -1:   # no later opening can be closed either
            break
        found.append(text[newline + 1:close])
        pos = close + len(_FENCE)
    return found


def _prose(text: str) -> str:
    """`text` without its ``` code blocks (an unclosed one runs to the end). One pass."""
    parts, pos = [], 0
    while (start := text.find(_FENCE, pos)) != -1:
        parts.append(text[pos:start])
        close = text.find(_FENCE, start + len(_FENCE))
        if close == -1:
            return "".join(parts)
        pos = close + len(_FENCE)
    parts.append(text[pos:])
    return "".join(parts)


def _tag(text: str, name: str) -> str | None:
    """The content of the last <name>...</name> (each opening closed by the next closing
    tag, case-insensitive), stripped; None without one. One pass."""
    opening = re.compile(f"<{name}>", re.IGNORECASE)
    closing = re.compile(f"</{name}>", re.IGNORECASE)
    last, pos = None, 0
    while (o := opening.search(text, pos)) is not None:
        c = closing.search(text, o.end())
        if c is None:     # no later opening can be closed either
            break
        last, pos = text[o.end():c.start()], c.end()
    return None if last is None else last.strip()


def parse_reply(text: str) -> AuthorReply:
    """Parse an author's reply: the LAST ```python block, and <hint>, <domain>, <title> outside
    code blocks. `domain` is one lower-case word, "other" when absent or not one word. A reply
    over `AUTHOR_REPLY_MAX_CHARS` characters is not parsed (one problem says so); lone
    surrogates read as U+FFFD."""
    if len(text) > AUTHOR_REPLY_MAX_CHARS:
        return AuthorReply(None, None, problems=[
            f"the reply has {len(text)} characters; at most {AUTHOR_REPLY_MAX_CHARS} are read, "
            "so send one shorter reply with the environment and its hint"])
    text = valid_text(text)
    blocks = _python_blocks(text)
    source = blocks[-1].strip("\n") + "\n" if blocks else None
    prose = _prose(text)
    hint = _tag(prose, "hint")
    raw_domain = (_tag(prose, "domain") or "").strip().lower()
    domain = raw_domain if _WORD.match(raw_domain) else "other"
    title = " ".join((_tag(prose, "title") or "").split())[:120]
    problems = []
    if source is None:
        problems.append("no ```python code block found; put the whole environment in one")
    if hint is None:
        problems.append("no <hint>...</hint> found; give the privileged hint inside <hint> tags")
    return AuthorReply(source, hint, domain, title, problems)


@dataclass(frozen=True)
class Example:
    title: str
    domain: str
    hint: str
    source: str


def library_examples(n: int = 2) -> list[Example]:
    """`n` library environments as worked examples: the shortest sources, so prompts stay small."""
    from envduels.envs import library_env, library_names

    specs = sorted((library_env(name) for name in library_names()),
                   key=lambda s: (len(s.source), s.id))[:n]
    return [Example(s.title or s.id, s.domain, s.hint, s.source.strip()) for s in specs]


def author_prompt(cfg: RunConfig, *, examples: list[Example], history: str) -> str:
    """The first user turn of an author: contract, objective, limits, examples, history."""
    t, s = cfg.tournament, cfg.sandbox
    return render(
        "author_task.j2", examples=examples, history=history, max_turns=t.max_turns,
        hint_max_chars=t.hint_max_chars, require_oracle=t.require_oracle,
        step_timeout_s=f"{s.step_timeout_s:g}", memory_mb=s.memory_mb,
        observation_max_chars=s.observation_max_chars,
    )


def repair_prompt(reasons: list[str]) -> str:
    """The repair turn: the validator's reasons, one per line."""
    return render("author_repair.j2", reasons=reasons)


def own_max_turns(source: str | None) -> int:
    """An authored environment's own turn limit: the literal default of its `__init__(max_turns=
    ...)`, else 20 (the contract's), as for an environment file. It is constructed with it, and
    the turn cap of its validation and episodes is min(it, `tournament.max_turns`) (SPEC §4):
    the tournament never raises an environment's own limit."""
    from envduels.envs._spec import DEFAULT_MAX_TURNS
    from envduels.envs._static import StaticError, default_max_turns, find_env_class, parse_source

    if not source:
        return DEFAULT_MAX_TURNS
    try:
        tree = parse_source(source)
        return default_max_turns(tree, find_env_class(tree))
    except StaticError:
        return DEFAULT_MAX_TURNS   # validation says why the source is unusable


class SandboxDown(Exception):
    """Validation stopped because a sandbox could not start (`sandbox.SandboxStartError`): the
    host's fault, so the attempt is not judged; the authoring job ends like a provider error."""


class Validator(Protocol):
    """Judges one attempt on `seeds` in the run's sandboxes; raises `SandboxDown` when no
    sandbox could start (the scheduler's `validate`, over `envs.validate_env`)."""

    async def __call__(self, spec: EnvSpec, *, seeds: list[int]) -> Verdict: ...


async def author_env(job: AuthoringSlot, player: PlayerLike, *, cfg: RunConfig, writer: RunWriter,
                     validate: Validator, seeds: list[int], prompt: str) -> EnvRecord | None:
    """Author, validate and repair one environment; record every attempt and the final record.

    `validate(spec, seeds=...)` is awaited and returns an `envs.Verdict`. Returns the final
    environment record (its spec is the one validated, with the class the validator found), or
    None when the provider failed or `validate` raised `SandboxDown`
    (nothing final is recorded, so a resumed run tries again from the cached part of the
    conversation).
    """
    from envduels.players import ContextOverflow, ProviderError

    t = cfg.tournament
    messages = [{"role": "system", "content": render("author_system.txt")},
                {"role": "user", "content": prompt}]
    reasons: list[str] = []
    parsed = AuthorReply(None, None)
    for attempt in range(t.author_repairs + 1):
        try:
            reply = await player.chat(messages, call_id=f"author:{job.env_id}:attempt:{attempt}",
                                      role="author", max_tokens=player.config.author_max_tokens)
        except ProviderError:
            return None
        except ContextOverflow as err:
            reasons = [f"the conversation no longer fits the author's context ({err})"]
            break
        parsed = parse_reply(reply.text)
        verdict = None
        if not parsed.problems:
            spec = _spec(job, parsed, seeds)
            try:
                verdict = await validate(spec, seeds=seeds)
            except SandboxDown:
                return None
        attempted = ValidationRecord.of(job.env_id, attempt, author=job.author, round=job.round,
                                        verdict=verdict, reply=reply.text,
                                        problems=parsed.problems)
        writer.put_validation(attempted)
        reasons = attempted.reasons
        if attempted.valid and verdict is not None:
            record = EnvRecord(replace(spec, class_name=verdict.class_name,
                                       metadata={"attempts": attempt + 1}),
                               round=job.round, slot=job.slot)
            writer.put_environment(record)
            return record
        messages += [{"role": "assistant", "content": reply.text},
                     {"role": "user", "content": repair_prompt(reasons)}]
    record = EnvRecord(replace(_spec(job, parsed, seeds),
                               metadata={"attempts": t.author_repairs + 1}),
                       round=job.round, slot=job.slot, valid=False,
                       invalid_reason="; ".join(reasons) or "invalid")
    writer.put_environment(record)
    return record


def _spec(job: AuthoringSlot, parsed: AuthorReply, seeds: list[int]) -> EnvSpec:
    """The environment an author's reply describes (empty source when it held none)."""
    return EnvSpec(id=job.env_id, source=parsed.source or "", max_turns=own_max_turns(parsed.source),
                   domain=parsed.domain, author=job.author, title=parsed.title,
                   hints={"hint": parsed.hint or ""}, benchmark_seeds=tuple(seeds))
