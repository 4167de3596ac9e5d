"""The public Python surface behind `envduels.run`, `envduels.arun` and `envduels.open_run`.

Nothing here prints, exits or touches signal handlers: a problem with the input is a
`UserError` (one line naming the problem and the fix), Ctrl-C during a run is the
`KeyboardInterrupt` it always is (finished work is saved). The CLI's `envduels run` calls the
same engine function (`engine.run.run_session`) and adds the display, the summary and the exit
codes. What each name promises: docs/api.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.analysis.result import RunReport
    from envduels.config import RunConfig
    from envduels.engine.run import Session
    from envduels.store import EnvRecord, EpisodeRow, RunReader, Tables

    ConfigInput: TypeAlias = str | Path | Mapping[str, object] | RunConfig
    """What `run` and `arun` accept as a config: a YAML path, a mapping, a `RunConfig`."""



class Run:
    """A run folder, opened read-only: its recorded config, its tables, environments and
    episodes, and its report. Get one from `open_run(path)` or as what `run(config)` returns.

    A `Run` holds no open database: each read opens `run.db` read-only, reads it as it is at
    that moment (a run in progress included) and closes it, so it never blocks or changes the
    run and the folder may be read-only. `config` and `name` are read once, when opened.
    `session` is what the `run`/`arun` call that returned this `Run` did (None from `open_run`).
    """

    def __init__(self, path: str | Path, *, session: Session | None = None) -> None:
        from envduels.store import DB_NAME

        path = Path(path)
        if path.name == DB_NAME and path.is_file():   # the database itself: its folder
            path = path.parent
        if not path.is_dir():
            raise UserError(f"{path} is not a folder; pass a run folder (the output_dir of a run, "
                            "which holds run.db)")
        self.path = path
        self.session = session
        with self._reader() as store:
            self.config: RunConfig | None = store.run_config()
        self.name: str = (self.config.name if self.config is not None else "") or path.name

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, name={self.name!r})"

    @contextmanager
    def _reader(self) -> Iterator[RunReader]:
        # the reader turns a missing, unreadable or non-SQLite run.db into one-line UserErrors
        from envduels.store import RunReader

        with RunReader(self.path) as reader:
            yield reader

    def tables(self) -> Tables:
        """Players, environments and episodes as pandas DataFrames: exactly what the report
        analyses (`envduels.store.Tables` documents the columns)."""
        with self._reader() as store:
            return store.tables()

    def environments(self) -> list[EnvRecord]:
        """Every environment the run recorded (valid or not, authored or from a fixed pool),
        in the order first recorded; `record.spec` is the environment as played."""
        with self._reader() as store:
            return store.environments()

    def episodes(self) -> list[EpisodeRow]:
        """Every finished episode as recorded (any outcome, `error` included), oldest first,
        with its transcript."""
        with self._reader() as store:
            return store.episodes()

    def report(self, *, bootstrap: int = 1000, seed: int = 0) -> RunReport:
        """Every SPEC §5 number of the run, as `envduels report` computes it (the same
        `bootstrap` and `seed` give the same numbers), as the typed record
        `envduels.analysis.result.RunReport`: `.ratings.solver` (and `.duel`, `.author`) the
        rating rows best first, `.to_json()` the SPEC §8 object `report --json` writes. UserError when the run has no
        environments yet or `bootstrap` is negative."""
        from envduels.analysis import analyze

        if bootstrap < 0:
            raise UserError(f"bootstrap must be 0 or more (got {bootstrap}); 1000 or more for "
                            "reported intervals")
        tables = self.tables()
        if tables.environments.empty:
            raise UserError(f"{self.path} has no environments yet; run it until authoring has "
                            "produced some, then report again")
        history = self.config.tournament.history if self.config is not None else None
        return analyze(tables, bootstrap=bootstrap, seed=seed, name=self.name,
                       history=history).result


def open_run(path: str | Path) -> Run:
    """The run in folder `path` (or its `run.db`), read-only. UserError (one line) when `path`
    is missing, is not a folder, or holds no run database SQLite can read."""
    return Run(path)


def _config(config: ConfigInput,
            run_dir: str | Path | None) -> RunConfig:
    from envduels.config import RunConfig, load_config, parse_config

    if isinstance(config, RunConfig):
        cfg = config
    elif isinstance(config, Mapping):
        cfg = parse_config(dict(config), "config")
    elif isinstance(config, str | Path):
        cfg = load_config(config)
    else:
        raise UserError(f"config must be a YAML path, a mapping or a RunConfig, not "
                        f"{type(config).__name__}")
    if run_dir is not None:   # output_dir never changes a result: the fingerprint ignores it
        cfg = cfg.model_copy(update={"output_dir": str(run_dir)})
    return cfg


def _refuse_resume(cfg: RunConfig, resume: bool) -> None:
    from envduels.store import DB_NAME

    if not resume and (cfg.run_dir / DB_NAME).exists():
        raise UserError(f"{cfg.run_dir} already holds a run; pass resume=True to resume it, or "
                        "another run_dir for a new run")


def run(config: ConfigInput, *,
        run_dir: str | Path | None = None, resume: bool = True, no_cache: bool = False,
        unsafe_no_sandbox: bool = False) -> Run:
    """Run (or resume) the tournament of `config` to its end or its budget; the finished run.

    `config`: a YAML path, a mapping of the same keys, or a `RunConfig`. `run_dir` replaces the
    config's `output_dir`. The run folder resumes as `envduels run` does (finished work is never
    redone) unless `resume=False`, which refuses a folder that already holds a run. `no_cache`
    and `unsafe_no_sandbox` are the CLI's `--no-cache` and `--unsafe-no-sandbox`.

    Raises UserError (nothing written) on a bad config or an unmet precondition, as
    `envduels run` exits 2. A budget reached or work ended in `error` is not raised: see
    `Run.session` (`budget_reached`, `errors`), and call again to go on. Ctrl-C is
    KeyboardInterrupt, with finished work saved. Never prints; leaves signal handlers as they
    were. Inside a running event loop it raises UserError: use `arun` there.
    """
    from envduels.engine.run import check_run, run_session

    try:
        asyncio.get_running_loop()
    except RuntimeError:   # no loop running: run_session starts its own
        pass
    else:
        raise UserError("envduels.run was called inside a running event loop (it starts its own); "
                        "use `await envduels.arun(...)` there")
    cfg = _config(config, run_dir)
    _refuse_resume(cfg, resume)
    checked = check_run(cfg, unsafe_no_sandbox=unsafe_no_sandbox)
    session = run_session(cfg, checked, unsafe_no_sandbox=unsafe_no_sandbox, no_cache=no_cache)
    return Run(cfg.run_dir, session=session)


async def arun(config: ConfigInput, *,
               run_dir: str | Path | None = None, resume: bool = True, no_cache: bool = False,
               unsafe_no_sandbox: bool = False) -> Run:
    """`run` in the running event loop: the same arguments, result and errors. The checks
    before the run (servers, sandbox) run in a worker thread; cancelling the task stops the
    run as Ctrl-C does (finished work is saved)."""
    from envduels.engine.run import check_run, run_session_async

    cfg = _config(config, run_dir)
    _refuse_resume(cfg, resume)
    checked = await asyncio.to_thread(check_run, cfg, unsafe_no_sandbox=unsafe_no_sandbox)
    session = await run_session_async(cfg, checked, unsafe_no_sandbox=unsafe_no_sandbox,
                                      no_cache=no_cache)
    return Run(cfg.run_dir, session=session)
