"""The run database's tables and their migrations.

- `meta`: the config JSON, its fingerprint and the result-affecting settings (for resume checks).
- `calls`: every model call by request key (the `players.ResponseCache`): a resumed run asks the
  cache first and never pays twice. Its bill is in columns: tokens (input split into uncached,
  cache read and cache write; reasoning within output), cost and what prompt caching saved; a
  database written before the split is migrated when opened.
- `environments`: one row per environment (authored, or from a fixed pool), final once written:
  its `EnvRecord`, one column per field (see `TABLE_COLUMNS`).
- `validations`: every authoring attempt with the validator's verdict.
- `episodes`: one row per episode key with its transcript, outcome and reason.
- `audits`: one row per audited episode (its replay `passed` or was a `mismatch`); a played
  episode (success or failure) without one is still to be audited, also after a resume. The
  table is created on open, so a run database from before audits exists gains it empty.

A database written by an older envduels opens: the columns it lacks are added when it is opened
for writing (`migrate`), read as their field's default when it cannot be written, and a table
it lacks reads as empty (`temp_missing_tables`). A new database has the first release's columns
in the first release's order, so that release (which read `SELECT *` by position) still reads it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from envduels.envs._spec import EnvSpec
from envduels.store._columns import columns
from envduels.store._records import EnvRecord, EpisodeRow

DB_NAME = "run.db"
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

# Columns of `calls` added after the first release, with what an older row holds: a run
# database written before them is migrated when opened (its calls read as uncached).
_CALL_SPLIT = {"cache_read_tokens": "INTEGER DEFAULT 0", "cache_write_tokens": "INTEGER DEFAULT 0",
               "reasoning_tokens": "INTEGER DEFAULT 0", "saved_usd": "REAL DEFAULT 0"}

# The environments table: one column per EnvSpec field (`id` as `env_id`, the name every table
# uses), one per fact of the run's EnvRecord, and the spec's `hint` and `source_sha256` (derived,
# written for readers of the file; read back from the spec, never from the column). A field
# added to EnvSpec or EnvRecord is a new column everywhere, added to an older database on open.
SPEC_COLUMNS = columns(EnvSpec, rename={"id": "env_id"}, sort_keys=True)
RUN_COLUMNS = columns(EnvRecord, skip=("spec",))
DERIVED_COLUMNS = ("hint", "source_sha256")
ENV_COLUMNS = [*SPEC_COLUMNS, *RUN_COLUMNS]
ENV_TABLE = [c.name for c in ENV_COLUMNS] + list(DERIVED_COLUMNS)

EPISODE_FIELDS = columns(EpisodeRow)
EPISODE_COLUMNS = [c.name for c in EPISODE_FIELDS]
"""The columns of the episodes table and of `Tables.episodes`: every `EpisodeRow` field."""


def _create(table: str, cols: list[tuple[str, str]]) -> str:
    """The CREATE TABLE of a record's table: its first column is the key; `created` last."""
    defs = [f"{name} {sql}" + (" PRIMARY KEY" if i == 0 else "")
            for i, (name, sql) in enumerate(cols)]
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(defs)}, created REAL);"


# The order of the environments table's columns in a new database: that of the first release
# (whose `SELECT *` readers unpack by position), then any column added since.
_FIRST_RELEASE_ORDER = ["env_id", "author", "round", "slot", "domain", "title", "valid",
                        "invalid_reason", "hint", "hints", "source", "source_sha256", "class_name",
                        "max_turns", "fixed_pool", "benchmark_seeds", "metadata"]
TABLE_COLUMNS = {
    "environments": sorted(
        [(c.name, c.sql) for c in ENV_COLUMNS] + [(n, "TEXT") for n in DERIVED_COLUMNS],
        key=lambda col: (_FIRST_RELEASE_ORDER.index(col[0]) if col[0] in _FIRST_RELEASE_ORDER
                         else len(_FIRST_RELEASE_ORDER))),
    "episodes": [(c.name, c.sql) for c in EPISODE_FIELDS],
}
"""The columns of the tables that store records, from the records: the schema, the migration of
an older database and every INSERT and SELECT of these tables read them here."""

SCHEMA = _SCHEMA_TEMPLATE.format(**{t: _create(t, cols) for t, cols in TABLE_COLUMNS.items()})


@dataclass(frozen=True)
class Present:
    """What an opened database holds, after its migration: each record table's columns, and
    the SELECT lists of a `Usage` over `calls` (`usage`: summed; `per_call`: each call's own)."""

    columns: dict[str, set[str]]
    usage: str
    per_call: str


def migrate(db: sqlite3.Connection, *, write: bool) -> Present:
    """Add the columns a database written by an older envduels lacks. Where it cannot (or,
    without `write`, may not) be written, its missing columns read as zeros (calls) or as
    the record field's default (environments, episodes)."""
    have: dict[str, set[str]] = {}
    for table, cols in TABLE_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column, kind in cols:
            if column not in present and write:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                present.add(column)
        have[table] = present
    calls = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
    for column, kind in _CALL_SPLIT.items():
        if column not in calls and write:
            try:
                db.execute(f"ALTER TABLE calls ADD COLUMN {column} {kind}")
                calls.add(column)
            except sqlite3.OperationalError:
                pass
    return Present(have, _sums(calls), _sums(calls, per_call=True))


def _sums(present: set[str], *, per_call: bool = False) -> str:
    """The SELECT list of a `Usage` over `calls` (or of each call's own, `per_call`); a column
    the table lacks reads as 0."""
    items = [("0" if c not in present else f"COALESCE({c},0)" if per_call
              else f"COALESCE(SUM({c}),0)")
             for c in ("input_tokens", "output_tokens", "cost_usd", "cache_read_tokens",
                       "cache_write_tokens", "reasoning_tokens", "saved_usd")]
    return ", ".join(["1" if per_call else "COUNT(*)", *items])


def temp_missing_tables(db: sqlite3.Connection) -> None:
    """On a read-only connection to a database written by an older envduels (a table added
    since, such as `audits`, is missing and cannot be created in the file), the missing tables
    as empty TEMP tables: readers see "nothing recorded" instead of "no such table"."""
    existing = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for statement in SCHEMA.split(";"):
        name = statement.split("EXISTS", 1)[-1].split("(", 1)[0].strip()
        if "CREATE TABLE" in statement and name not in existing:
            db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
