"""envduels: language models author interactive environments with privileged hints and solve
each other's. See the README and SPEC for the contract; docs/api.md for this surface.

What a caller may rely on (the names in `__all__`; anything else is internal and may change):

- `run(config, *, run_dir=None, resume=True, no_cache=False, unsafe_no_sandbox=False) -> Run`
  runs or resumes a tournament exactly as `envduels run` does, and `arun(...)` is the same in a
  running event loop. Neither prints, exits nor changes signal handlers; a bad config or an
  unmet precondition raises `UserError` before anything is written. A budget reached or work
  ended in `error` is reported in `Run.session`, not raised.
- `open_run(path) -> Run` opens a run folder read-only: `config`, `tables()`,
  `environments()`, `episodes()` and `report()` (the SPEC §8 numbers, as `envduels report`
  computes them). A missing folder or one without a run database is a one-line `UserError`.
- `UserError`: every problem with the caller's input or machine, one line naming the problem
  and the fix (`.message`).
- `Outcome` and `Flag`: the episode outcomes and environment flags; a member is the string a
  run database and the report store, so `episode.outcome == Outcome.SUCCESS` works.
- `RunConfig` (the SPEC §6 schema) and `Session` (what one `run` call did).

`import envduels` loads nothing beyond this module and `envduels.errors`: the rest is imported
on first use, so the CLI's start-up stays fast.
"""

from __future__ import annotations

import logging

from envduels.errors import UserError

# A library prints nothing: envduels' warnings (a sandbox with reduced protection, a retried
# call) go to the caller's logging configuration, and nowhere without one (Python's fallback
# would write them to stderr). The CLI shows them on stderr (`envduels.cli`).
logging.getLogger("envduels").addHandler(logging.NullHandler())

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (mypy reads it the same)

if TYPE_CHECKING:
    from envduels._api import Run, arun, open_run, run
    from envduels.config import RunConfig
    from envduels.duel.outcomes import Flag, Outcome
    from envduels.engine.run import Session

__version__ = "0.1.0"
__all__ = ["Flag", "Outcome", "Run", "RunConfig", "Session", "UserError", "__version__", "arun",
           "open_run", "run"]

# public name -> the module that defines it, imported on first access (PEP 562)
_LAZY = {
    "Run": "envduels._api", "arun": "envduels._api", "open_run": "envduels._api",
    "run": "envduels._api", "RunConfig": "envduels.config", "Flag": "envduels.duel.outcomes",
    "Outcome": "envduels.duel.outcomes", "Session": "envduels.engine.run",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'envduels' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value   # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
