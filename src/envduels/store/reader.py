"""`RunReader`: everything anyone reads from a run database, typed.

Every reader of a run reads through it: the public `envduels.Run`, `envduels report`, `status`,
`view`, `export`, `serve`'s catalog, the estimate of a run folder with history, and the
analysis tables (`tables()`). Opened on a folder it is read-only and changes nothing there
(`Database`); the engine's `RunWriter` holds one over its own connection (`writer.reader`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from envduels.duel.answers import rescue_answers
from envduels.duel.faults import author_faults
from envduels.duel.outcomes import AuditState, Outcome
from envduels.duel.usage import Usage
from envduels.envs._battery import BatteryFindings
from envduels.envs._spec import EnvSpec
from envduels.store._database import Database, Row
from envduels.store._records import (
    AuditCounts,
    AuditRecord,
    AuthoringError,
    EnvRecord,
    EpisodeRow,
    ValidationRecord,
)
from envduels.store._schema import ENV_COLUMNS, EPISODE_COLUMNS, EPISODE_FIELDS, SPEC_COLUMNS
from envduels.store._tables import AUDIT_COLUMNS, TablePlayer, Tables, analysis_tables

if TYPE_CHECKING:
    from envduels.config import RunConfig
    from envduels.envs._spec import VerdictRecord

_PLAYED = (Outcome.SUCCESS, Outcome.FAILURE)
"""The outcomes of a played episode (`Outcome.played`), as SQL parameters."""


def usage_of(row: Row) -> Usage:
    """The `Usage` of a row of `Present.usage` (counts as ints, dollars as floats)."""
    n, i, o, c, r, w, reasoning, saved = (cast(float, v) for v in row)
    return Usage(calls=int(n), input_tokens=int(i), output_tokens=int(o), cost_usd=float(c),
                 cache_read_tokens=int(r), cache_write_tokens=int(w),
                 reasoning_tokens=int(reasoning), saved_usd=float(saved))


def env_record(values: list[object]) -> EnvRecord:
    """The record of the values of `ENV_COLUMNS` (field order: spec, then the run's facts)."""
    spec = EnvSpec(*values[:len(SPEC_COLUMNS)])   # type: ignore[arg-type]
    return EnvRecord(spec, *values[len(SPEC_COLUMNS):])   # type: ignore[arg-type]


def episode_row(values: list[object]) -> EpisodeRow:
    """The episode of the values of `EPISODE_FIELDS` (in field order)."""
    return EpisodeRow(*values)   # type: ignore[arg-type]


class RunReader:
    """One run database, read. Safe to share between threads of one process.

    `RunReader(run_dir)` opens the database read-only (`Database`: nothing in the folder is
    written; `live=True` for a long-lived reader that follows a run as it goes on); UserError
    when there is no run database or it cannot be read. Every method reads the database as it
    is at that moment.
    """

    def __init__(self, source: str | Path | Database, *, live: bool = False) -> None:
        self.db = source if isinstance(source, Database) else Database(source, readonly=True,
                                                                        live=live)
        self.run_dir = self.db.run_dir

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def data_version(self) -> int:
        """Changes whenever the database changed since the last look (`Database.data_version`):
        the key for caches of anything read from it."""
        return self.db.data_version()

    # -- the run's config ---------------------------------------------------------------------

    def meta(self, key: str) -> Any | None:
        """A value of the `meta` table (JSON), or None."""
        rows = self.db.query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(cast(str, rows[0][0])) if rows else None

    def run_config(self) -> RunConfig | None:
        """The config the run was last started with, validated (`config.parse_recorded_config`:
        a config recorded by another version still reads, with today's defaults for what it
        lacks); None when none was recorded or it cannot be read."""
        from envduels.config import parse_recorded_config

        return parse_recorded_config(self.meta("config"))

    # -- calls --------------------------------------------------------------------------------

    def totals(self) -> Usage:
        """Calls, tokens and cost over every call recorded in this run (all sessions)."""
        (row,) = self.db.query(f"SELECT {self.db.present.usage} FROM calls")
        return usage_of(row)

    def usage_by_player(self) -> dict[str, Usage]:
        """`Usage` per player over every call recorded in this run."""
        rows = self.db.query(f"SELECT player, {self.db.present.usage} FROM calls GROUP BY player")
        return {cast(str, r[0]): usage_of(r[1:]) for r in rows}

    def usage_by_player_role(self, after_rowid: int = 0) -> list[dict[str, Any]]:
        """Per (player, role), over the calls recorded after `after_rowid` (all by default):
        calls, input and output tokens, cost, provider retries, and `last_rowid`, the largest
        rowid counted. Calls are never replaced, so sums over successive `after_rowid` windows
        add up to the whole."""
        rows = self.db.query(
            "SELECT player, role, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd),"
            " SUM(COALESCE(json_extract(record, '$.retries'), 0)), MAX(rowid) FROM calls"
            " WHERE rowid > ? GROUP BY player, role ORDER BY player, role", (after_rowid,))
        return [{"player": p, "role": r, "calls": int(n), "input_tokens": int(i or 0),
                 "output_tokens": int(o or 0), "cost_usd": float(c or 0), "retries": int(t or 0),
                 "last_rowid": int(m)}
                for p, r, n, i, o, c, t, m in cast(list[tuple[Any, ...]], rows)]

    def call_usage(self) -> list[tuple[str, str, str, Usage, float]]:
        """(player, role, call_id, its `Usage`, latency_s) of every recorded call, oldest first,
        without reading the bulky records (the estimate reads a whole run's history)."""
        rows = self.db.query(f"SELECT player, role, call_id, {self.db.present.per_call},"
                             " latency_s FROM calls ORDER BY rowid")
        return [(cast(str, p), cast(str, r), cast(str, c), usage_of(row[3:-1]),
                 float(cast(float, row[-1]) or 0.0)) for row in rows for p, r, c in [row[:3]]]

    # -- environments and their validation ------------------------------------------------

    def environment(self, env_id: str) -> EnvRecord | None:
        """The recorded environment `env_id`, or None."""
        rows = self.db.read("environments", ENV_COLUMNS, where="WHERE env_id = ?", args=(env_id,))
        return env_record(rows[0]) if rows else None

    def environments(self) -> list[EnvRecord]:
        """Every recorded environment, in the order first written (a replaced one moves last)."""
        return [env_record(r) for r in self.db.read("environments", ENV_COLUMNS)]

    def environments_stamp(self) -> tuple[int, int]:
        """(count, largest rowid) of the environments table: it changes whenever an
        environment is written (a replaced row takes a new rowid)."""
        (n, m), = self.db.query("SELECT COUNT(*), COALESCE(MAX(rowid), 0) FROM environments")
        return int(cast(int, n)), int(cast(int, m))

    def validations(self, env_id: str | None = None) -> list[ValidationRecord]:
        """Every recorded authoring attempt (of `env_id` only, when given), by environment and
        attempt."""
        sql = "SELECT env_id, attempt, author, round, valid, reasons, verdict, reply FROM validations"
        args: tuple[object, ...] = ()
        if env_id is not None:
            sql += " WHERE env_id = ?"
            args = (env_id,)
        rows = cast(list[tuple[Any, ...]], self.db.query(sql + " ORDER BY env_id, attempt", args))
        return [ValidationRecord(env_id=e, attempt=a, author=au, round=r, valid=bool(v),
                                 reasons=json.loads(rs), verdict=_verdict(vd), reply=rp)
                for e, a, au, r, v, rs, vd, rp in rows]

    def battery_verdicts(self) -> dict[str, BatteryFindings]:
        """env_id -> the degenerate-policy battery's findings (`Verdict.battery`) in the verdict
        of the attempt that made a recorded, valid environment valid (its last valid attempt;
        a fixed-pool environment has one, its validation in the run). Read from the stored
        verdicts: a database from before the battery, or a fixed pool recorded before runs
        validated it, has none."""
        envs = {e.env_id for e in self.environments() if e.valid}
        out: dict[str, BatteryFindings] = {}
        for env_id, verdict in self.db.query(
                "SELECT env_id, verdict FROM validations WHERE valid = 1 ORDER BY env_id, attempt"):
            if env_id not in envs or not verdict:
                continue
            with contextlib.suppress(ValueError):
                recorded = json.loads(cast(str, verdict))
                found = recorded.get("battery") if isinstance(recorded, dict) else None
                if isinstance(found, dict):   # the verdict's own record of it (`to_json`)
                    out[cast(str, env_id)] = cast(BatteryFindings, found)
                else:
                    out.pop(cast(str, env_id), None)
        return out

    def authoring_errors(self) -> dict[str, AuthoringError]:
        """Authoring jobs whose last try ended in `error` and that have no environment yet,
        by env_id. A resumed run retries them."""
        errors = self.meta("authoring_errors") or {}
        recorded = {r[0] for r in self.db.query("SELECT env_id FROM environments")}
        return {k: AuthoringError(str(v.get("author", "")), int(v.get("round", 0)))
                for k, v in errors.items() if k not in recorded}

    # -- episodes -----------------------------------------------------------------------------

    def episodes(self) -> list[EpisodeRow]:
        """Every recorded episode as recorded, oldest first (a replaced one moves last)."""
        return [episode_row(r) for r in self.db.read("episodes", EPISODE_FIELDS)]

    def episode(self, episode_key: str) -> EpisodeRow | None:
        """One episode with its transcript, or None."""
        rows = self.db.read("episodes", EPISODE_FIELDS, where="WHERE episode_key = ?",
                            args=(episode_key,))
        return episode_row(rows[0]) if rows else None

    def episode_index(self, after_rowid: int = 0) -> list[dict[str, Any]]:
        """Episodes written after `after_rowid` (every one by default), oldest first, without
        their transcripts: `rowid` plus every `EpisodeRow` field but `transcript`. A replaced
        episode (an `error` retried) comes back under a new, larger rowid, so a caller that
        keeps the largest rowid seen and asks again gets exactly what changed."""
        cols = [c for c in EPISODE_FIELDS if c.name != "transcript"]
        names = [c.name for c in cols if c.name in self.db.present.columns["episodes"]]
        rows = self.db.query(f"SELECT rowid, {', '.join(names)} FROM episodes WHERE rowid > ?"
                             " ORDER BY rowid", (after_rowid,))
        out = []
        for r in rows:
            d = dict(zip(["rowid", *names], r, strict=True))
            out.append({"rowid": d["rowid"], **{c.name: c.read(d.get(c.name)) for c in cols}})
        return out

    def episode_counts(self) -> dict[str, int]:
        """Recorded episodes by outcome."""
        return {cast(str, k): int(cast(int, v)) for k, v in self.db.query(
            "SELECT outcome, COUNT(*) FROM episodes GROUP BY outcome")}

    def finished_by_env_and_solver(self) -> dict[tuple[str, str], int]:
        """How many episodes that need no replay (every outcome but `error`) each (environment,
        solver) has, without reading transcripts."""
        rows = self.db.query("SELECT env_id, solver, COUNT(*) FROM episodes WHERE outcome != ?"
                             " GROUP BY env_id, solver", (Outcome.ERROR,))
        return {(cast(str, e), cast(str, s)): int(cast(int, n)) for e, s, n in rows}

    # -- replay audits ------------------------------------------------------------------------

    def audit_counts(self) -> AuditCounts:
        """Audits recorded by state, and played episodes (success or failure) whose audit is not
        recorded yet."""
        states: dict[object, object] = {
            s: n for s, n in self.db.query("SELECT state, COUNT(*) FROM audits GROUP BY state")}
        (pending,), = self.db.query(
            "SELECT COUNT(*) FROM episodes WHERE outcome IN (?, ?) AND episode_key"
            " NOT IN (SELECT episode_key FROM audits)", _PLAYED)
        return AuditCounts(passed=int(cast(int, states.get(AuditState.PASSED, 0))),
                           mismatch=int(cast(int, states.get(AuditState.MISMATCH, 0))),
                           pending=int(cast(int, pending)))

    def nondeterministic_environments(self) -> dict[str, str]:
        """Environments whose replay audit found a mismatch: env id -> the first difference."""
        out: dict[str, str] = {}
        for env_id, detail in self.db.query(
                "SELECT env_id, detail FROM audits WHERE state = ? ORDER BY rowid",
                (AuditState.MISMATCH,)):
            out.setdefault(cast(str, env_id), cast(str, detail))
        return out

    # -- the analysis view --------------------------------------------------------------------

    def tables(self, *, transcripts: Literal["all", "hinted wins"] = "all") -> Tables:
        """Players, environments and episodes as DataFrames (see `Tables`), episodes judged by
        the author's-fault rule (`duel.faults`).

        `transcripts="hinted wins"` reads the transcripts of the hinted successes only (every
        other episode's `transcript` is `[]`): all that analysis reads of transcripts is the
        winning action of a hinted success (the `hint_leak` flag), so the analysis of both is
        the same, and on a large run this loads in a fraction of the time (the viewer)."""
        replace = ({} if transcripts == "all" else
                   {"transcript": "CASE WHEN hinted AND outcome = ? THEN transcript END"})
        rows = self.db.read("episodes", EPISODE_FIELDS, replace=replace,
                            args=() if transcripts == "all" else (Outcome.SUCCESS,))
        config = self.run_config()
        players = (config.players if config is not None else _recorded_players(
            self.meta("config")))
        # the episodes as analysis scores them: the author's-fault rule (`duel.faults`) over
        # the recorded facts, the audits' states, the battery's flags and the answers of the
        # hinted wins as played (read before judging, which makes them incomplete)
        audits = _audits(self.db)
        battery = self.battery_verdicts()
        answers = rescue_answers(_rescues(self.db))
        faults = author_faults([(a.env_id, a.state, a.detail) for a in audits], battery, answers)
        return analysis_tables(
            [dict(zip(EPISODE_COLUMNS, r, strict=True)) for r in rows],
            players=[TablePlayer(p.name, p.provider, p.model, p.params_b, list(p.roles))
                     for p in players],
            usage=self.usage_by_player(), environments=self.environments(), audits=audits,
            battery=battery, answers=answers, faults=faults)


def _verdict(text: object) -> VerdictRecord | None:
    return cast("VerdictRecord | None", json.loads(text) if isinstance(text, str) else None)


def _audits(db: Database) -> list[AuditRecord]:
    """Every recorded replay audit, oldest first."""
    return [AuditRecord(cast(str, k), cast(str, e), AuditState(cast(str, s)),
                        cast("str | None", d), cast("str | None", p))
            for k, e, s, d, p in db.query(
                f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audits ORDER BY rowid")]


def _rescues(db: Database) -> list[tuple[str, int, object, object]]:
    """(env_id, seed, hinted transcript, unhinted transcript) of every rescue as played:
    a panel pair (same environment, solver, seed and trial, not self-play) whose hinted
    episode is a success and whose unhinted one a failure (`duel.answers.rescues`, read in
    SQL so that the viewer's tables need not load the other transcripts)."""
    have = db.present.columns["episodes"]
    if not {"env_id", "solver", "seed", "hinted", "outcome", "transcript"} <= set(have):
        return []
    # a column added after a database was written reads as its default (trial 0, no self-play)
    trial = " AND u.trial = h.trial" if "trial" in have else ""
    panel = " AND NOT h.self_play" if "self_play" in have else ""
    rows = db.query(
        "SELECT h.env_id, h.seed, h.transcript, u.transcript FROM episodes h JOIN episodes u"
        f" ON u.env_id = h.env_id AND u.solver = h.solver AND u.seed = h.seed{trial}"
        f" AND NOT u.hinted WHERE h.hinted{panel} AND h.outcome = ? AND u.outcome = ?"
        " ORDER BY h.rowid", (Outcome.SUCCESS, Outcome.FAILURE))
    out = []
    for env_id, seed, hinted, unhinted in rows:
        with contextlib.suppress(ValueError, TypeError):
            out.append((cast(str, env_id), int(cast(int, seed)), json.loads(cast(str, hinted)),
                        json.loads(cast(str, unhinted))))
    return out


def _recorded_players(raw: object) -> list[TablePlayer]:
    """The players of a recorded config today's schema cannot read at all (one required
    value it no longer accepts, such as a provider since renamed), as recorded: the
    analysis still needs who authored and who solved (the schema's default roles when none
    was recorded)."""
    from envduels.config import PlayerConfig

    recorded = raw.get("players") if isinstance(raw, dict) else None
    if not isinstance(recorded, list):
        return []
    default_roles = PlayerConfig.model_fields["roles"].get_default(call_default_factory=True)
    return [TablePlayer(name=p["name"], provider=p.get("provider"), model=p.get("model"),
                        params_b=p.get("params_b"),
                        roles=p["roles"] if isinstance(p.get("roles"), list) else default_roles)
            for p in recorded if isinstance(p, dict) and isinstance(p.get("name"), str)]
