"""What a config will cost before it runs: `envduels estimate CONFIG [--json]`.

The design is counted exactly: authoring jobs (rounds × environments per author, each 1 to
1 + `author_repairs` calls), fixed pools and their seeds, solvers (self-play or not), trials,
both conditions, turn caps. What cannot be known before playing is estimated:

- when the run folder already holds a run (resuming), from its own history: what it spent is
  counted exactly, and each authoring job or episode still to play costs what the recorded ones
  cost on average (per player and role), ± two standard deviations of that prediction
  (`_spread`);
- otherwise from measured library play (`LIBRARY`, below): from episodes as short as the
  library's oracles play them, with oracle-length replies and no authored environment valid, to
  every episode at its turn cap with `max_tokens` replies and every environment valid.

Prompt caching is billed as the players ask for it (docs/players.md): Anthropic reads each
turn's prefix back and writes what is new; OpenAI reads the previous prompt in 128-token steps
once it holds 1024 tokens, but only as best effort, so its hits count at the low end only.
Every figure is a low-high range; `low` is what the run costs at the least (short of luck), so
`run` refuses to start when it already exceeds `budget.max_usd`.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from envduels.config import PlayerConfig, Price, RunConfig, TournamentConfig
from envduels.duel.design import LIBRARY_AUTHOR, Design
from envduels.duel.usage import Usage
from envduels.players import cost_usd

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.store import RunReader

CHARS_PER_TOKEN = (6.0, 3.0)
"""Characters per token at the low and the high end: English prose runs about 4.5 on current
tokenizers, Python code 3-4, and no tokenizer packs 6 on average; so the low end stays below
what any provider bills for the same text, and `run` never refuses a budget it could meet."""


@dataclass(frozen=True)
class LibraryPlay:
    """Lengths measured by playing every library environment with its oracle (characters)."""

    first_observation: float
    later_observation: float
    oracle_turns: float
    oracle_action: float
    hint: float
    source: float
    source_min: float


LIBRARY = LibraryPlay(first_observation=297.0, later_observation=56.0, oracle_turns=5.5,
                      oracle_action=13.0, hint=304.0, source=3469.0, source_min=2599.0)
"""Measured with `python bench/bench_cost.py --measure` on 2026-11-30 (the 13 library
environments × seeds 0-7, each played with its oracle to the end); rerun it when the library
changes."""

OPENAI_CACHE_MIN, OPENAI_CACHE_STEP = 1024, 128
ANTHROPIC_CACHE_MIN = 1024
LATENCY_S = ((0.4, 1 / 200.0), (2.0, 1 / 30.0))
"""Seconds per call without history: (fixed, per output token) at the low and high end.
Assumed, not measured: hosted APIs answer in 0.4-2 s and stream 30-200 tokens/s."""


@dataclass(frozen=True)
class Range:
    low: float
    high: float

    def __add__(self, other: Range) -> Range:
        return Range(self.low + other.low, self.high + other.high)

    def to_json(self, digits: int | None = None) -> dict[str, float]:
        if digits is None:
            return {"low": int(round(self.low)), "high": int(round(self.high))}
        return {"low": round(self.low, digits), "high": round(self.high, digits)}


ZERO = Range(0.0, 0.0)


@dataclass
class RoleEstimate:
    """One player's figures in one role, each a `Range` between two `Usage`s (what the calls
    take at the low and the high end, an expected value: every figure a float); `source` says
    where the unknowns came from ("history (N episodes)", "history (N jobs)" or "library":
    measured library play)."""

    source: str
    low: Usage = field(default_factory=Usage)
    high: Usage = field(default_factory=Usage)
    concurrency: int = 1
    requests_per_minute: float | None = None

    def range(self, name: str) -> Range:
        """A figure from its least to its most. The two ends are the cheapest and the dearest
        run, which hold the fewest and most of everything but cache reads: the cheapest may
        read more from the cache."""
        a, b = getattr(self.low, name), getattr(self.high, name)
        return Range(min(a, b), max(a, b))

    def wall_s(self) -> Range:
        """Seconds this role keeps the player busy at its concurrency and rate limit."""
        def one(f: Usage) -> float:
            seconds = f.call_s / self.concurrency
            if self.requests_per_minute:
                seconds = max(seconds, f.calls / self.requests_per_minute * 60.0)
            return seconds
        return Range(one(self.low), one(self.high))


@dataclass
class Estimate:
    """Per player and role. `spent` (dollars already recorded) is inside every figure."""

    roles: dict[str, dict[str, RoleEstimate]]
    spent_usd: float = 0.0

    def player(self, name: str, key: str) -> Range:
        total = ZERO
        for est in self.roles[name].values():
            total = total + est.range(key)
        return total

    def total(self, key: str) -> Range:
        total = ZERO
        for name in self.roles:
            total = total + self.player(name, key)
        return total

    def wall_s(self) -> Range:
        """Authoring, then solving (a round's episodes wait for its authors); within a phase the
        players work at once, so the slowest one sets the time."""
        phases = []
        for role in ("author", "solver"):
            walls = [r[role].wall_s() for r in self.roles.values() if role in r]
            phases.append(Range(max((w.low for w in walls), default=0.0),
                                max((w.high for w in walls), default=0.0)))
        return phases[0] + phases[1]

    def _figures(self, get: Callable[[str], Range]) -> dict[str, object]:
        out: dict[str, object] = {k: get(k).to_json()
                                  for k in ("calls", "input_tokens", "output_tokens")}
        out["usd"] = get("cost_usd").to_json(4)
        out["cached_input_tokens"] = get("cache_read_tokens").to_json()
        out["cache_write_tokens"] = get("cache_write_tokens").to_json()
        out["uncached_input_tokens"] = get("uncached_input_tokens").to_json()
        return out

    def to_json(self) -> dict[str, dict[str, object]]:
        """SPEC §11: {"players": {NAME: {"calls", "input_tokens", "output_tokens", "usd"}},
        "total": ...}, each {"low", "high"}; beside them the input split, per-role figures
        with their source, wall time in seconds and the dollars already spent."""
        players: dict[str, object] = {}
        for name, roles in self.roles.items():
            entry = self._figures(functools.partial(self.player, name))
            entry["roles"] = {role: {**self._figures(est.range), "wall_s": est.wall_s().to_json(),
                                     "source": est.source} for role, est in roles.items()}
            players[name] = entry
        total = self._figures(self.total)
        total["wall_s"] = self.wall_s().to_json()
        total["spent_usd"] = round(self.spent_usd, 4)
        return {"players": players, "total": total}


# -- billing one conversation --------------------------------------------------------------------

def bill_conversation(first: float, grow: float, reply: float, calls: int, *, provider: str,
                      cache: bool, price: Price, warm_prefix: float = 0.0) -> Usage:
    """The tokens and dollars of one conversation of `calls` calls: the first prompt holds
    `first` tokens, each later one the previous prompt plus `grow` (the reply and the next user
    turn), each reply `reply` tokens. `warm_prefix` tokens of the first prompt are already in the
    provider's cache (a system prompt or task prompt shared with earlier conversations)."""
    total = Usage()
    previous = warm_prefix
    for t in range(calls):
        prompt = first + t * grow
        read = written = 0.0
        if cache and provider == "anthropic":
            read = previous if previous >= ANTHROPIC_CACHE_MIN else 0.0
            written = prompt - read if prompt >= ANTHROPIC_CACHE_MIN else 0.0
        elif cache and provider == "openai" and previous >= OPENAI_CACHE_MIN:
            read = math.floor(previous / OPENAI_CACHE_STEP) * OPENAI_CACHE_STEP
        total = total + Usage(
            calls=1, input_tokens=prompt, cache_read_tokens=read, cache_write_tokens=written,
            output_tokens=reply,
            cost_usd=cost_usd(price, round(prompt), round(reply), cache_read_tokens=round(read),
                              cache_write_tokens=round(written)))
        previous = prompt
    return total


def _caches(p: PlayerConfig, end: int) -> bool:
    """Whether the bill at this end counts prompt-cache reads: Anthropic's breakpoints read when
    asked for (`cache`); OpenAI caches by itself but only as best effort, so its hits count at
    the low end, `cache` or not, and never at the high end."""
    if p.provider == "anthropic":
        return p.cache
    return p.provider == "openai" and end == 0


def _tokens(chars: float, end: int) -> float:
    """Tokens of `chars` characters at the low (0) or high (1) end."""
    return chars / CHARS_PER_TOKEN[end]


def _latency(f: Usage, end: int) -> Usage:
    fixed, per_token = LATENCY_S[end]
    return replace(f, call_s=f.calls * fixed + f.output_tokens * per_token)


# -- the design ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Env:
    env_id: str
    author: str
    seeds: int
    max_turns: int


@dataclass
class _Plan:
    """What is left to play, exactly where known: per author, jobs left by round; per solver,
    episodes left on known environments (with their turn caps) and per unwritten environment."""

    jobs: dict[str, dict[int, int]]
    episodes: dict[str, list[tuple[int, int]]]      # solver -> [(episodes, turn cap)]
    unwritten: dict[str, int]                      # solver -> episodes per env if all valid
    unwritten_envs: dict[str, int]                 # solver -> environments not yet written


def _plan(cfg: RunConfig, fixed_envs: list[EnvSpec], store: RunReader | None) -> _Plan:
    """What the design (`duel.design.Design`) still holds, given what `store` recorded."""
    design = Design.of(cfg)
    recorded = {e.env_id: e for e in store.environments()} if store is not None else {}
    finished: dict[tuple[str, str], int] = defaultdict(int)
    if store is not None:
        finished.update(store.finished_by_env_and_solver())
    known: list[_Env] = []
    for spec in fixed_envs:
        row = recorded.get(spec.id)
        seeds = len(row.benchmark_seeds) if row else design.pool_seeds(spec.benchmark_seeds)
        known.append(_Env(spec.id, spec.author or LIBRARY_AUTHOR, seeds, spec.max_turns))
    known += [_Env(e.env_id, e.author, len(e.benchmark_seeds), e.max_turns)
              for e in recorded.values() if e.valid and not e.fixed_pool]
    jobs: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    unwritten_by_author: dict[str, int] = defaultdict(int)
    for job in design.authoring_jobs():
        if job.env_id not in recorded:
            jobs[job.author][job.round] += 1
            unwritten_by_author[job.author] += 1
    episodes: dict[str, list[tuple[int, int]]] = defaultdict(list)
    unwritten: dict[str, int] = defaultdict(int)
    unwritten_envs: dict[str, int] = defaultdict(int)
    for s in design.seats:
        for env in known:
            n = design.episodes_per_env(s, env.author, env.seeds) - finished[(env.env_id, s.name)]
            if n > 0:
                episodes[s.name].append((n, design.turn_cap(env.max_turns)))
        for author, count in unwritten_by_author.items():
            per_env = design.episodes_per_env(s, author, design.seeds_per_env)
            if per_env:
                unwritten[s.name] += per_env * count
                unwritten_envs[s.name] += count
    return _Plan(jobs, episodes, unwritten, unwritten_envs)


# -- history ---------------------------------------------------------------------------------------

_EPISODE = re.compile(r"^ep:(.+):turn:\d+$")
_AUTHORING = re.compile(r"^author:(.+):attempt:\d+$")


@dataclass
class _History:
    """Per (player, role): the recorded units (episodes or authoring jobs), each as a `Usage`,
    and the recorded spend."""

    units: dict[tuple[str, str], list[Usage]]
    spent: dict[tuple[str, str], Usage]
    valid_share: float | None


def _history(store: RunReader) -> _History:
    units: dict[tuple[str, str], dict[str, Usage]] = defaultdict(dict)
    spent: dict[tuple[str, str], Usage] = defaultdict(Usage)
    for player, role, call_id, t, latency in store.call_usage():
        f = Usage(calls=1, input_tokens=t.input_tokens, cache_read_tokens=t.cache_read_tokens,
                  cache_write_tokens=t.cache_write_tokens, output_tokens=t.output_tokens,
                  cost_usd=t.cost_usd, call_s=latency)
        who = (str(player), str(role))
        spent[who] = spent[who] + f
        call_id = str(call_id or "")
        m = _EPISODE.match(call_id) or _AUTHORING.match(call_id)
        if m:
            unit = units[who].setdefault(m.group(1), Usage())
            units[who][m.group(1)] = unit + f
    authored = [e for e in store.environments() if not e.fixed_pool]
    share = sum(e.valid for e in authored) / len(authored) if authored else None
    return _History({k: list(v.values()) for k, v in units.items()}, dict(spent), share)


def _spread(units: list[Usage], count: float, calls_per_unit: tuple[float, float] | None = None
            ) -> tuple[Usage, Usage]:
    """`count` more units like the `n` recorded `units`: count × their mean ∓ 2 standard
    deviations of the prediction, sd·√(count + count²/n): the spread of `count` new draws plus
    the uncertainty of a mean taken from `n` (never below zero). One unit tells no spread: its
    figures are taken to vary as much as they are large (sd = mean). `calls_per_unit` bounds
    the calls by the design (an authoring job makes 1 to 1 + repairs)."""
    n = len(units)
    mean = Usage()
    for u in units:
        mean = mean + u.scaled(1 / n)
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for f in fields(Usage):
        values = [getattr(u, f.name) for u in units]
        m = getattr(mean, f.name)
        sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else m
        margin = 2 * sd * math.sqrt(count + count * count / n)
        low[f.name] = max(0.0, count * m - margin)
        high[f.name] = count * m + margin
    if calls_per_unit is not None:
        low["calls"] = max(low["calls"], count * calls_per_unit[0])
        high["calls"] = min(high["calls"], count * calls_per_unit[1])
    return Usage(**low), Usage(**high)


# -- the estimate ----------------------------------------------------------------------------------

def estimate(cfg: RunConfig, *, fixed_envs: list[EnvSpec], store: RunReader | None = None) -> Estimate:
    """The estimate of the whole run of `cfg` (what `store`, a run database of it, already
    spent included); `fixed_envs` are its fixed-pool environments (`checks.load_fixed_envs`)."""
    from envduels.engine.authoring import author_prompt, library_examples, repair_prompt
    from envduels.engine.solving import SYSTEM_PROMPT, first_turn, next_turn
    from envduels.prompts import render

    plan = _plan(cfg, fixed_envs, store)
    history = _history(store) if store is not None else None
    t = cfg.tournament
    lib = LIBRARY
    chars = {"solver_system": len(SYSTEM_PROMPT), "first": len(first_turn("", hint="")),
             "next": len(next_turn("")), "author_system": len(render("author_system.txt")),
             "task": len(author_prompt(cfg, examples=library_examples(2), history="")),
             "repair": len(repair_prompt(["x" * 120]))}
    roles: dict[str, dict[str, RoleEstimate]] = {}
    spent_total = 0.0
    digests = _digest_sizes(cfg, store) if store is not None else {}

    for p in cfg.players:
        roles[p.name] = {}
        for role in p.roles:
            spent = history.spent.get((p.name, role), Usage()) if history else Usage()
            spent_total += spent.cost_usd
            units = history.units.get((p.name, role), []) if history else []
            est = RoleEstimate(source="library", concurrency=p.concurrency.units,
                               requests_per_minute=p.requests_per_minute)
            if role == "author":
                count = sum(plan.jobs.get(p.name, {}).values())
                if units:
                    est.source = f"history ({len(units)} jobs)"
                    low, high = _spread(units, count, (1, 1 + t.author_repairs))
                    low, high = _add_digests(low, high, p, plan.jobs.get(p.name, {}), units,
                                             digests, t)
                else:
                    low, high = _author_library(p, t, count, chars, lib)
            else:
                envs_low = 0.0
                envs_high = float(plan.unwritten_envs.get(p.name, 0))
                if units:
                    share = history.valid_share if history else None
                    n_known = sum(n for n, _ in plan.episodes.get(p.name, []))
                    per_env = plan.unwritten[p.name] / envs_high if envs_high else 0.0
                    if share is not None:
                        envs_low = envs_high = envs_high * share
                    est.source = f"history ({len(units)} episodes)"
                    low, _ = _spread(units, n_known + envs_low * per_env)
                    _, high = _spread(units, n_known + envs_high * per_env)
                else:
                    low, high = _solver_library(p, t, plan, chars, lib)
            est.low, est.high = low + spent, high + spent
            roles[p.name][role] = est
    return Estimate(roles, spent_usd=spent_total)


def _digest_sizes(cfg: RunConfig, store: RunReader) -> dict[str, tuple[int, float]]:
    """Per author: (the first round not yet started, the characters of the history digest its
    prompt will carry): exact, from the recorded results."""
    from envduels.engine.history import history_digest

    t = cfg.tournament
    if t.history == "none":
        return {}
    started = max((e.round for e in store.environments() if not e.fixed_pool), default=0)
    tables = store.tables()
    return {p.name: (started + 1, len(history_digest(
        tables, author=p.name, round_=started + 1, mode=t.history, max_chars=t.history_chars)))
        for p in cfg.players if p.authors}


def _add_digests(low: Usage, high: Usage, p: PlayerConfig, jobs: dict[int, int],
                 units: list[Usage], digests: dict[str, tuple[int, float]],
                 t: TournamentConfig) -> tuple[Usage, Usage]:
    """`low` and `high` with the history digest authoring jobs of later rounds carry in every
    call: the next round's as it will be; a round after it from that size (low) to
    `history_chars` (high). Recorded jobs of round 2 and later hold a digest already, so with
    them this leans high."""
    if p.name not in digests:
        return low, high
    first, size = digests[p.name]
    calls_per_job = sum(u.calls for u in units) / len(units)

    def carry(f: Usage, extra: float) -> Usage:
        return replace(f, input_tokens=f.input_tokens + extra,
                       cost_usd=f.cost_usd + extra * p.price.input_per_mtok / 1e6)

    for rnd, n in jobs.items():
        if rnd < max(first, 2):
            continue
        extra_low = _tokens(size, 0) * calls_per_job * n
        extra_high = _tokens(size if rnd == first else max(size, t.history_chars), 1) * (
            calls_per_job * n)
        low, high = carry(low, extra_low), carry(high, extra_high)
    return low, high


def _solver_library(p: PlayerConfig, t: TournamentConfig, plan: _Plan, chars: dict[str, int],
                    lib: LibraryPlay) -> tuple[Usage, Usage]:
    """Episodes left, billed from library lengths: low, every episode won as fast as the
    library's oracles win with oracle-length replies and no authored environment valid; high,
    every episode played to its cap with `max_tokens` replies and every environment valid."""
    ends = []
    for end in (0, 1):
        def tok(c: float, end: int = end) -> float:
            return _tokens(c, end)
        system = tok(chars["solver_system"])
        first = system + tok(lib.first_observation + chars["first"] + lib.hint / 2)
        reply = tok(lib.oracle_action) if end == 0 else float(p.max_tokens)
        grow = reply + tok(lib.later_observation + chars["next"])
        total = Usage()
        batches = list(plan.episodes.get(p.name, []))
        if end == 1:   # every environment not yet written turns out valid
            batches.append((plan.unwritten.get(p.name, 0), t.max_turns))
        for n, cap in batches:
            turns = cap if end == 1 else max(1, min(cap, round(lib.oracle_turns)))
            # the system prompt is shared by every episode of this solver
            one = bill_conversation(first, grow, reply, turns, provider=p.provider,
                                    cache=_caches(p, end), price=p.price, warm_prefix=system)
            total = total + _latency(one, end).scaled(n)
        ends.append(total)
    return ends[0], ends[1]


def _author_library(p: PlayerConfig, t: TournamentConfig, jobs: int, chars: dict[str, int],
                    lib: LibraryPlay) -> tuple[Usage, Usage]:
    """Authoring jobs left, billed from library lengths: low, one attempt with a reply as long
    as a library hint, every job after the first reading the shared task
    prompt from the cache; high, every repair used, replies of `author_max_tokens`, later
    rounds' prompts with a full history digest, nothing read from the cache before."""
    if not jobs:
        return Usage(), Usage()
    prompt = chars["author_system"] + chars["task"]
    reply_low = _tokens(lib.hint, 0)   # a reply holds a hint at least (or it is repaired)
    one_low = bill_conversation(_tokens(prompt, 0), 0.0, reply_low, 1, provider=p.provider,
                                cache=_caches(p, 0), price=p.price,
                                warm_prefix=_tokens(prompt, 0))
    reply_high = float(p.author_max_tokens or p.max_tokens)
    digest = t.history_chars if t.history != "none" and t.rounds > 1 else 0
    one_high = bill_conversation(_tokens(prompt + digest, 1),
                                 reply_high + _tokens(chars["repair"], 1), reply_high,
                                 1 + t.author_repairs, provider=p.provider,
                                 cache=_caches(p, 1), price=p.price)
    return _latency(one_low, 0).scaled(jobs), _latency(one_high, 1).scaled(jobs)


# -- the command -----------------------------------------------------------------------------------

def estimate_for(cfg: RunConfig, fixed_envs: list[EnvSpec]) -> Estimate:
    """The estimate of `cfg`, from its run folder's history when one exists (read only)."""
    from envduels.store import DB_NAME, RunReader

    store = None
    if (Path(cfg.run_dir) / DB_NAME).is_file():
        store = RunReader(cfg.run_dir)
    try:
        return estimate(cfg, fixed_envs=fixed_envs, store=store)
    finally:
        if store is not None:
            store.close()


def usd(x: float) -> str:
    """Dollars as `run` and `estimate` print them: cents from $1 up, else four decimals."""
    return f"${x:,.2f}" if x >= 1 else f"${x:.4f}"


def dollars(r: Range) -> str:
    """A dollar range as `run` and `estimate` print it."""
    return f"{usd(r.low)}-{usd(r.high)}"
