"""`RunWriter`: the one writer of a run database, held by the engine alone.

Everything a run produces is written here as soon as it exists, one committed transaction per
record, so a kill loses at most the work in flight. Only `envduels.engine` imports this module
(an import-linter contract in pyproject.toml, `run-writer-held-by-the-engine`); every other
part of envduels reads a run through `store.RunReader`, as the engine does too
(`writer.reader`, over the writer's own connection).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from envduels._text import valid_text
from envduels.duel.faults import audit_caught
from envduels.duel.outcomes import AuditState, Outcome
from envduels.duel.usage import Usage
from envduels.errors import UserError
from envduels.players import CallRecord
from envduels.store._columns import SQLValue, json_text, text_value
from envduels.store._database import Database
from envduels.store._lock import run_lock
from envduels.store._records import EnvRecord, EpisodeRow, ValidationRecord
from envduels.store._schema import DERIVED_COLUMNS, EPISODE_FIELDS, RUN_COLUMNS, SPEC_COLUMNS
from envduels.store.reader import RunReader, episode_row

_PLAYED = (Outcome.SUCCESS, Outcome.FAILURE)


def _env_values(env: EnvRecord) -> dict[str, SQLValue]:
    """The environments row of `env`, by column."""
    row = {c.name: c.encode(getattr(env.spec, c.field)) for c in SPEC_COLUMNS}
    row.update({c.name: c.encode(getattr(env, c.field)) for c in RUN_COLUMNS})
    row.update({name: text_value(getattr(env.spec, name)) for name in DERIVED_COLUMNS})
    return row


class RunWriter:
    """The run database of one run folder, open for writing. Safe to share between threads.

    Every write commits before returning. `RunWriter(run_dir)` creates the database when the
    folder holds none (`create=False`: UserError instead) and migrates an older one in place;
    `RunWriter.locked(run_dir)` holds the run lock too, for as long as it is open (what
    `envduels run` does). `reader` reads the same database.
    """

    def __init__(self, run_dir: str | Path, *, create: bool = True) -> None:
        self.db = Database(run_dir, readonly=False, create=create)
        self.run_dir = self.db.run_dir
        self.reader = RunReader(self.db)
        self._totals: Usage | None = None

    @classmethod
    @contextmanager
    def locked(cls, run_dir: str | Path) -> Iterator[RunWriter]:
        """The run lock (`run_lock`: one `envduels run` per folder), then the database open
        for writing, both held until the block ends."""
        with run_lock(run_dir):
            writer = cls(run_dir)
            try:
                yield writer
            finally:
                writer.close()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_meta(self, key: str, value: object) -> None:
        with self.db.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                       (key, json_text(value, sort_keys=True)))

    # -- calls: the players.ResponseCache -------------------------------------------------

    def get(self, key: str) -> CallRecord | None:
        """The recorded call for a request key, or None (players.ResponseCache)."""
        rows = self.db.query("SELECT record FROM calls WHERE key = ?", (valid_text(key),))
        if not rows:
            return None
        try:
            return CallRecord.from_json(json.loads(cast(str, rows[0][0])))
        except (ValueError, TypeError, RecursionError) as err:   # not JSON, not a call record
            raise UserError(f"the run database's record of call {key[:16]} is unreadable "
                            f"({err}); run with --no-cache to ask the provider again") from None

    def put(self, key: str, record: CallRecord, *, repeat: bool = False) -> None:
        """Record one finished model call (players.ResponseCache); a key already present is kept.

        With `repeat`, a call paid again although `key` is recorded (`envduels run --no-cache`)
        is kept too, as `KEY#2`, `KEY#3`, ...: totals and the budget count what was paid, and
        `get(key)` still answers with the first record.
        """
        key = valid_text(key)
        u = record.usage
        with self.db.transaction() as db:
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
                (key, text_value(record.player), text_value(record.role),
                 text_value(record.call_id),
                 json_text(record.to_json(), sort_keys=True, default=str),
                 int(u.input_tokens), int(u.output_tokens), float(u.cost_usd), float(u.call_s),
                 time.time(), int(u.cache_read_tokens), int(u.cache_write_tokens),
                 int(u.reasoning_tokens), float(u.saved_usd)),
            )
            inserted = cur.rowcount == 1
        if inserted and self._totals is not None:
            self._totals = self._totals + Usage(
                calls=1, input_tokens=int(u.input_tokens), output_tokens=int(u.output_tokens),
                cost_usd=float(u.cost_usd), cache_read_tokens=int(u.cache_read_tokens),
                cache_write_tokens=int(u.cache_write_tokens),
                reasoning_tokens=int(u.reasoning_tokens), saved_usd=float(u.saved_usd))

    def recorder(self) -> CallRecorder:
        """This database as a `players.ResponseCache` that records every call and answers none."""
        return CallRecorder(self)

    def totals(self) -> Usage:
        """`reader.totals()`, read once and then kept up to date by `put` (the budget asks it
        after every unit of work)."""
        if self._totals is None:
            self._totals = self.reader.totals()
        return self._totals

    # -- environments and validations -----------------------------------------------------

    def put_environment(self, env: EnvRecord) -> None:
        """Record an environment's final state (valid or invalid); replaces an earlier row."""
        with self.db.transaction() as db:
            self.db.insert(db, "environments", _env_values(env))

    def put_validation(self, v: ValidationRecord) -> None:
        """Record one authoring attempt; the same (env, attempt) written again replaces it."""
        with self.db.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO validations VALUES (?,?,?,?,?,?,?,?,?)",
                (text_value(v.env_id), v.attempt, text_value(v.author), v.round, int(v.valid),
                 json_text(v.reasons), json_text(v.verdict, default=str), text_value(v.reply),
                 time.time()),
            )

    def put_authoring_error(self, env_id: str, *, author: str, round: int) -> None:
        """Note that authoring `env_id` ended in `error` (a provider kept failing, a sandbox
        could not start): nothing else is recorded for it, and `status` must still say so.
        A later success records the environment, which `authoring_errors` then leaves out."""
        with self.db.transaction() as db:
            rows = db.execute("SELECT value FROM meta WHERE key = 'authoring_errors'").fetchall()
            errors = json.loads(rows[0][0]) if rows else {}
            errors[valid_text(env_id)] = {"author": text_value(author), "round": round}
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('authoring_errors', ?)",
                       (json_text(errors, sort_keys=True),))

    # -- episodes and their audits ----------------------------------------------------------

    def put_episode(self, ep: EpisodeRow) -> None:
        """Record an episode; a later result for the same key (an `error` retried) replaces it."""
        with self.db.transaction() as db:
            self.db.insert(db, "episodes", {c.name: c.encode(getattr(ep, c.field))
                                            for c in EPISODE_FIELDS})

    def put_audit(self, episode_key: str, env_id: str, *, passed: bool, detail: str = "") -> None:
        """Record the replay audit of a played episode. A mismatch also judges the episode as
        `duel.faults.audit_caught` says (`incomplete`, "replay audit: DETAIL"; the outcome as
        played is kept in the audit row), in the same transaction."""
        with self.db.transaction() as db:
            row = db.execute("SELECT outcome FROM episodes WHERE episode_key = ?",
                             (episode_key,)).fetchone()
            played = row[0] if row else None
            if not passed and played != Outcome.INCOMPLETE:
                outcome, reason = audit_caught(detail)
                db.execute("UPDATE episodes SET outcome = ?, reason = ? WHERE episode_key = ?",
                           (outcome, text_value(reason), episode_key))
            db.execute(
                "INSERT OR REPLACE INTO audits (episode_key, env_id, state, detail, played_outcome,"
                " created) VALUES (?,?,?,?,?,?)",
                (episode_key, text_value(env_id),
                 AuditState.PASSED if passed else AuditState.MISMATCH, text_value(detail),
                 played, time.time()))

    def finished_episode_keys(self) -> set[str]:
        """Keys of episodes that need no replay: every outcome except `error`."""
        return {cast(str, r[0]) for r in self.db.query(
            "SELECT episode_key FROM episodes WHERE outcome != ?", (Outcome.ERROR,))}

    def unaudited_episodes(self) -> list[EpisodeRow]:
        """Played episodes (success or failure) whose replay audit is not recorded yet."""
        return [episode_row(r) for r in self.db.read(
            "episodes", EPISODE_FIELDS, where="WHERE outcome IN (?, ?) AND episode_key NOT IN"
            " (SELECT episode_key FROM audits)", args=_PLAYED)]


class CallRecorder:
    """A `players.ResponseCache` over a run database that never answers (`envduels run
    --no-cache`): every call goes to the provider and is recorded, a repeat of a recorded
    request as a repeat (see `RunWriter.put`)."""

    def __init__(self, writer: RunWriter) -> None:
        self._writer = writer

    def get(self, key: str) -> CallRecord | None:
        return None

    def put(self, key: str, record: CallRecord) -> None:
        self._writer.put(key, record, repeat=True)
