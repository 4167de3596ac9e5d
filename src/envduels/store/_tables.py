"""The analysis view of a run: `Tables`, pandas DataFrames built from the records.

`analysis_tables` is the one place that decides what the analysis sees of a run (the episodes
judged by the author's-fault rule, in a canonical order); `RunReader.tables` gathers the
records and calls it. `environment_frame` is the one builder of the environments frame (tests
build theirs with it too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envduels.duel.answers import Answer
from envduels.duel.faults import AuthorFault, judged
from envduels.duel.outcomes import AuditState
from envduels.duel.usage import Usage
from envduels.envs._battery import BatteryFindings
from envduels.store._columns import Column
from envduels.store._records import AuditRecord, EnvRecord
from envduels.store._schema import (
    DERIVED_COLUMNS,
    ENV_COLUMNS,
    ENV_TABLE,
    EPISODE_COLUMNS,
    EPISODE_FIELDS,
    RUN_COLUMNS,
    SPEC_COLUMNS,
)

if TYPE_CHECKING:
    import pandas as pd

PLAYER_COLUMNS = ["name", "provider", "model", "params_b", "roles", "cost_usd", "input_tokens",
                  "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                  "saved_usd"]

AUDIT_COLUMNS = ["episode_key", "env_id", "state", "detail", "played_outcome"]
"""The columns of `Tables.audits`."""

_FRAME_FIRST = ["env_id", "author", "round", "domain", "title", "valid", "invalid_reason", "hint",
                "source", "source_sha256", "class_name", "max_turns", "fixed_pool",
                "benchmark_seeds"]
ENVIRONMENT_COLUMNS = _FRAME_FIRST + [c for c in ENV_TABLE if c not in _FRAME_FIRST]
"""The columns of `Tables.environments`: the ones readers have always had first, then every
other column of the record (`slot`, `hints`, `metadata`, and any field added since)."""


def _audit_frame(audits: Iterable[AuditRecord]) -> pd.DataFrame:
    """`audits` as `Tables.audits`, each state an `AuditState`."""
    import pandas as pd

    return pd.DataFrame([(a.episode_key, a.env_id, AuditState(a.state), a.detail,
                          a.played_outcome) for a in audits], columns=AUDIT_COLUMNS)


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


def environment_frame(envs: list[EnvRecord]) -> pd.DataFrame:
    """`envs` as `Tables.environments`, in the order given: one row per record with every
    column of `ENVIRONMENT_COLUMNS` (sequences as lists, `valid` and `fixed_pool` bools)."""
    import pandas as pd  # here: a run that never analyses should not pay pandas' import

    rows = []
    for env in envs:
        row: dict[str, object] = {}
        for owner, cols in ((env.spec, SPEC_COLUMNS), (env, RUN_COLUMNS)):
            for c in cols:
                value = getattr(owner, c.field)
                row[c.name] = list(value) if isinstance(value, tuple) else value
        row.update({name: getattr(env.spec, name) for name in DERIVED_COLUMNS})
        rows.append(row)
    return _typed(pd.DataFrame(rows, columns=ENVIRONMENT_COLUMNS), ENV_COLUMNS)


def _typed(df: pd.DataFrame, cols: list[Column]) -> pd.DataFrame:
    """`df` with its columns of bool fields as bools (SQLite and an empty frame give objects)."""
    for c in cols:
        if c.kind is bool:
            df[c.name] = df[c.name].astype(bool)
    return df


@dataclass(frozen=True)
class TablePlayer:
    """A player of the run as the players table lists it: from the recorded config, or, when
    today's schema cannot read that config at all, as recorded (`RunReader.tables`)."""

    name: str
    provider: object
    model: object
    params_b: object
    roles: list[str]


def analysis_tables(episodes: list[dict[str, Any]], *, players: Iterable[TablePlayer],
                    usage: Mapping[str, Usage], environments: list[EnvRecord],
                    audits: list[AuditRecord], battery: dict[str, BatteryFindings],
                    answers: dict[str, dict[int, set[Answer]]],
                    faults: Mapping[str, AuthorFault]) -> Tables:
    """The analysis tables around `episodes` (records with every `EPISODE_COLUMNS` key, as
    recorded), each judged by its environment's author's fault (`faults`,
    `duel.faults.author_faults` of the other arguments): the one place that decides what
    analysis sees of a run, whether or not every transcript was read."""
    import pandas as pd

    rows = []
    for p in players:
        u = usage.get(p.name, Usage())
        rows.append({
            "name": p.name, "provider": p.provider, "model": p.model,
            "params_b": p.params_b, "roles": list(p.roles),
            "cost_usd": u.cost_usd, "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens, "cache_read_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
            "reasoning_tokens": u.reasoning_tokens, "saved_usd": u.saved_usd,
        })
    for ep in episodes:
        ep["outcome"], ep["reason"] = judged(ep["outcome"], ep["reason"], faults.get(ep["env_id"]))
    env_df = environment_frame(environments)
    ep_df = _typed(pd.DataFrame(episodes, columns=EPISODE_COLUMNS), EPISODE_FIELDS)
    # A canonical order, not the order work happened to finish in: the same tournament must
    # give the same report (seeded bootstraps draw by position) on any executor.
    env_df = env_df.sort_values("env_id", kind="stable").reset_index(drop=True)
    ep_df = ep_df.sort_values(["env_id", "solver", "seed", "trial", "hinted"],
                              kind="stable").reset_index(drop=True)
    return Tables(
        players=pd.DataFrame(rows, columns=PLAYER_COLUMNS),
        environments=env_df,
        episodes=ep_df,
        audits=_audit_frame(audits),
        battery=battery,
        rescue_answers=answers,
    )
