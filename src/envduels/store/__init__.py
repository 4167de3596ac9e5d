"""The run database: `RUN_DIR/run.db`, SQLite in WAL mode. The only package that runs SQL.

Split by direction:

- `RunReader` (`store.reader`) is how everything reads a run: the public `envduels.Run`,
  `report`, `status`, `view`, `export`, `serve`'s catalog, the estimate of a folder with history
  and the analysis tables (`RunReader.tables()`). Opened on a folder it writes nothing there.
- `RunWriter` (`store.writer`) writes a run, one committed transaction per record, so a kill
  loses at most the work in flight. The engine alone imports it (a contract in pyproject.toml);
  it is not exported here.

Inside: the records (`_records`: `EnvRecord`, `EpisodeRow`, `ValidationRecord`, `AuditRecord`,
...; a call's record is the players' `CallRecord`), how their fields become columns
(`_columns`), the tables and their migrations (`_schema`), the run lock (`_lock`), the one
connection and its read-only opening (`_database.Database`) and the analysis view
(`_tables.Tables`). Design: docs/architecture.md, "The run database".
"""

from envduels.store._lock import LOCK_NAME, run_lock, run_lock_held
from envduels.store._records import (
    AuditCounts,
    AuditRecord,
    AuthoringError,
    EnvRecord,
    EpisodeRow,
    ValidationRecord,
)
from envduels.store._schema import DB_NAME, EPISODE_COLUMNS
from envduels.store._tables import (
    AUDIT_COLUMNS,
    ENVIRONMENT_COLUMNS,
    PLAYER_COLUMNS,
    Tables,
    environment_frame,
)
from envduels.store.reader import RunReader

__all__ = [
    "AUDIT_COLUMNS",
    "DB_NAME",
    "ENVIRONMENT_COLUMNS",
    "EPISODE_COLUMNS",
    "LOCK_NAME",
    "PLAYER_COLUMNS",
    "AuditCounts",
    "AuditRecord",
    "AuthoringError",
    "EnvRecord",
    "EpisodeRow",
    "RunReader",
    "Tables",
    "ValidationRecord",
    "environment_frame",
    "run_lock",
    "run_lock_held",
]
