"""The run database: `RUN_DIR/run.db`, SQLite in WAL mode. The only module that writes SQL.

Everything a run produces is written here as soon as it exists, one committed transaction per
record, so a kill loses at most the work in flight:

- `meta`: the config JSON, its fingerprint and the result-affecting settings (for resume checks).
- `calls`: every model call by request key (the `players.ResponseCache`): a resumed run asks the
  cache first and never pays twice. Its bill is in columns: tokens (input split into uncached,
  cache read and cache write; reasoning within output), cost and what prompt caching saved; a
  database written before the split is migrated when opened.
- `environments`: one row per environment (authored, or from a fixed pool), final once written:
  its `EnvRecord`, one column per field (see `_TABLE_COLUMNS`).
- `validations`: every authoring attempt with the validator's verdict.
- `episodes`: one row per episode key with its transcript, outcome and reason.
- `audits`: one row per audited episode (its replay `passed` or was a `mismatch`); a played
  episode (success or failure) without one is still to be audited, also after a resume. The
  table is created on open, so a run database from before audits exists gains it empty.

Readers use `Store.tables()` (analysis, report) or the records (`Store.environments()`, export,
the viewer); nothing outside this module runs SQL.
Commands that only read open the database with `Store.open_readonly`, which writes nothing in
the run folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

from envduels._text import valid_text
from envduels.duel.answers import Answer, rescue_answers
from envduels.duel.faults import AUDIT_REASON, author_faults, judged  # noqa: F401 (AUDIT_REASON re-exported)
from envduels.duel.outcomes import AuditState, Outcome
from envduels.duel.protocol import Entry
from envduels.duel.usage import Usage
from envduels.envs._battery import BatteryFindings
from envduels.envs._spec import EnvSpec
from envduels.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from envduels.config import RunConfig

DB_NAME = "run.db"
LOCK_NAME = "run.lock"
SCHEMA_VERSION = 1

_SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY, player TEXT, role TEXT, call_id TEXT,
    record TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER,
    cost_usd REAL, latency_s REAL, created REAL, cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0, reasoning_tokens INTEGER DEFAULT 0,
    saved_usd REAL DEFAULT 0);
{environments}
CREATE TABLE IF NOT EXISTS validations (
    env_id TEXT, attempt INTEGER, author TEXT, round INTEGER, valid INTEGER, reasons TEXT,
    verdict TEXT, reply TEXT, created REAL, PRIMARY KEY (env_id, attempt));
{episodes}
CREATE TABLE IF NOT EXISTS audits (
    episode_key TEXT PRIMARY KEY, env_id TEXT, state TEXT NOT NULL, detail TEXT,
    played_outcome TEXT, created REAL);
"""

_PLAYED = (Outcome.SUCCESS, Outcome.FAILURE)
"""The outcomes of a played episode (`Outcome.played`), as SQL parameters."""

PLAYER_COLUMNS = ["name", "provider", "model", "params_b", "roles", "cost_usd", "input_tokens",
                  "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                  "saved_usd"]

# Columns of `calls` added after the first release, with what an older row holds: a run
# database written before them is migrated when opened (its calls read as uncached).
_CALL_SPLIT = {"cache_read_tokens": "INTEGER DEFAULT 0", "cache_write_tokens": "INTEGER DEFAULT 0",
               "reasoning_tokens": "INTEGER DEFAULT 0", "saved_usd": "REAL DEFAULT 0"}
def _text(value: str | None) -> str | None:
    """Text for a TEXT column: lone surrogates (from environment code or a model reply) as
    U+FFFD, since SQLite stores UTF-8 and one such character would stop the run."""
    return valid_text(value) if isinstance(value, str) else value


SQLValue = str | int | float | bytes | None
"""What a column of the run database holds (SQLite's storage classes)."""


def _json(value: object, *, sort_keys: bool = False,
          default: Callable[[object], object] | None = None) -> str:
    """`value` as JSON with every lone surrogate in it as U+FFFD (not as a `\\udXXX` escape,
    which would come back as a lone surrogate when read)."""
    return valid_text(json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, default=default))


@dataclass
class Tables:
    """The analysis view of a run: pandas DataFrames, one row per item.

    players:      name, provider, model, params_b, roles (list), cost_usd, input_tokens,
                  output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                  saved_usd (totals over every call recorded in the run; see `duel.usage.Usage`)
    environments: env_id, author, round, domain, title, valid (bool), invalid_reason, hint, source,
                  source_sha256, class_name, max_turns, fixed_pool (bool), benchmark_seeds (list),
                  then every other field of the `EnvRecord`: slot, hints (dict), metadata (dict),
                  ... (`ENVIRONMENT_COLUMNS`); `hint` is `EnvSpec.hint`
    episodes:     episode_key, env_id, author, solver, round, domain, seed, trial, hinted (bool),
                  outcome ("success"|"failure"|"incomplete"|"error"), reason, turns,
                  self_play (bool), transcript (list of {role, content, ...}); judged by
                  the author's-fault rule (`duel.faults`): every success or failure of an
                  environment the replay audit caught reads here as `incomplete` with a
                  reason starting with `AUDIT_REASON`
    audits:       episode_key, env_id, state (`AuditState`), detail, played_outcome: the
                  recorded replay audits, oldest first (`AUDIT_COLUMNS`)
    """

    players: pd.DataFrame
    environments: pd.DataFrame
    episodes: pd.DataFrame
    audits: pd.DataFrame = field(default_factory=lambda: _audit_frame([]))
    battery: dict[str, BatteryFindings] = field(default_factory=dict)
    """env_id -> what validation's degenerate-policy battery found (`Verdict.battery`), for the
    run's valid environments validated with it (authored ones, and fixed-pool ones in runs
    since the pool is validated); an environment it flagged reads in `episodes` like a
    nondeterministic one: every success or failure `incomplete`, with a reason starting with
    `BATTERY_REASON`."""
    rescue_answers: dict[str, dict[int, set[Answer]]] = field(default_factory=dict)
    """env_id -> seed -> what the hint changed in the panel's rescues as played, before judging
    (`duel.answers.rescue_answers`): the play side of `fixed_answer`
    (`duel.faults.author_faults`), which would see no win at all in the judged `episodes` of
    an environment it flagged."""


AUDIT_COLUMNS = ["episode_key", "env_id", "state", "detail", "played_outcome"]
"""The columns of `Tables.audits`."""


def _audit_frame(rows: list[tuple[str, str, str, str | None, str | None]]) -> pd.DataFrame:
    """`rows` of the audits table as `Tables.audits`, each state an `AuditState`."""
    import pandas as pd

    return pd.DataFrame([(k, e, AuditState(s), d, p) for k, e, s, d, p in rows],
                        columns=AUDIT_COLUMNS)


@dataclass(frozen=True)
class EnvRecord:
    """A run's record of one environment: the environment itself (`spec`, the one description
    of an environment, exactly as the run played it) and what the run found out about it.

    Every `EnvSpec` field and property reads through (`record.author` is `record.spec.author`,
    `record.hint` is `record.spec.hint`); `env_id` is `spec.id`. A fixed-pool environment is
    recorded in round 1, slot 0.
    """

    spec: EnvSpec
    round: int
    slot: int = 0
    valid: bool = True
    invalid_reason: str | None = None
    """Why the environment is invalid (one line); None when it is valid."""
    fixed_pool: bool = False
    """From a fixed pool (library or export), not authored in this run."""

    @property
    def env_id(self) -> str:
        return self.spec.id

    def __getattr__(self, name: str) -> Any:
        # only called for names the record lacks: the environment's own fields and properties
        if name.startswith("__") or name == "spec":
            raise AttributeError(name)
        return getattr(self.spec, name)


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
    transcript: list[Entry] = field(default_factory=list)


@dataclass(frozen=True)
class _Column:
    """One column of a table that stores a record: its SQL type, how a field's value is written
    and read back, and what a row written before the column existed reads as (the field's
    default), all from the field's declaration."""

    name: str
    field: str            # the record's field it holds
    kind: type            # bool, int, float, str, or dict/list/tuple (stored as JSON text)
    default: Callable[[], object]
    sort_keys: bool = False

    @classmethod
    def of(cls, f: Field[object], hint: object, *, name: str | None = None, sort_keys: bool = False) -> _Column:
        args = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (
            Union, UnionType) else [hint]
        kind = cast(type, get_origin(args[0]) or args[0])
        if f.default is not MISSING:
            value = f.default
            default: Callable[[], object] = lambda: value  # noqa: E731
        elif f.default_factory is not MISSING:
            default = f.default_factory
        else:
            default = lambda: None  # noqa: E731
        return cls(name or f.name, f.name, kind, default, sort_keys)

    @property
    def sql(self) -> str:
        return {bool: "INTEGER", int: "INTEGER", float: "REAL"}.get(self.kind, "TEXT")

    def encode(self, value: object) -> SQLValue:
        if value is None:
            return None
        if self.kind is bool:
            return int(bool(value))
        if self.kind in (dict, list, tuple):
            return _json(list(value) if isinstance(value, tuple) else value,
                         sort_keys=self.sort_keys, default=str)
        if isinstance(value, str):
            return valid_text(value) if self.kind is str else value
        if isinstance(value, int | float | bytes):
            return value
        raise TypeError(f"column {self.name} cannot hold a {type(value).__name__}")

    @cached_property
    def read(self) -> Callable[[SQLValue], object]:
        """The field's value from the column's (None, as in a column added after the row was
        written, is the field's default). One function per kind: tables read it per cell."""
        default = self.default

        def text(v: str | int | float | bytes) -> str | bytes:
            return v if isinstance(v, str | bytes) else str(v)

        if self.kind is bool:
            return lambda v: default() if v is None else bool(v)
        if self.kind is tuple:
            return lambda v: default() if v is None else tuple(json.loads(text(v)))
        if self.kind in (dict, list):
            return lambda v: default() if v is None else json.loads(text(v))
        return lambda v: default() if v is None else v


def _columns(record: type, *, skip: tuple[str, ...] = (), rename: dict[str, str] | None = None,
             sort_keys: bool = False) -> list[_Column]:
    hints = get_type_hints(record)
    return [_Column.of(f, hints[f.name], name=(rename or {}).get(f.name), sort_keys=sort_keys)
            for f in fields(record) if f.name not in skip]


# The environments table: one column per EnvSpec field (`id` as `env_id`, the name every table
# uses), one per fact of the run's EnvRecord, and the spec's `hint` and `source_sha256` (derived,
# written for readers of the file; read back from the spec, never from the column). A field
# added to EnvSpec or EnvRecord is a new column everywhere, added to an older database on open.
_SPEC_COLUMNS = _columns(EnvSpec, rename={"id": "env_id"}, sort_keys=True)
_RUN_COLUMNS = _columns(EnvRecord, skip=("spec",))
_DERIVED_COLUMNS = ("hint", "source_sha256")
_ENV_COLUMNS = [*_SPEC_COLUMNS, *_RUN_COLUMNS]
_ENV_TABLE = [c.name for c in _ENV_COLUMNS] + list(_DERIVED_COLUMNS)

_FRAME_FIRST = ["env_id", "author", "round", "domain", "title", "valid", "invalid_reason", "hint",
                "source", "source_sha256", "class_name", "max_turns", "fixed_pool",
                "benchmark_seeds"]
ENVIRONMENT_COLUMNS = _FRAME_FIRST + [c for c in _ENV_TABLE if c not in _FRAME_FIRST]
"""The columns of `Tables.environments`: the ones readers have always had first, then every
other column of the record (`slot`, `hints`, `metadata`, and any field added since)."""

_EPISODE_COLUMNS = _columns(EpisodeRow)
EPISODE_COLUMNS = [c.name for c in _EPISODE_COLUMNS]


def _create(table: str, columns: list[tuple[str, str]]) -> str:
    """The CREATE TABLE of a record's table: its first column is the key; `created` last."""
    cols = [f"{name} {sql}" + (" PRIMARY KEY" if i == 0 else "")
            for i, (name, sql) in enumerate(columns)]
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(cols)}, created REAL);"


def _env_values(env: EnvRecord) -> dict[str, SQLValue]:
    """The environments row of `env`, by column."""
    row = {c.name: c.encode(getattr(env.spec, c.field)) for c in _SPEC_COLUMNS}
    row.update({c.name: c.encode(getattr(env, c.field)) for c in _RUN_COLUMNS})
    row.update({name: _text(getattr(env.spec, name)) for name in _DERIVED_COLUMNS})
    return row


def _env_record(values: list[Any]) -> EnvRecord:
    """The record of the values of `_ENV_COLUMNS` (field order: spec, then the run's facts)."""
    return EnvRecord(EnvSpec(*values[:len(_SPEC_COLUMNS)]), *values[len(_SPEC_COLUMNS):])


def environment_frame(envs: list[EnvRecord]) -> pd.DataFrame:
    import pandas as pd  # here: a run that never analyses should not pay pandas' import
    """`envs` as `Tables.environments`, in the order given: one row per record with every
    column of `ENVIRONMENT_COLUMNS` (sequences as lists, `valid` and `fixed_pool` bools)."""
    rows = []
    for env in envs:
        row: dict[str, object] = {}
        for owner, columns in ((env.spec, _SPEC_COLUMNS), (env, _RUN_COLUMNS)):
            for c in columns:
                value = getattr(owner, c.field)
                row[c.name] = list(value) if isinstance(value, tuple) else value
        row.update({name: getattr(env.spec, name) for name in _DERIVED_COLUMNS})
        rows.append(row)
    return _typed(pd.DataFrame(rows, columns=ENVIRONMENT_COLUMNS), _ENV_COLUMNS)


def _typed(df: pd.DataFrame, columns: list[_Column]) -> pd.DataFrame:
    """`df` with its columns of bool fields as bools (SQLite and an empty frame give objects)."""
    for c in columns:
        if c.kind is bool:
            df[c.name] = df[c.name].astype(bool)
    return df


def _episode_row(values: list[Any]) -> EpisodeRow:
    """The episode of the values of `_EPISODE_COLUMNS` (in field order)."""
    return EpisodeRow(*values)


# The order of the environments table's columns in a new database: that of the first release
# (whose `SELECT *` readers unpack by position), then any column added since.
_FIRST_RELEASE_ORDER = ["env_id", "author", "round", "slot", "domain", "title", "valid",
                        "invalid_reason", "hint", "hints", "source", "source_sha256", "class_name",
                        "max_turns", "fixed_pool", "benchmark_seeds", "metadata"]
_TABLE_COLUMNS = {
    "environments": sorted(
        [(c.name, c.sql) for c in _ENV_COLUMNS] + [(n, "TEXT") for n in _DERIVED_COLUMNS],
        key=lambda col: (_FIRST_RELEASE_ORDER.index(col[0]) if col[0] in _FIRST_RELEASE_ORDER
                         else len(_FIRST_RELEASE_ORDER))),
    "episodes": [(c.name, c.sql) for c in _EPISODE_COLUMNS],
}
"""The columns of the tables that store records, from the records: the schema, the migration of
an older database and every INSERT and SELECT of these tables read them here."""

_SCHEMA = _SCHEMA_TEMPLATE.format(**{t: _create(t, cols) for t, cols in _TABLE_COLUMNS.items()})


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


LOCK_CHECK_S = 1.0
"""How often a live reader following a run asks whether the run still holds its lock."""


def run_lock_held(run_dir: str | Path) -> bool:
    """Whether a process holds `RUN_DIR/run.lock` now (an `envduels run` is writing), read
    from /proc/locks without taking the lock: taking it, even shared and for an instant, could
    make a run starting in that instant refuse the folder. Matched by inode number alone (a
    file system may show another device number there): a false match only makes a reader read
    the log too. True when it cannot tell (no /proc/locks) and a lock file is there."""
    try:
        inode = os.stat(Path(run_dir) / LOCK_NAME).st_ino
    except OSError:
        return False   # no lock file: no `envduels run` has run here
    try:
        with open("/proc/locks", "rb") as fh:
            table = fh.read(1 << 24)
    except OSError:
        return True
    held = re.findall(rb"\bFLOCK\s+\S+\s+WRITE\s+\S+\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s", table)
    return str(inode).encode() in held


class AuthoringError(TypedDict):
    """An authoring job whose last try ended in `error` (`Store.authoring_errors`)."""

    author: str
    round: int


@dataclass(frozen=True)
class _RecordedPlayer:
    """A player of a recorded config as recorded (`Store._recorded_players`)."""

    name: str
    provider: object
    model: object
    params_b: object
    roles: list[str]


class Store:
    """The run database of one run folder. Safe to share between threads of one process.

    Every write commits before returning. Opening a folder that holds no `run.db` creates it.
    """

    def __init__(self, run_dir: str | Path, *, create: bool = True, readonly: bool = False,
                 live: bool = False) -> None:
        """Open (`create`: or create) the run database of `run_dir` for writing; with
        `readonly`, open it as `open_readonly` describes (`live` is its argument)."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        if (readonly or not create) and not self.path.is_file():
            raise UserError(
                f"{self.run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                "started with `envduels run CONFIG`"
            )
        self._lock = threading.Lock()
        self._totals: Usage | None = None
        self.readonly = readonly
        self._live = live           # a live reader follows writers (`open_readonly`)
        self._version_base = 0      # data_version of earlier connections: it never repeats
        self._followed_run = False  # this reader saw an `envduels run` hold the lock
        self._lock_checked = 0.0
        if readonly:
            self._connect_readonly(follow=self._log_written() or run_lock_held(self.run_dir))
            return
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

    # -- plumbing ---------------------------------------------------------------------------

    def _migrate(self, *, write: bool = True) -> None:
        """Add the columns a database written by an older envduels lacks. Where it cannot (or,
        without `write`, may not) be written, its missing columns read as zeros (calls) or as
        the record field's default (environments, episodes)."""
        self._have: dict[str, set[str]] = {}
        for table, columns in _TABLE_COLUMNS.items():
            present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for column, kind in columns:
                if column not in present and write:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                    present.add(column)
            self._have[table] = present
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
            if self._live:
                self._follow_writer()
            return self._db.execute(sql, args).fetchall()

    def _read(self, table: str, columns: list[_Column], *, where: str = "", args: tuple = (),
              replace: dict[str, str] | None = None) -> list[list[Any]]:
        """The values of `columns` (a record's, in field order) in the rows of `table`, oldest
        first, read by name: a column this database lacks (added after it was written) reads as
        its field's default. `replace` gives an SQL expression to read instead of a column."""
        replace = replace or {}
        present = [c for c in columns if c.name in self._have[table]]
        exprs = [f"{replace[c.name]} AS {c.name}" if c.name in replace else c.name for c in present]
        rows = self._query(f"SELECT {', '.join(exprs)} FROM {table} {where} ORDER BY rowid", args)
        if len(present) < len(columns):   # None where a column is missing: its default
            at = {c.name: i for i, c in enumerate(present)}
            rows = [tuple(r[at[c.name]] if c.name in at else None for c in columns) for r in rows]
        # convert only what needs it (bools, JSON, and None where the default is not None): a
        # large run reads millions of cells here
        convert = [(i, c.read) for i, c in enumerate(columns)
                   if c.kind not in (str, int, float) or c.default() is not None]
        out = []
        for r in rows:
            values = list(r)
            for i, read in convert:
                values[i] = read(values[i])
            out.append(values)
        return out

    @staticmethod
    def _insert(db: sqlite3.Connection, table: str, values: dict[str, SQLValue]) -> None:
        """Write one record's row into `table` by column name, replacing a row with its key."""
        names = [*values, "created"]
        db.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(names)}) VALUES "
                   f"({', '.join('?' * len(names))})", (*values.values(), time.time()))

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

    def set_meta(self, key: str, value: object) -> None:
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
            self._totals = self._totals + Usage(
                calls=1, input_tokens=inp, output_tokens=out, cost_usd=cost,
                cache_read_tokens=read, cache_write_tokens=written, reasoning_tokens=reasoning,
                saved_usd=saved)

    def recorder(self) -> CallRecorder:
        """This database as a `players.ResponseCache` that records every call and answers none."""
        return CallRecorder(self)

    def call_records(self) -> list[dict]:
        """Every recorded call, oldest first."""
        return [json.loads(r[0]) for r in self._query("SELECT record FROM calls ORDER BY rowid")]

    def call_usage(self) -> list[tuple[str, str, str, Usage, float]]:
        """(player, role, call_id, its `Usage`, latency_s) of every recorded call, oldest first,
        without reading the bulky records (the estimate reads a whole run's history)."""
        rows = self._query(f"SELECT player, role, call_id, {self._each}, latency_s FROM calls"
                           " ORDER BY rowid")
        return [(p, r, c, _totals(row[3:-1]), float(row[-1] or 0.0)) for row in rows
                for p, r, c in [row[:3]]]

    def totals(self) -> Usage:
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

    def first_call_start(self, role: str) -> float | None:
        """Start of the first recorded call in `role` ("author", "solver") in Unix seconds (its
        recording time less its latency), or None when there is none."""
        (start,), = self._query("SELECT MIN(created - latency_s) FROM calls WHERE role = ?",
                                (role,))
        return None if start is None else float(start)

    def usage_by_player(self) -> dict[str, Usage]:
        """`Usage` per player over every call recorded in this run."""
        rows = self._query(f"SELECT player, {self._sums} FROM calls GROUP BY player")
        return {r[0]: _totals(r[1:]) for r in rows}

    # -- environments and validations -------------------------------------------------------

    def put_environment(self, env: EnvRecord) -> None:
        """Record an environment's final state (valid or invalid); replaces an earlier row."""
        with self._tx() as db:
            self._insert(db, "environments", _env_values(env))

    def environment(self, env_id: str) -> EnvRecord | None:
        """The recorded environment `env_id`, or None."""
        rows = self._read("environments", _ENV_COLUMNS, where="WHERE env_id = ?", args=(env_id,))
        return _env_record(rows[0]) if rows else None

    def environments(self) -> list[EnvRecord]:
        """Every recorded environment, in the order first written (a replaced one moves last)."""
        return [_env_record(r) for r in self._read("environments", _ENV_COLUMNS)]

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

    def battery_verdicts(self) -> dict[str, BatteryFindings]:
        """env_id -> the degenerate-policy battery's findings (`Verdict.battery`) in the verdict
        of the attempt that made a recorded, valid environment valid (its last valid attempt;
        a fixed-pool environment has one, its validation in the run). Read from the stored
        verdicts: a database from before the battery, or a fixed pool recorded before runs
        validated it, has none."""
        envs = {e.env_id for e in self.environments() if e.valid}
        out: dict[str, BatteryFindings] = {}
        for env_id, verdict in self._query(
                "SELECT env_id, verdict FROM validations WHERE valid = 1 ORDER BY env_id, attempt"):
            if env_id not in envs or not verdict:
                continue
            with contextlib.suppress(ValueError):
                recorded = json.loads(verdict)
                found = recorded.get("battery") if isinstance(recorded, dict) else None
                if isinstance(found, dict):   # the verdict's own record of it (`to_json`)
                    out[env_id] = cast(BatteryFindings, found)
                else:
                    out.pop(env_id, None)
        return out

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

    def authoring_errors(self) -> dict[str, AuthoringError]:
        """Authoring jobs whose last try ended in `error` and that have no environment yet:
        env_id -> {"author", "round"}. A resumed run retries them."""
        errors = self.get_meta("authoring_errors") or {}
        recorded = {r[0] for r in self._query("SELECT env_id FROM environments")}
        return {k: v for k, v in errors.items() if k not in recorded}

    # -- episodes ---------------------------------------------------------------------------

    def put_episode(self, ep: EpisodeRow) -> None:
        """Record an episode; a later result for the same key (an `error` retried) replaces it."""
        with self._tx() as db:
            self._insert(db, "episodes", {c.name: c.encode(getattr(ep, c.field))
                                          for c in _EPISODE_COLUMNS})

    def finished_episode_keys(self) -> set[str]:
        """Keys of episodes that need no replay: every outcome except `error`."""
        return {r[0] for r in self._query("SELECT episode_key FROM episodes WHERE outcome != ?",
                                          (Outcome.ERROR,))}

    def finished_by_env_and_solver(self) -> dict[tuple[str, str], int]:
        """How many episodes that need no replay (every outcome but `error`) each (environment,
        solver) has, without reading transcripts."""
        rows = self._query("SELECT env_id, solver, COUNT(*) FROM episodes WHERE outcome != ?"
                           " GROUP BY env_id, solver", (Outcome.ERROR,))
        return {(e, s): int(n) for e, s, n in rows}

    def episode_counts(self) -> dict[str, int]:
        return dict(self._query("SELECT outcome, COUNT(*) FROM episodes GROUP BY outcome"))

    def episodes(self) -> list[EpisodeRow]:
        """Every recorded episode as recorded, oldest first (a replaced one moves last)."""
        return [_episode_row(r) for r in self._read("episodes", _EPISODE_COLUMNS)]

    # -- replay audits ----------------------------------------------------------------------

    def put_audit(self, episode_key: str, env_id: str, *, passed: bool, detail: str = "") -> None:
        """Record the replay audit of a played episode. A mismatch also turns the episode into
        `incomplete` with the reason `"replay audit: DETAIL"` (the outcome as played is kept in
        the audit row), in the same transaction."""
        with self._tx() as db:
            row = db.execute("SELECT outcome FROM episodes WHERE episode_key = ?",
                             (episode_key,)).fetchone()
            played = row[0] if row else None
            if not passed and played != Outcome.INCOMPLETE:
                db.execute("UPDATE episodes SET outcome = ?, reason = ? WHERE episode_key = ?",
                           (Outcome.INCOMPLETE, _text(f"{AUDIT_REASON}: {detail}"), episode_key))
            db.execute(
                "INSERT OR REPLACE INTO audits (episode_key, env_id, state, detail, played_outcome,"
                " created) VALUES (?,?,?,?,?,?)",
                (episode_key, _text(env_id), AuditState.PASSED if passed else AuditState.MISMATCH,
                 _text(detail),
                 played, time.time()))

    def unaudited_episodes(self) -> list[EpisodeRow]:
        """Played episodes (success or failure) whose replay audit is not recorded yet."""
        return [_episode_row(r) for r in self._read(
            "episodes", _EPISODE_COLUMNS, where="WHERE outcome IN (?, ?) AND episode_key NOT IN"
            " (SELECT episode_key FROM audits)", args=_PLAYED)]

    def unaudited_count(self) -> int:
        """How many played episodes still wait for their replay audit."""
        (n,), = self._query(
            "SELECT COUNT(*) FROM episodes WHERE outcome IN (?, ?) AND episode_key"
            " NOT IN (SELECT episode_key FROM audits)", _PLAYED)
        return int(n)

    def nondeterministic_environments(self) -> dict[str, str]:
        """Environments whose replay audit found a mismatch: env id -> the first difference."""
        out: dict[str, str] = {}
        for env_id, detail in self._query(
                "SELECT env_id, detail FROM audits WHERE state = ? ORDER BY rowid",
                (AuditState.MISMATCH,)):
            out.setdefault(env_id, detail)
        return out

    def audits(self) -> list[tuple[str, str, str, str | None, str | None]]:
        """Every recorded replay audit, oldest first: (episode_key, env_id, state, detail,
        played_outcome), as `Tables.audits` has them."""
        return [tuple(r) for r in self._query(  # type: ignore[misc]
            f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audits ORDER BY rowid")]

    def audit_counts(self) -> dict[str, int]:
        """Recorded audits by state (`passed`, `mismatch`)."""
        return dict(self._query("SELECT state, COUNT(*) FROM audits GROUP BY state"))

    # -- the analysis view ------------------------------------------------------------------

    def tables(self) -> Tables:
        """Players, environments and episodes as DataFrames (see `Tables`)."""
        return self._frames([dict(zip(EPISODE_COLUMNS, r, strict=True))
                             for r in self._read("episodes", _EPISODE_COLUMNS)])

    def _recorded_players(self) -> list[_RecordedPlayer]:
        """The players of a recorded config today's schema cannot read at all (one required
        value it no longer accepts, such as a provider since renamed), as recorded: the
        analysis still needs who authored and who solved. Each has `name`, `provider`, `model`,
        `params_b` and `roles` (the schema's default roles when none was recorded)."""
        from envduels.config import PlayerConfig

        raw = self.get_meta("config")
        recorded = raw.get("players") if isinstance(raw, dict) else None
        if not isinstance(recorded, list):
            return []
        default_roles = PlayerConfig.model_fields["roles"].get_default(call_default_factory=True)
        return [_RecordedPlayer(name=p["name"], provider=p.get("provider"), model=p.get("model"),
                                params_b=p.get("params_b"),
                                roles=p["roles"] if isinstance(p.get("roles"), list)
                                else default_roles)
                for p in recorded if isinstance(p, dict) and isinstance(p.get("name"), str)]

    def _frames(self, eps: list[dict[str, Any]]) -> Tables:
        """The analysis tables around `eps` (episode records with every EPISODE_COLUMNS key):
        the one place that decides what analysis sees of a run, for `tables()` and
        `summary_tables()` alike."""
        import pandas as pd

        config = self.run_config()
        usage = self.usage_by_player()
        players = []
        for p in config.players if config is not None else self._recorded_players():
            u = usage.get(p.name, Usage())
            players.append({
                "name": p.name, "provider": p.provider, "model": p.model,
                "params_b": p.params_b, "roles": list(p.roles),
                "cost_usd": u.cost_usd, "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens, "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens,
                "reasoning_tokens": u.reasoning_tokens, "saved_usd": u.saved_usd,
            })
        # the episodes as analysis scores them: the author's-fault rule (`duel.faults`) over
        # the recorded facts, the audits' states, the battery's flags and the answers of the
        # hinted wins as played (read before judging, which makes them incomplete)
        audits = self.audits()
        battery = self.battery_verdicts()
        answers = rescue_answers(self.rescues())
        faults = author_faults([(e, s, d) for _, e, s, d, _ in audits], battery, answers)
        for ep in eps:
            ep["outcome"], ep["reason"] = judged(ep["outcome"], ep["reason"],
                                                 faults.get(ep["env_id"]))
        env_df = environment_frame(self.environments())
        ep_df = _typed(pd.DataFrame(eps, columns=EPISODE_COLUMNS), _EPISODE_COLUMNS)
        # A canonical order, not the order work happened to finish in: the same tournament must
        # give the same report (seeded bootstraps draw by position) on any executor.
        env_df = env_df.sort_values("env_id", kind="stable").reset_index(drop=True)
        ep_df = ep_df.sort_values(["env_id", "solver", "seed", "trial", "hinted"],
                                  kind="stable").reset_index(drop=True)
        return Tables(
            players=pd.DataFrame(players, columns=PLAYER_COLUMNS),
            environments=env_df,
            episodes=ep_df,
            audits=_audit_frame(audits),
            battery=battery,
            rescue_answers=answers,
        )

    # -- read-only opening and the viewer's reads -------------------------------------------

    @classmethod
    def open_readonly(cls, run_dir: str | Path, *, live: bool = True) -> Store:
        """The run database of `run_dir`, opened read-only: no write, no lock a writer waits
        on; any write method raises a UserError. Works on a folder the user cannot write (a
        colleague's results, a read-only mount). UserError when there is no run database.

        Nothing in the folder is created or changed (no side file, no mtime) unless a writer
        is there: with none, `run.db` is opened `immutable=1`, read as a file nothing writes.
        A writer is an `envduels run` holding `run.lock` (`run_lock_held`) or a non-empty
        `run.db-wal` (a run writing now, or one that was killed: its log holds committed
        records); then SQLite's read-only mode (`mode=ro`), which reads the log, for which
        `run.db-shm` must exist or be creatable (on a read-only mount the error says to copy
        the folder).

        `live=True` (a long-lived reader: `envduels view`) follows the run as it changes: an
        immutable open becomes `mode=ro` on the first read after a writer's log appears. When
        the `envduels run` it followed has ended, its log is folded into `run.db` and
        removed, as that run would have done had no reader held the database open (SQLite
        leaves `-wal`/`-shm` behind a writer that is not the last to close), and the open is
        immutable again. `live=False` (a short command: `status`, `report`, `leaderboard`,
        `export`) decides once: a run started after it opened is not seen.
        """
        return cls(run_dir, readonly=True, live=live)

    def _log_written(self) -> bool:
        try:
            return self.path.with_name(DB_NAME + "-wal").stat().st_size > 0
        except OSError:
            return False

    def _connect_readonly(self, *, follow: bool) -> None:
        """(Re)open the read-only connection: `mode=ro` (`follow`) or `immutable=1`."""
        from urllib.parse import quote

        self._follows = follow
        uri = f"file:{quote(str(self.path.resolve()))}?{'mode=ro' if follow else 'immutable=1'}"
        try:
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                       isolation_level=None, timeout=30.0)
            # opens it, and fails here on a file that is no database; a database a starting
            # run has created but not yet given its tables reads as empty, like an older one
            # lacking a table (envduels run's own estimate reads the folder before its lock)
            tables = {r[0] for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if self._live and "meta" not in tables:
                # a long-lived reader must not stand in TEMP tables now: they would hide the
                # real ones the starting run is about to create, for as long as it stays open
                self._db.close()
                raise UserError(f"{self.run_dir} holds a run database still being created; "
                                "open it again in a moment")
            _temp_missing_tables(self._db)
            self._migrate(write=False)
        except sqlite3.Error as err:
            with contextlib.suppress(Exception):
                self._db.close()
            fix = ("a killed run left its write-ahead log and SQLite cannot read it without "
                   "creating run.db-shm; copy the folder somewhere writable and read the copy"
                   if follow else "check that it is a run database you may read")
            raise UserError(f"cannot read the run database {self.path} ({err}); {fix}") from None

    def _follow_writer(self) -> None:
        """A live reader's check before each read (caller holds `_lock`): an immutable open
        turns `mode=ro` once a writer's log appears (one stat); a `mode=ro` one checks, at
        most every `LOCK_CHECK_S`, whether the `envduels run` it followed has ended, and then
        folds its log and goes back to immutable."""
        if not self._follows:
            if self._log_written():
                self._reconnect(follow=True)
            return
        now = time.monotonic()
        if now - self._lock_checked < LOCK_CHECK_S:
            return
        self._lock_checked = now
        if run_lock_held(self.run_dir):
            self._followed_run = True
        elif self._followed_run:
            self._db.close()
            self._fold_log()
            self._reconnect(follow=self._log_written() or run_lock_held(self.run_dir),
                            closed=True)

    def _reconnect(self, *, follow: bool, closed: bool = False) -> None:
        (v,), = [(0,)] if closed else self._db.execute("PRAGMA data_version").fetchall()
        if not closed:
            self._db.close()
        self._version_base += int(v) + (1 << 32)
        self._connect_readonly(follow=follow)

    def _fold_log(self) -> None:
        """Checkpoint and remove the log an ended run left because this reader had the
        database open: SQLite does it when the last connection closes, and a read-only one
        cannot. Best effort: on a folder this process cannot write, or while another reader
        holds the database, the log stays (and is read)."""
        self._followed_run = False
        if not os.access(self.run_dir, os.W_OK):
            return
        with contextlib.suppress(sqlite3.Error):
            db = sqlite3.connect(self.path, isolation_level=None, timeout=1.0)
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                db.close()   # the last connection: SQLite removes -wal and -shm

    def data_version(self) -> int:
        """A number that changes whenever another connection has committed to this database
        since this store's last look (SQLite's `PRAGMA data_version`, plus a base that grows
        when a live reader reopens its connection): the key for caches of anything read from
        it."""
        (v,), = self._query("PRAGMA data_version")
        return self._version_base + int(v)

    def rescues(self) -> list[tuple[str, int, object, object]]:
        """(env_id, seed, hinted transcript, unhinted transcript) of every rescue as played:
        a panel pair (same environment, solver, seed and trial, not self-play) whose hinted
        episode is a success and whose unhinted one a failure (`duel.answers.rescues`, read in
        SQL so that `summary_tables` need not load the other transcripts)."""
        have = self._have["episodes"]
        if not {"env_id", "solver", "seed", "hinted", "outcome", "transcript"} <= set(have):
            return []
        # a column added after a database was written reads as its default (trial 0, no self-play)
        trial = " AND u.trial = h.trial" if "trial" in have else ""
        panel = " AND NOT h.self_play" if "self_play" in have else ""
        rows = self._query(
            "SELECT h.env_id, h.seed, h.transcript, u.transcript FROM episodes h JOIN episodes u"
            f" ON u.env_id = h.env_id AND u.solver = h.solver AND u.seed = h.seed{trial}"
            f" AND NOT u.hinted WHERE h.hinted{panel} AND h.outcome = ? AND u.outcome = ?"
            " ORDER BY h.rowid", (Outcome.SUCCESS, Outcome.FAILURE))
        out = []
        for env_id, seed, hinted, unhinted in rows:
            with contextlib.suppress(ValueError, TypeError):
                out.append((env_id, int(seed), json.loads(hinted), json.loads(unhinted)))
        return out

    def summary_tables(self) -> Tables:
        """`tables()` with the transcripts of the hinted successes only (every other
        episode's `transcript` is `[]`): all that analysis reads of transcripts is the winning
        action of a hinted success (the `hint_leak` flag), so the analysis of both is the same,
        and on a large run this loads in a fraction of the time."""
        rows = self._read("episodes", _EPISODE_COLUMNS, replace={
            "transcript": "CASE WHEN hinted AND outcome = ? THEN transcript END"},
            args=(Outcome.SUCCESS,))
        return self._frames([dict(zip(EPISODE_COLUMNS, r, strict=True)) for r in rows])

    def episode_index(self, after_rowid: int = 0) -> list[dict[str, Any]]:
        """Episodes written after `after_rowid` (every one by default), oldest first, without
        their transcripts: `rowid` plus every `EpisodeRow` field but `transcript`. A replaced
        episode (an `error` retried) comes back under a new, larger rowid, so a caller that
        keeps the largest rowid seen and asks again gets exactly what changed."""
        columns = [c for c in _EPISODE_COLUMNS if c.name != "transcript"]
        names = [c.name for c in columns if c.name in self._have["episodes"]]
        rows = self._query(f"SELECT rowid, {', '.join(names)} FROM episodes WHERE rowid > ?"
                           " ORDER BY rowid", (after_rowid,))
        out = []
        for r in rows:
            d = dict(zip(["rowid", *names], r, strict=True))
            out.append({"rowid": d["rowid"], **{c.name: c.read(d.get(c.name)) for c in columns}})
        return out

    def environments_stamp(self) -> tuple[int, int]:
        """(count, largest rowid) of the environments table: it changes whenever an
        environment is written (a replaced row takes a new rowid)."""
        (n, m), = self._query("SELECT COUNT(*), COALESCE(MAX(rowid), 0) FROM environments")
        return int(n), int(m)

    def episode(self, episode_key: str) -> EpisodeRow | None:
        """One episode with its transcript, or None."""
        rows = self._read("episodes", _EPISODE_COLUMNS, where="WHERE episode_key = ?",
                          args=(episode_key,))
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
    """The SELECT list of a `Usage` over `calls` (or of each call's own, `per_call`); a column
    the table lacks reads as 0."""
    items = [("0" if c not in columns else f"COALESCE({c},0)" if per_call
              else f"COALESCE(SUM({c}),0)")
             for c in ("input_tokens", "output_tokens", "cost_usd", "cache_read_tokens",
                       "cache_write_tokens", "reasoning_tokens", "saved_usd")]
    return ", ".join(["1" if per_call else "COUNT(*)", *items])


def _totals(row: tuple) -> Usage:
    """The `Usage` of a row of `_sums` (counts as ints, dollars as floats)."""
    n, i, o, c, r, w, reasoning, saved = row
    return Usage(calls=int(n), input_tokens=int(i), output_tokens=int(o), cost_usd=float(c),
                 cache_read_tokens=int(r), cache_write_tokens=int(w),
                 reasoning_tokens=int(reasoning), saved_usd=float(saved))


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
