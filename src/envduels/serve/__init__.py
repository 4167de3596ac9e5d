"""`envduels serve`: EnvDuels environments as an OpenEnv server, each session its own sandbox.

Built on openenv-core (extra `envduels[serve]`): `DuelEnvironment` implements OpenEnv's
`Environment` with the duel's rules from `envduels.duel.protocol`, and OpenEnv's own server app
serves it (`build_app`). How trainers use it: docs/training.md, "Serving".
"""

from envduels.serve._app import build_app
from envduels.serve._catalog import Served, catalog
from envduels.serve._env import DuelAction, DuelEnvironment, DuelObservation, DuelState

__all__ = ["DuelAction", "DuelEnvironment", "DuelObservation", "DuelState", "Served", "build_app",
           "catalog"]
