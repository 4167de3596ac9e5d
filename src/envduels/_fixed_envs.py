"""The fixed-pool environments a run config names (`tournament.environments`).

Below the engine and every output: `envduels run` and its checks, `estimate`, `plan` and the
Gym-free tools all read a config's pool through `load_fixed_envs`, so they agree on which
environments it holds and refuse the same bad lists with the same one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envduels.duel.design import Design
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.config import RunConfig
    from envduels.envs import EnvSpec


def load_fixed_envs(cfg: RunConfig) -> list[EnvSpec]:
    """The fixed-pool environments of `tournament.environments`: each item is read by
    `envduels.envs.resolve` (a library name, an export folder, `FOLDER/ENV_ID`, a `.py` file)."""
    from envduels.envs import resolve

    specs: list[EnvSpec] = []
    for item in cfg.tournament.environments:
        try:
            specs.extend(resolve(item).specs)
        except UserError as err:
            raise UserError(f"tournament.environments: {err.message}") from None
    seen: set[str] = set()
    for s in specs:
        if not s.hint.strip():
            raise UserError(
                f"tournament.environments: environment {s.id!r} has no hint, and every pool "
                "environment is also played in the hinted condition (SPEC §9); give it one "
                "(a `privileged` file in its export's manifest) or leave it out of the list")
        if s.id in seen:
            raise UserError(f"tournament.environments: environment id {s.id!r} is listed twice; "
                            "list each export folder or library name once")
        seen.add(s.id)
    authored = Design.of(cfg).authored_ids()
    for s in specs:
        if s.id in authored:
            raise UserError(
                f"tournament.environments: environment id {s.id!r} is also an id this run's "
                "authors write; rename that author in players[].name")
    return specs
