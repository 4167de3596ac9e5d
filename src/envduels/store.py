"""The run database: `RUN_DIR/run.db`, SQLite in WAL mode. The only module that writes SQL.

Everything a run produces is written here as soon as it exists, one committed transaction per
record, so a kill loses at most the work in flight:

- `meta`: the config JSON, its fingerprint and the result-affecting settings (for resume checks).
- `calls`: every model call by request key (the `players.ResponseCache`): a resumed run asks the
  cache first and never pays twice. Its bill is in columns: tokens (input split into uncached,
  cache read and cache write; reasoning within output), cost and what prompt caching saved; a
  database written before the split is migrated when opened.
- `environments`: one row per environment (authored, or from a fixed pool), final once written.
- `validations`: every authoring attempt with the validator's verdict.
- `episodes`: one row per episode key with its transcript, outcome and reason.
- `audits`: one row per audited episode (its replay `passed` or was a `mismatch`); a played
  episode (success or failure) without one is still to be audited, also after a resume. The
  table is created on open, so a run database from before audits exists gains it empty.

Readers (analysis, report, export) use `Store.tables()`; nothing outside this module runs SQL.
Commands that only read open the database with `Store.open_readonly`, which writes nothing in
the run folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from envduels._text import valid_text
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.config import RunConfig

DB_NAME = "run.db"
LOCK_NAME = "run.lock"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY, player TEXT, role TEXT, call_id TEXT,
    record TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER,
    cost_usd REAL, latency_s REAL, created REAL, cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0, reasoning_tokens INTEGER DEFAULT 0,
    saved_usd REAL DEFAULT 0);
CREATE TABLE IF NOT EXISTS environments (
    env_id TEXT PRIMARY KEY, author TEXT, round INTEGER, slot INTEGER, domain TEXT, title TEXT,
    valid INTEGER, invalid_reason TEXT, hint TEXT, hints TEXT, source TEXT, source_sha256 TEXT,
    class_name TEXT, max_turns INTEGER, fixed_pool INTEGER, benchmark_seeds TEXT,
    metadata TEXT, created REAL);
CREATE TABLE IF NOT EXISTS validations (
    env_id TEXT, attempt INTEGER, author TEXT, round INTEGER, valid INTEGER, reasons TEXT,
    verdict TEXT, reply TEXT, created REAL, PRIMARY KEY (env_id, attempt));
CREATE TABLE IF NOT EXISTS episodes (
    episode_key TEXT PRIMARY KEY, env_id TEXT, author TEXT, solver TEXT, round INTEGER,
    domain TEXT, seed INTEGER, trial INTEGER, hinted INTEGER, outcome TEXT, reason TEXT,
    turns INTEGER, self_play INTEGER, transcript TEXT, created REAL);
CREATE TABLE IF NOT EXISTS audits (
    episode_key TEXT PRIMARY KEY, env_id TEXT, state TEXT NOT NULL, detail TEXT,
    played_outcome TEXT, created REAL);
"""

AUDIT_REASON = "replay audit"
"""Every episode the replay audit holds against its environment has a reason starting with this:
the episode that did not replay, and (in `Store.tables`) every other episode of that environment."""

PLAYER_COLUMNS = ["name", "provider", "model", "params_b", "roles", "cost_usd", "input_tokens",
                  "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                  "saved_usd"]

# Columns of `calls` added after the first release, with what an older row holds: a run
# database written before them is migrated when opened (its calls read as uncached).
_CALL_SPLIT = {"cache_read_tokens": "INTEGER DEFAULT 0", "cache_write_tokens": "INTEGER DEFAULT 0",
               "reasoning_tokens": "INTEGER DEFAULT 0", "saved_usd": "REAL DEFAULT 0"}
ENVIRONMENT_COLUMNS = ["env_id", "author", "round", "domain", "title", "valid", "invalid_reason",
                       "hint", "source", "source_sha256", "class_name", "max_turns", "fixed_pool",
                       "benchmark_seeds"]
EPISODE_COLUMNS = ["episode_key", "env_id", "author", "solver", "round", "domain", "seed", "trial",
                   "hinted", "outcome", "reason", "turns", "self_play", "transcript"]


def _text(value: str | None) -> str | None:
    """Text for a TEXT column: lone surrogates (from environment code or a model reply) as
    U+FFFD, since SQLite stores UTF-8 and one such character would stop the run."""
    return valid_text(value) if isinstance(value, str) else value


def _json(value: Any, **kwargs: Any) -> str:
    """`value` as JSON with every lone surrogate in it as U+FFFD (not as a `\\udXXX` escape,
    which would come back as a lone surrogate when read)."""
    return valid_text(json.dumps(value, ensure_ascii=False, **kwargs))


@dataclass
class Tables:
    """The analysis view of a run: pandas DataFrames, one row per item.

    players:      name, provider, model, params_b, roles (list), cost_usd, input_tokens,
                  output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                  saved_usd (totals over every call recorded in the run; see `Totals`)
    environments: env_id, author, round, domain, title, valid (bool), invalid_reason, hint, source,
                  source_sha256, class_name, max_turns, fixed_pool (bool), benchmark_seeds (list)
    episodes:     episode_key, env_id, author, solver, round, domain, seed, trial, hinted (bool),
                  outcome ("success"|"failure"|"incomplete"|"error"), reason, turns,
                  self_play (bool), transcript (list of {role, content, ...}); every
                  success or failure of an environment the replay audit caught reads here as
                  `incomplete` with a reason starting with `AUDIT_REASON`
    """

    players: pd.DataFrame
    environments: pd.DataFrame
    episodes: pd.DataFrame


@dataclass(frozen=True)
class EnvironmentRow:
    """One environment as the engine records it (authored or from a fixed pool)."""

    env_id: str
    author: str
    round: int
    slot: int
    domain: str
    title: str
    valid: bool
    invalid_reason: str | None
    hints: dict[str, str]
    source: str
    source_sha256: str
    class_name: str | None
    max_turns: int
    fixed_pool: bool
    benchmark_seeds: tuple[int, ...]
    metadata: dict[str, Any]

    @property
    def hint(self) -> str:
        return self.hints.get("hint") or self.hints.get("hint_1") or ""


@dataclass(frozen=True)
class EpisodeRow:
    """One finished episode (any outcome, `error` included)."""

    episode_key: str
    env_id: str
    author: str
    solver: str
    round: int
    domain: str
    seed: int
    trial: int
    hinted: bool
    outcome: str
    reason: str
    turns: int
    self_play: bool
    transcript: list[dict[str, Any]]


@dataclass(frozen=True)
class Totals:
    """Calls and what they were billed. `input_tokens` is whole prompts, of which
    `cache_read_tokens` were read from and `cache_write_tokens` written to the provider's prompt
    cache; `reasoning_tokens` are within `output_tokens`; `saved_usd` is what the prompt cache
    saved against billing every input token at the input price."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    saved_usd: float = 0.0

    @property
    def uncached_input_tokens(self) -> int:
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    def plus(self, other: Totals) -> Totals:
        return Totals(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _fields(t: Totals) -> tuple:
    return (t.calls, t.input_tokens, t.output_tokens, t.cost_usd, t.cache_read_tokens,
            t.cache_write_tokens, t.reasoning_tokens, t.saved_usd)


@contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold `RUN_DIR/run.lock` exclusively (flock) while the block runs: one `envduels run`
    per run folder, or both would play and pay for the same work. A second one fails at once
    with a UserError naming the holder's pid. Readers (status, report) take no lock. The lock
    goes with the process, however it ends; the file stays.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UserError(f"cannot create the run lock {path} ({err.strerror or err}); choose a "
                        "writable output_dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"pid {holder}" if holder.isdigit() else "another process"
            raise UserError(f"{run_dir} is in use by another envduels run ({who}); wait for it "
                            "to finish or stop it, or set output_dir to another folder") from None
        # one write of a fixed width: a reader never sees the file empty or half the old pid
        os.pwrite(fd, f"{os.getpid():>12}\n".encode(), 0)
        os.ftruncate(fd, 13)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)   # releases the lock


class Store:
    """The run database of one run folder. Safe to share between threads of one process.

    Every write commits before returning. Opening a folder that holds no `run.db` creates it.
    """

    def __init__(self, run_dir: str | Path, *, create: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        if not create and not self.path.is_file():
            raise UserError(
                f"{self.run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                "started with `envduels run CONFIG`"
            )
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                       timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._migrate()
        except (OSError, sqlite3.Error) as err:
            raise UserError(
                f"cannot open the run database {self.path} ({err}); choose a writable output_dir"
            ) from None
        self._lock = threading.Lock()
        self._totals: Totals | None = None
        self.readonly = False

    # -- plumbing ---------------------------------------------------------------------------

    def _migrate(self, *, write: bool = True) -> None:
        """Add the columns a database written by an older envduels lacks. Where it cannot (or,
        without `write`, may not) be written, its missing columns read as zeros."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(calls)")}
        for column, kind in _CALL_SPLIT.items():
            if column not in have and write:
                try:
                    self._db.execute(f"ALTER TABLE calls ADD COLUMN {column} {kind}")
                    have.add(column)
                except sqlite3.OperationalError:
                    pass
        self._sums = _sums(have)
        self._each = _sums(have, per_call=True)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise UserError(f"{self.path} was opened read-only; this command only reads it")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> Any | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    def run_config(self) -> RunConfig | None:
        """The config the run was last started with, validated (`config.parse_recorded_config`:
        a config recorded by another version still reads, with today's defaults for what it
        lacks); None when none was recorded or it cannot be read."""
        from envduels.config import parse_recorded_config

        return parse_recorded_config(self.get_meta("config"))

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                       (key, _json(value, sort_keys=True)))

    # -- calls: the players.ResponseCache ---------------------------------------------------

    def get(self, key: str) -> dict | None:
        """The recorded call for a request key, or None (players.ResponseCache)."""
        rows = self._query("SELECT record FROM calls WHERE key = ?", (valid_text(key),))
        return json.loads(rows[0][0]) if rows else None

    def put(self, key: str, record: dict, *, repeat: bool = False) -> None:
        """Record one finished model call (players.ResponseCache); a key already present is kept.

        With `repeat`, a call paid again although `key` is recorded (`envduels run --no-cache`)
        is kept too, as `KEY#2`, `KEY#3`, ...: totals and the budget count what was paid, and
        `get(key)` still answers with the first record.
        """
        key = valid_text(key)
        usage = record.get("usage") or {}
        inp = int(record.get("input_tokens", usage.get("input_tokens", 0)) or 0)
        out = int(record.get("output_tokens", usage.get("output_tokens", 0)) or 0)
        cost = float(record.get("cost_usd", usage.get("cost_usd", 0.0)) or 0.0)
        read = int(usage.get("cache_read_tokens", 0) or 0)
        written = int(usage.get("cache_write_tokens", 0) or 0)
        reasoning = int(usage.get("reasoning_tokens", 0) or 0)
        saved = float(record.get("saved_usd", 0.0) or 0.0)
        with self._tx() as db:
            if repeat:
                (n,), = db.execute(   # KEY and every KEY#n ('$' sorts right after '#')
                    "SELECT COUNT(*) FROM calls WHERE key = ? OR (key >= ? AND key < ?)",
                    (key, key + "#", key + "$"))
                if n:
                    key = f"{key}#{n + 1}"
            cur = db.execute(
                "INSERT OR IGNORE INTO calls (key, player, role, call_id, record, input_tokens,"
                " output_tokens, cost_usd, latency_s, created, cache_read_tokens,"
                " cache_write_tokens, reasoning_tokens, saved_usd)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (key, _text(record.get("player")), _text(record.get("role")),
                 _text(record.get("call_id")), _json(record, sort_keys=True, default=str),
                 inp, out, cost,
                 float(record.get("latency_s", 0.0) or 0.0), time.time(), read, written,
                 reasoning, saved),
            )
            inserted = cur.rowcount == 1
        if inserted and self._totals is not None:
            self._totals = self._totals.plus(
                Totals(1, inp, out, cost, read, written, reasoning, saved))

    def recorder(self) -> CallRecorder:
        """This database as a `players.ResponseCache` that records every call and answers none."""
        return CallRecorder(self)

    def call_records(self) -> list[dict]:
        """Every recorded call, oldest first."""
        return [json.loads(r[0]) for r in self._query("SELECT record FROM calls ORDER BY rowid")]

    def call_usage(self) -> list[tuple[str, str, str, Totals, float]]:
        """(player, role, call_id, its `Totals`, latency_s) of every recorded call, oldest first,
        without reading the bulky records (the estimate reads a whole run's history)."""
        rows = self._query(f"SELECT player, role, call_id, {self._each}, latency_s FROM calls"
                           " ORDER BY rowid")
        return [(p, r, c, _totals(row[3:-1]), float(row[-1] or 0.0)) for row in rows
                for p, r, c in [row[:3]]]

    def totals(self) -> Totals:
        """Calls, tokens and cost over every call recorded in this run (all sessions)."""
        if self._totals is None:
            (row,) = self._query(f"SELECT {self._sums} FROM calls")
            self._totals = _totals(row)
        return self._totals

    def solving_span(self) -> tuple[float, float] | None:
        """(start of the first solver call, end of the last episode) in Unix seconds, or None."""
        (start, end), = self._query(
            "SELECT (SELECT MIN(created - latency_s) FROM calls WHERE role = 'solver'),"
            " (SELECT MAX(created) FROM episodes)")
        return None if start is None or end is None else (float(start), float(end))

    def usage_by_player(self) -> dict[str, Totals]:
        """`Totals` per player over every call recorded in this run."""
        rows = self._query(f"SELECT player, {self._sums} FROM calls GROUP BY player")
        return {r[0]: _totals(r[1:]) for r in rows}

    # -- environments and validations -------------------------------------------------------

    def put_environment(self, env: EnvironmentRow) -> None:
        """Record an environment's final state (valid or invalid); replaces an earlier row."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO environments VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (_text(env.env_id), _text(env.author), env.round, env.slot, _text(env.domain),
                 _text(env.title), int(env.valid), _text(env.invalid_reason), _text(env.hint),
                 _json(env.hints), _text(env.source), env.source_sha256,
                 _text(env.class_name), env.max_turns, int(env.fixed_pool),
                 json.dumps(list(env.benchmark_seeds)),
                 _json(env.metadata, sort_keys=True, default=str), time.time()),
            )

    def environment(self, env_id: str) -> EnvironmentRow | None:
        rows = self._query("SELECT * FROM environments WHERE env_id = ?", (env_id,))
        return _env_row(rows[0]) if rows else None

    def environments(self) -> list[EnvironmentRow]:
        return [_env_row(r) for r in self._query("SELECT * FROM environments ORDER BY rowid")]

    def put_validation(self, env_id: str, attempt: int, *, author: str, round: int, valid: bool,
                       reasons: list[str], verdict: dict | None, reply: str) -> None:
        """Record one authoring attempt; the same (env, attempt) written again replaces it."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO validations VALUES (?,?,?,?,?,?,?,?,?)",
                (_text(env_id), attempt, _text(author), round, int(valid), _json(reasons),
                 _json(verdict, default=str), _text(reply), time.time()),
            )

    def validations(self, env_id: str | None = None) -> list[dict]:
        sql = "SELECT env_id, attempt, author, round, valid, reasons, verdict, reply FROM validations"
        args: tuple = ()
        if env_id is not None:
            sql += " WHERE env_id = ?"
            args = (env_id,)
        rows = self._query(sql + " ORDER BY env_id, attempt", args)
        return [
            {"env_id": e, "attempt": a, "author": au, "round": r, "valid": bool(v),
             "reasons": json.loads(rs), "verdict": json.loads(vd), "reply": rp}
            for e, a, au, r, v, rs, vd, rp in rows
        ]

    def put_authoring_error(self, env_id: str, *, author: str, round: int) -> None:
        """Note that authoring `env_id` ended in `error` (a provider kept failing, a sandbox
        could not start): nothing else is recorded for it, and `status` must still say so.
        A later success records the environment, which `authoring_errors` then leaves out."""
        with self._tx() as db:
            rows = db.execute("SELECT value FROM meta WHERE key = 'authoring_errors'").fetchall()
            errors = json.loads(rows[0][0]) if rows else {}
            errors[valid_text(env_id)] = {"author": _text(author), "round": round}
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('authoring_errors', ?)",
                       (_json(errors, sort_keys=True),))

    def authoring_errors(self) -> dict[str, dict[str, Any]]:
        """Authoring jobs whose last try ended in `error` and that have no environment yet:
        env_id -> {"author", "round"}. A resumed run retries them."""
        errors = self.get_meta("authoring_errors") or {}
        recorded = {r[0] for r in self._query("SELECT env_id FROM environments")}
        return {k: v for k, v in errors.items() if k not in recorded}

    # -- episodes ---------------------------------------------------------------------------

    def put_episode(self, ep: EpisodeRow) -> None:
        """Record an episode; a later result for the same key (an `error` retried) replaces it."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO episodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (_text(ep.episode_key), _text(ep.env_id), _text(ep.author), _text(ep.solver),
                 ep.round, _text(ep.domain), ep.seed, ep.trial, int(ep.hinted), ep.outcome,
                 _text(ep.reason), ep.turns, int(ep.self_play),
                 _json(ep.transcript, default=str), time.time()),
            )

    def finished_episode_keys(self) -> set[str]:
        """Keys of episodes that need no replay: every outcome except `error`."""
        return {r[0] for r in self._query("SELECT episode_key FROM episodes WHERE outcome != 'error'")}

    def finished_by_env_and_solver(self) -> dict[tuple[str, str], int]:
        """How many episodes that need no replay (every outcome but `error`) each (environment,
        solver) has, without reading transcripts."""
        rows = self._query("SELECT env_id, solver, COUNT(*) FROM episodes WHERE outcome != 'error'"
                           " GROUP BY env_id, solver")
        return {(e, s): int(n) for e, s, n in rows}

    def episode_counts(self) -> dict[str, int]:
        return dict(self._query("SELECT outcome, COUNT(*) FROM episodes GROUP BY outcome"))

    def episodes(self) -> list[EpisodeRow]:
        return [_episode_row(r) for r in self._query("SELECT * FROM episodes ORDER BY rowid")]

    # -- replay audits ----------------------------------------------------------------------

    def put_audit(self, episode_key: str, env_id: str, *, passed: bool, detail: str = "") -> None:
        """Record the replay audit of a played episode. A mismatch also turns the episode into
        `incomplete` with the reason `"replay audit: DETAIL"` (the outcome as played is kept in
        the audit row), in the same transaction."""
        with self._tx() as db:
            row = db.execute("SELECT outcome FROM episodes WHERE episode_key = ?",
                             (episode_key,)).fetchone()
            played = row[0] if row else None
            if not passed and played != "incomplete":
                db.execute("UPDATE episodes SET outcome = 'incomplete', reason = ? "
                           "WHERE episode_key = ?", (_text(f"{AUDIT_REASON}: {detail}"),
                                                     episode_key))
            db.execute(
                "INSERT OR REPLACE INTO audits (episode_key, env_id, state, detail, played_outcome,"
                " created) VALUES (?,?,?,?,?,?)",
                (episode_key, _text(env_id), "passed" if passed else "mismatch", _text(detail),
                 played, time.time()))

    def unaudited_episodes(self) -> list[EpisodeRow]:
        """Played episodes (success or failure) whose replay audit is not recorded yet."""
        return [_episode_row(r) for r in self._query(
            "SELECT * FROM episodes WHERE outcome IN ('success', 'failure') AND episode_key NOT IN"
            " (SELECT episode_key FROM audits) ORDER BY rowid")]

    def unaudited_count(self) -> int:
        """How many played episodes still wait for their replay audit."""
        (n,), = self._query(
            "SELECT COUNT(*) FROM episodes WHERE outcome IN ('success', 'failure') AND episode_key"
            " NOT IN (SELECT episode_key FROM audits)")
        return int(n)

    def nondeterministic_environments(self) -> dict[str, str]:
        """Environments whose replay audit found a mismatch: env id -> the first difference."""
        out: dict[str, str] = {}
        for env_id, detail in self._query(
                "SELECT env_id, detail FROM audits WHERE state = 'mismatch' ORDER BY rowid"):
            out.setdefault(env_id, detail)
        return out

    def audit_counts(self) -> dict[str, int]:
        """Recorded audits by state (`passed`, `mismatch`)."""
        return dict(self._query("SELECT state, COUNT(*) FROM audits GROUP BY state"))

    # -- the analysis view ------------------------------------------------------------------

    def tables(self) -> Tables:
        """Players, environments and episodes as DataFrames (see `Tables`)."""
        return self._frames([{c: getattr(e, c) for c in EPISODE_COLUMNS} for e in self.episodes()])

    def _frames(self, eps: list[dict[str, Any]]) -> Tables:
        """The analysis tables around `eps` (episode records with every EPISODE_COLUMNS key):
        the one place that decides what analysis sees of a run, for `tables()` and
        `summary_tables()` alike."""
        config = self.run_config()
        usage = self.usage_by_player()
        players = []
        for p in config.players if config is not None else []:
            u = usage.get(p.name, Totals(0, 0, 0, 0.0))
            players.append({
                "name": p.name, "provider": p.provider, "model": p.model,
                "params_b": p.params_b, "roles": list(p.roles),
                "cost_usd": u.cost_usd, "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens, "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens,
                "reasoning_tokens": u.reasoning_tokens, "saved_usd": u.saved_usd,
            })
        envs = [
            {"env_id": e.env_id, "author": e.author, "round": e.round, "domain": e.domain,
             "title": e.title, "valid": e.valid, "invalid_reason": e.invalid_reason,
             "hint": e.hint, "source": e.source, "source_sha256": e.source_sha256,
             "class_name": e.class_name, "max_turns": e.max_turns, "fixed_pool": e.fixed_pool,
             "benchmark_seeds": list(e.benchmark_seeds)}
            for e in self.environments()
        ]
        # an environment the replay audit caught is its author's fault in every episode: none
        # of them is a success or failure for anyone (SPEC §4: incomplete)
        caught = self.nondeterministic_environments()
        for ep in eps:
            if ep["env_id"] in caught and ep["outcome"] in ("success", "failure"):
                ep["outcome"] = "incomplete"
                ep["reason"] = (f"{AUDIT_REASON}: the environment is nondeterministic "
                                f"({caught[ep['env_id']]})")
        env_df = pd.DataFrame(envs, columns=ENVIRONMENT_COLUMNS)
        ep_df = pd.DataFrame(eps, columns=EPISODE_COLUMNS)
        for df, cols in ((env_df, ("valid", "fixed_pool")), (ep_df, ("hinted", "self_play"))):
            for c in cols:
                df[c] = df[c].astype(bool)
        # A canonical order, not the order work happened to finish in: the same tournament must
        # give the same report (seeded bootstraps draw by position) on any executor.
        env_df = env_df.sort_values("env_id", kind="stable").reset_index(drop=True)
        ep_df = ep_df.sort_values(["env_id", "solver", "seed", "trial", "hinted"],
                                  kind="stable").reset_index(drop=True)
        return Tables(
            players=pd.DataFrame(players, columns=PLAYER_COLUMNS),
            environments=env_df,
            episodes=ep_df,
        )

    # -- read-only opening and the viewer's reads -------------------------------------------

    @classmethod
    def open_readonly(cls, run_dir: str | Path, *, live: bool = True) -> Store:
        """The run database of `run_dir`, opened read-only: no write, no lock a writer waits
        on; any write method raises a UserError. Works on a folder the user cannot write (a
        colleague's results, a read-only mount). UserError when there is no run database.

        `live=True` (a long-lived reader such as `envduels view`): SQLite's read-only mode
        (`mode=ro`), which follows what a running `envduels run` commits while it is open. On a
        writable folder SQLite may create `run.db-wal`/`run.db-shm` for that (its shared index,
        never data of this reader). On a folder it cannot write, with no `-wal` there (so no
        writer: a run writing there would have one), `immutable=1` instead.

        `live=False` (a short command: `status`, `report`, `leaderboard`, `export`): nothing is
        created or changed in the folder (no side file, no mtime). With a `-wal` present (a run
        is writing now, or one was killed) `mode=ro`, which reads the log and so every committed
        record; the `-shm` must then exist or be creatable, and the error says to copy the
        folder when a killed run left only a `-wal` on a read-only mount. Without one (every
        run that ended folded its log into `run.db`) `immutable=1`: `run.db` is read as a file
        nothing writes. A run started in that moment is not seen; its first records go to a new
        log, which such a short read does not look at.
        """
        store = cls.__new__(cls)
        store.run_dir = Path(run_dir)
        store.path = store.run_dir / DB_NAME
        if not store.path.is_file():
            raise UserError(
                f"{store.run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                "started with `envduels run CONFIG`")
        has_log = store.path.with_name(DB_NAME + "-wal").exists()
        follow = has_log or (live and os.access(store.run_dir, os.W_OK))
        mode = "mode=ro" if follow else "immutable=1"
        from urllib.parse import quote

        uri = f"file:{quote(str(store.path.resolve()))}?{mode}"
        try:
            store._db = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                        isolation_level=None, timeout=30.0)
            store._db.execute("SELECT COUNT(*) FROM meta").fetchall()  # opens it: fails here
            _temp_missing_tables(store._db)
            store._migrate(write=False)
        except sqlite3.Error as err:
            with contextlib.suppress(Exception):
                store._db.close()
            fix = ("a killed run left its write-ahead log and SQLite cannot read it without "
                   "creating run.db-shm; copy the folder somewhere writable and read the copy"
                   if has_log else "check that it is a run database you may read")
            raise UserError(f"cannot read the run database {store.path} ({err}); {fix}") from None
        store._lock = threading.Lock()
        store._totals = None
        store.readonly = True
        return store

    def data_version(self) -> int:
        """A number that changes whenever another connection has committed to this database
        since this connection's last look (SQLite's `PRAGMA data_version`): the key for caches
        of anything read from it."""
        (v,), = self._query("PRAGMA data_version")
        return int(v)

    def summary_tables(self) -> Tables:
        """`tables()` with the transcripts of the hinted successes only (every other
        episode's `transcript` is `[]`): all that analysis reads of transcripts is the winning
        action of a hinted success (the `hint_leak` flag), so the analysis of both is the same,
        and on a large run this loads in a fraction of the time."""
        rows = self._query(
            "SELECT episode_key, env_id, author, solver, round, domain, seed, trial, hinted,"
            " outcome, reason, turns, self_play,"
            " CASE WHEN hinted AND outcome = 'success' THEN transcript END"
            " FROM episodes ORDER BY rowid")
        return self._frames([dict(zip(EPISODE_COLUMNS, (*r[:13], json.loads(r[13]) if r[13]
                                                        else []), strict=True)) for r in rows])

    def episode_index(self, after_rowid: int = 0) -> list[dict[str, Any]]:
        """Episodes written after `after_rowid` (every one by default), oldest first, without
        their transcripts: `rowid` plus every `EpisodeRow` field but `transcript`. A replaced
        episode (an `error` retried) comes back under a new, larger rowid, so a caller that
        keeps the largest rowid seen and asks again gets exactly what changed."""
        cols = [c for c in EPISODE_COLUMNS if c != "transcript"]
        rows = self._query(f"SELECT rowid, {', '.join(cols)} FROM episodes WHERE rowid > ?"
                           " ORDER BY rowid", (after_rowid,))
        out = []
        for r in rows:
            d = dict(zip(["rowid", *cols], r, strict=True))
            d["hinted"], d["self_play"] = bool(d["hinted"]), bool(d["self_play"])
            out.append(d)
        return out

    def environments_stamp(self) -> tuple[int, int]:
        """(count, largest rowid) of the environments table: it changes whenever an
        environment is written (a replaced row takes a new rowid)."""
        (n, m), = self._query("SELECT COUNT(*), COALESCE(MAX(rowid), 0) FROM environments")
        return int(n), int(m)

    def episode(self, episode_key: str) -> EpisodeRow | None:
        """One episode with its transcript, or None."""
        rows = self._query("SELECT * FROM episodes WHERE episode_key = ?", (episode_key,))
        return _episode_row(rows[0]) if rows else None

    def usage_by_player_role(self, after_rowid: int = 0) -> list[dict[str, Any]]:
        """Per (player, role), over the calls recorded after `after_rowid` (all by default):
        calls, input and output tokens, cost, provider retries, and `last_rowid`, the largest
        rowid counted. Calls are never replaced, so sums over successive `after_rowid` windows
        add up to the whole."""
        rows = self._query(
            "SELECT player, role, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd),"
            " SUM(COALESCE(json_extract(record, '$.retries'), 0)), MAX(rowid) FROM calls"
            " WHERE rowid > ? GROUP BY player, role ORDER BY player, role", (after_rowid,))
        return [{"player": p, "role": r, "calls": int(n), "input_tokens": int(i or 0),
                 "output_tokens": int(o or 0), "cost_usd": float(c or 0), "retries": int(t or 0),
                 "last_rowid": int(m)}
                for p, r, n, i, o, c, t, m in rows]


def _sums(columns: set[str], *, per_call: bool = False) -> str:
    """The SELECT list of a `Totals` over `calls` (or of each call's own, `per_call`); a column
    the table lacks reads as 0."""
    items = [("0" if c not in columns else f"COALESCE({c},0)" if per_call
              else f"COALESCE(SUM({c}),0)")
             for c in ("input_tokens", "output_tokens", "cost_usd", "cache_read_tokens",
                       "cache_write_tokens", "reasoning_tokens", "saved_usd")]
    return ", ".join(["1" if per_call else "COUNT(*)", *items])


def _totals(row: tuple) -> Totals:
    n, i, o, c, r, w, reasoning, saved = row
    return Totals(int(n), int(i), int(o), float(c), int(r), int(w), int(reasoning), float(saved))


def _temp_missing_tables(db: sqlite3.Connection) -> None:
    """On a read-only connection to a database written by an older envduels (a table added
    since, such as `audits`, is missing and cannot be created in the file), the missing tables
    as empty TEMP tables: readers see "nothing recorded" instead of "no such table"."""
    existing = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for statement in _SCHEMA.split(";"):
        name = statement.split("EXISTS", 1)[-1].split("(", 1)[0].strip()
        if "CREATE TABLE" in statement and name not in existing:
            db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))


class CallRecorder:
    """A `players.ResponseCache` over a run database that never answers (`envduels run
    --no-cache`): every call goes to the provider and is recorded, a repeat of a recorded
    request as a repeat (see `Store.put`)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, key: str) -> dict | None:
        return None

    def put(self, key: str, record: dict) -> None:
        self._store.put(key, record, repeat=True)


def _env_row(r: tuple) -> EnvironmentRow:
    (env_id, author, rnd, slot, domain, title, valid, invalid_reason, _hint, hints, source, sha,
     class_name, max_turns, fixed_pool, seeds, metadata, _created) = r
    return EnvironmentRow(
        env_id=env_id, author=author, round=rnd, slot=slot, domain=domain, title=title,
        valid=bool(valid), invalid_reason=invalid_reason, hints=json.loads(hints), source=source,
        source_sha256=sha, class_name=class_name, max_turns=max_turns,
        fixed_pool=bool(fixed_pool), benchmark_seeds=tuple(json.loads(seeds)),
        metadata=json.loads(metadata),
    )


def _episode_row(r: tuple) -> EpisodeRow:
    (key, env_id, author, solver, rnd, domain, seed, trial, hinted, outcome, reason, turns,
     self_play, transcript, _created) = r
    return EpisodeRow(
        episode_key=key, env_id=env_id, author=author, solver=solver, round=rnd, domain=domain,
        seed=seed, trial=trial, hinted=bool(hinted), outcome=outcome, reason=reason, turns=turns,
        self_play=bool(self_play), transcript=json.loads(transcript),
    )
