"""`envduels serve`: EnvDuels environments as an OpenEnv server, each session its own sandbox.

Built on OpenEnv (package `openenv`, extra `envduels[serve]`): `DuelEnvironment` implements
OpenEnv's `Environment` with the duel's rules from `envduels.duel.protocol`, and OpenEnv's own
server app serves it (`build_app`); `client.DuelClient` is one session for trainers. How trainers
use it: docs/training.md, "Serving". The names below load on first use, so that `envduels serve`
without the extra says how to install it instead of failing on import.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "build_app": "envduels.serve._app",
    "Served": "envduels.serve._catalog",
    "catalog": "envduels.serve._catalog",
    "DuelAction": "envduels.serve._env",
    "DuelEnvironment": "envduels.serve._env",
    "DuelObservation": "envduels.serve._env",
    "DuelState": "envduels.serve._env",
    "DuelClient": "envduels.serve.client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> type:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'envduels.serve' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
