"""Which environments `envduels serve NAME...` serves: the catalog of ids, specs, limits, panels.

Each NAME is what `validate` and `play` accept (`envs.resolve`: a library name, a `.py` file,
an EnvDuels export folder, `FOLDER/ENV_ID`) or a run folder (one holding `run.db`), of which
the valid environments that carry no flag are served, with the run's sandbox limits, its turn
cap and its panel results. Ids must be unique across the NAMEs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envduels.duel.protocol import turn_cap
from envduels.envs import EnvSpec, resolve
from envduels.errors import UserError
from envduels.sandbox import SandboxLimits

PANEL_KEYS = ("no_hint_rate", "hinted_rate", "learnability")


@dataclass(frozen=True)
class Served:
    """One served environment: its spec, the sandbox limits and turn cap its sessions get, and
    the panel results its export or run recorded (None where there are none)."""

    spec: EnvSpec
    limits: SandboxLimits
    max_turns: int
    panel: dict[str, float | None] | None

    @property
    def id(self) -> str:
        return self.spec.id

    def hint_text(self, level: int) -> str | None:
        """The hint of level 0 (none: None), 1 (`hint`, or `hint_1` of a graded pair) or 2
        (`hint_2`); None when the environment has no such hint."""
        if level == 0:
            return None
        if level == 1:
            return self.spec.hint or None
        return self.spec.hints.get("hint_2") or None

    def hint_levels(self) -> list[int]:
        """The hint levels a reset may ask for."""
        return [level for level in (0, 1, 2) if level == 0 or self.hint_text(level)]

    def describe(self) -> dict[str, object]:
        """The environment as `GET /environments` lists it (never its source or hints)."""
        return {
            "id": self.id, "title": self.spec.title, "domain": self.spec.domain,
            "author": self.spec.author, "max_turns": self.max_turns,
            "hint_levels": self.hint_levels(),
            "benchmark_seeds": [int(s) for s in self.spec.benchmark_seeds],
            "panel": self.panel,
        }


def panel_of(metadata: Mapping[str, object]) -> dict[str, float | None] | None:
    """The panel results of an export row's metadata (`metadata["panel"]`, as `envduels export`
    writes them): finite numbers in [0, 1] kept, anything else None. None without a panel."""
    panel = metadata.get("panel")
    if not isinstance(panel, dict):
        return None
    out: dict[str, float | None] = {}
    for key in PANEL_KEYS:
        value = panel.get(key)
        out[key] = None
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and 0.0 <= value <= 1.0:
            out[key] = float(value)
    return out


def _from_run(run_dir: Path) -> list[Served]:
    """The valid, unflagged environments of a run, with its limits, turn cap and results."""
    from envduels.export import Filters, select
    from envduels.store import RunReader

    with RunReader(run_dir) as store:
        envs = store.environments()
        tables = store.tables()
        cfg = store.run_config()
    limits = SandboxLimits.from_config(cfg.sandbox) if cfg is not None else SandboxLimits()
    limit = cfg.tournament.max_turns if cfg is not None else None
    return [Served(spec=item.spec(), limits=limits, max_turns=turn_cap(item.env.max_turns, limit),
                   panel=panel_of(item.results_metadata()))
            for item in select(envs, tables, Filters()) if not item.flags]


def is_run_folder(name: str) -> bool:
    from envduels.store import DB_NAME

    try:
        return (Path(name) / DB_NAME).is_file()
    except (OSError, ValueError):
        return False


def catalog(names: list[str], *, limits: SandboxLimits | None = None) -> dict[str, Served]:
    """The served environments of `names`, by id, in the order given. UserError (one line) for
    a name that names nothing, a run with no valid unflagged environment, or an id served
    twice."""
    if not names:
        raise UserError("give at least one environment: envduels serve NAME [NAME ...] "
                        "(a library name, a .py file, an export folder or a run folder)")
    from envduels.export import author_fault_flags

    default = limits or SandboxLimits()
    served: dict[str, Served] = {}
    for name in names:
        if is_run_folder(name):
            found = _from_run(Path(name))
            if not found:
                raise UserError(f"run folder {name} has no valid environment without a flag to "
                                "serve; `envduels report` shows why")
        else:   # an export's environments flagged as their author's fault are not served
            found = [Served(spec=s, limits=default, max_turns=turn_cap(s.max_turns),
                            panel=panel_of(s.metadata)) for s in resolve(name).specs
                     if not author_fault_flags(s)]
            if not found:
                raise UserError(f"{name} has no environment to serve: every one is flagged as "
                                "its author's fault (nondeterministic, trivial or hint_is_key)")
        for item in found:
            if item.id in served:
                raise UserError(f"environment id {item.id!r} is served twice ({name} holds it "
                                "too); serve one of them, or rename a file")
            served[item.id] = item
    return served
