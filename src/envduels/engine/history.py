"""The duel history an author sees from round 2: a pure function of the run's tables.

`history: none` shows nothing, `own` the author's own environments, `all` every environment of
earlier rounds (fixed pools included). Each environment gets its title, author, domain, hint,
flags and per-solver pass rates without -> with the hint (self-play excluded), plus short
excerpts of telling episodes: a failure the hint rescued, a hint that did not help. Entries are
ordered most informative first (largest absolute hint gain, then invalid environments with their
reason) and cut to `max_chars` at an entry boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envduels._text import one_line
from envduels.duel.outcomes import Outcome

if TYPE_CHECKING:   # annotations only: a run should not pay pandas' import to start
    import pandas as pd

    from envduels.duel.protocol import Entry
    from envduels.store import Tables

def _rate(series: pd.Series) -> float | None:
    return None if len(series) == 0 else float((series == Outcome.SUCCESS).mean())


def _fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def _last_action(transcript: list[Entry]) -> str:
    actions = [e.get("action") for e in transcript if e.get("role") == "env" and e.get("action")]
    return str(actions[-1]) if actions else "(no valid action)"


def history_digest(tables: Tables, *, author: str, round_: int, mode: str, max_chars: int) -> str:
    """The digest `author` sees before writing in `round_` (empty in round 1 or mode "none").

    `tables` is a `store.Tables`; only environments of rounds before `round_` appear.
    """
    if mode == "none" or round_ <= 1 or max_chars <= 0:
        return ""
    envs = tables.environments
    envs = envs[envs["round"] < round_]
    if mode == "own":
        envs = envs[envs.author == author]
    episodes = tables.episodes
    episodes = episodes[episodes.outcome.isin([Outcome.SUCCESS, Outcome.FAILURE]) & ~episodes.self_play]
    from envduels.analysis.metrics import environment_flags

    # the same flags the report and export show, from the whole run's tables
    all_flags = environment_flags(tables)
    entries: list[tuple[float, str, str]] = []
    for _, env in envs.iterrows():
        eps = episodes[episodes.env_id == env.env_id]
        head = (f"- \"{env.title or env.env_id}\" by {env.author} (round {env['round']}, "
                f"domain {env.domain})")
        if not env.valid:
            entries.append((-1.0, env.env_id,
                            f"{head}: INVALID: {one_line(env.invalid_reason or '', 200)}"))
            continue
        lines = [head, f"  hint: {one_line(env.hint, 200)}"]
        flags = all_flags.get(env.env_id, [])
        if flags:
            lines.append(f"  flags: {', '.join(flags)}")
        gains = []
        for solver in sorted(set(eps.solver)):
            mine = eps[eps.solver == solver]
            r0 = _rate(mine[~mine.hinted].outcome)
            r1 = _rate(mine[mine.hinted].outcome)
            if r0 is not None and r1 is not None:
                gains.append(r1 - r0)
            lines.append(f"  {solver}: {_fmt(r0)} -> {_fmt(r1)}")
        lines += _excerpts(eps)
        score = abs(sum(gains) / len(gains)) if gains else 0.0
        entries.append((score, env.env_id, "\n".join(lines)))
    entries.sort(key=lambda e: (-e[0], e[1]))
    out: list[str] = []
    used = 0
    for _, _, text in entries:
        if used + len(text) + 1 > max_chars:
            continue
        out.append(text)
        used += len(text) + 1
    return "\n".join(out)


def _excerpts(eps: pd.DataFrame) -> list[str]:
    """One rescued failure and one unhelpful hint, if the episodes hold them."""
    lines = []
    plain = {(r.solver, r.seed, r.trial): r for r in eps[~eps.hinted].itertuples()}
    rescued = unhelpful = None
    for r in eps[eps.hinted].sort_values(["solver", "seed", "trial"]).itertuples():
        twin = plain.get((r.solver, r.seed, r.trial))
        if twin is None or twin.outcome != Outcome.FAILURE:
            continue
        if r.outcome == Outcome.SUCCESS and rescued is None:
            rescued = (r, twin)
        if r.outcome == Outcome.FAILURE and unhelpful is None:
            unhelpful = r
    if rescued is not None:
        won, lost = rescued
        lines.append(f"  rescued ({won.solver}): without the hint it ended with "
                     f"{one_line(_last_action(lost.transcript), 60)} ({one_line(lost.reason, 40)}); "
                     f"with it, won by {one_line(_last_action(won.transcript), 60)}")
    if unhelpful is not None:
        lines.append(f"  hint did not help ({unhelpful.solver}): ended with "
                     f"{one_line(_last_action(unhelpful.transcript), 60)} "
                     f"({one_line(unhelpful.reason, 60)})")
    return lines
