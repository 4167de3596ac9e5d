"""`Database`: one run database's SQLite connection, for writing or read-only.

It owns the connection and everything about it: WAL mode, the migration of an older file, one
lock around every statement (a `Database` is shared by the threads of one process), the write
transaction, reading a record's columns by name, and the read-only opening that writes nothing
in the run folder and, for a long-lived reader, follows a run that starts writing. The reader
(`RunReader`) and the writer (`RunWriter`) run their SQL through it; nothing else opens
`run.db`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envduels.errors import UserError
from envduels.store._columns import Column, SQLValue
from envduels.store._lock import LOCK_CHECK_S, run_lock_held
from envduels.store._schema import DB_NAME, SCHEMA, Present, migrate, temp_missing_tables

Row = tuple[SQLValue, ...]


class Database:
    """The run database of one run folder. Safe to share between threads of one process.

    Opened for writing (`readonly=False`): created (with `create`) when the folder holds none,
    migrated in place. Opened read-only: nothing in the folder is created or changed (no side
    file, no mtime) unless a writer is there: with none, `run.db` is opened `immutable=1`, read
    as a file nothing writes. A writer is an `envduels run` holding `run.lock`
    (`run_lock_held`) or a non-empty `run.db-wal` (a run writing now, or one that was killed:
    its log holds committed records); then SQLite's read-only mode (`mode=ro`), which reads the
    log, for which `run.db-shm` must exist or be creatable (on a read-only mount the error says
    to copy the folder).

    `live=True` (a long-lived reader: `envduels view`) follows the run as it changes: an
    immutable open becomes `mode=ro` on the first read after a writer's log appears. When the
    `envduels run` it followed has ended, its log is folded into `run.db` and removed, as that
    run would have done had no reader held the database open (SQLite leaves `-wal`/`-shm`
    behind a writer that is not the last to close), and the open is immutable again.
    `live=False` (a short command: `status`, `report`, `export`) decides once: a run started
    after it opened is not seen.
    """

    def __init__(self, run_dir: str | Path, *, readonly: bool, create: bool = False,
                 live: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        if (readonly or not create) and not self.path.is_file():
            raise UserError(
                f"{self.run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                "started with `envduels run CONFIG`"
            )
        self.readonly = readonly
        self._lock = threading.Lock()
        self._live = live           # a live reader follows writers
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
            self._db.executescript(SCHEMA)
            self.present: Present = migrate(self._db, write=True)
        except (OSError, sqlite3.Error) as err:
            raise UserError(
                f"cannot open the run database {self.path} ({err}); choose a writable output_dir"
            ) from None

    # -- statements ---------------------------------------------------------------------------

    def query(self, sql: str, args: tuple[object, ...] = ()) -> list[Row]:
        """The rows of one read (a live reader first checks whether to follow a writer)."""
        with self._lock:
            if self._live:
                self._follow_writer()
            return self._db.execute(sql, args).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE), committed when the block ends."""
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

    def read(self, table: str, cols: list[Column], *, where: str = "",
             args: tuple[object, ...] = (), replace: dict[str, str] | None = None
             ) -> list[list[object]]:
        """The values of `cols` (a record's, in field order) in the rows of `table`, oldest
        first, read by name: a column this database lacks (added after it was written) reads as
        its field's default. `replace` gives an SQL expression to read instead of a column."""
        replace = replace or {}
        present = [c for c in cols if c.name in self.present.columns[table]]
        exprs = [f"{replace[c.name]} AS {c.name}" if c.name in replace else c.name for c in present]
        rows = self.query(f"SELECT {', '.join(exprs)} FROM {table} {where} ORDER BY rowid", args)
        if len(present) < len(cols):   # None where a column is missing: its default
            at = {c.name: i for i, c in enumerate(present)}
            rows = [tuple(r[at[c.name]] if c.name in at else None for c in cols) for r in rows]
        # convert only what needs it (bools, JSON, and None where the default is not None): a
        # large run reads millions of cells here
        convert = [(i, c.read) for i, c in enumerate(cols)
                   if c.kind not in (str, int, float) or c.default() is not None]
        out = []
        for r in rows:
            values: list[object] = list(r)
            for i, read in convert:
                values[i] = read(r[i])
            out.append(values)
        return out

    @staticmethod
    def insert(db: sqlite3.Connection, table: str, values: dict[str, SQLValue]) -> None:
        """Write one record's row into `table` by column name, replacing a row with its key."""
        names = [*values, "created"]
        db.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(names)}) VALUES "
                   f"({', '.join('?' * len(names))})", (*values.values(), time.time()))

    def data_version(self) -> int:
        """A number that changes whenever another connection has committed to this database
        since this one's last look (SQLite's `PRAGMA data_version`, plus a base that grows
        when a live reader reopens its connection): the key for caches of anything read from
        it."""
        (v,), = self.query("PRAGMA data_version")
        return self._version_base + int(v or 0)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- read-only opening, and following a writer -----------------------------------------

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
            temp_missing_tables(self._db)
            self.present = migrate(self._db, write=False)
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
