"""The `envduels` command line: parses arguments, calls one function per command, prints.

Every command's work lives in its package's `commands` module; imports are lazy so that
`envduels --help` stays fast. A `UserError` becomes one line on stderr and a non-zero exit; a
usage mistake becomes the usage line and one error line, exit 2 (see `main`).

Every argument and every option that takes a value names its `metavar` (CONFIG, RUN_DIR, N, ...):
without one, Typer's help shows its internal placeholders (`{config}`, `<list[Path]>`).
Help is plain text (`rich_markup_mode=None`), which also keeps `<bool>` off flags, and every
command is a `_Command`, whose usage line writes `CONFIG` where Typer 0.29 writes `{CONFIG}`.
"""

from __future__ import annotations

import difflib
import gc
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import typer.core

from envduels.errors import UserError


class _StderrLines(logging.Handler):
    """envduels' warnings as plain lines on the current `sys.stderr` (what Python's fallback
    handler printed before the package installed its NullHandler)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:   # noqa: BLE001 (logging's own rule: a handler never raises)
            self.handleError(record)


def _show_warnings() -> None:
    logger = logging.getLogger("envduels")
    if not any(isinstance(h, _StderrLines) for h in logger.handlers):
        logger.addHandler(_StderrLines(logging.WARNING))


_show_warnings()

if TYPE_CHECKING:
    # the class `TyperCommand` methods take: Typer 0.16+ vendors click as `typer._click`
    # (pinned to 0.29 in pyproject.toml); `typer.Context` is a subclass, too narrow here
    from typer._click import Context as ClickContext


class _Command(typer.core.TyperCommand):
    """A command whose usage line names arguments the usual way (`CONFIG`, `[NAME]`,
    `RUN_DIR...`): Typer 0.29 writes a required one as `{CONFIG}`. Every command of the app is
    one (`_plain_usage`, at the end of this module)."""

    def collect_usage_pieces(self, ctx: ClickContext) -> list[str]:
        return [re.sub(r"^\{([^{}]*)\}", r"\1", piece)
                for piece in super().collect_usage_pieces(ctx)]


app = typer.Typer(
    name="envduels",
    help="Language models author environments with privileged hints and solve each other's.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
library_app = typer.Typer(help="The reference environments shipped with envduels.",
                          no_args_is_help=True, rich_markup_mode=None)
models_app = typer.Typer(help="Check the players of a config before a long run.",
                         no_args_is_help=True, rich_markup_mode=None)
app.add_typer(library_app, name="library")
app.add_typer(models_app, name="models")

UNSAFE_HELP = "Run environment code WITHOUT the bubblewrap sandbox. Only for code you trust."
WORKERS_HELP = ("Harness worker processes that hold the sandboxes (0: none, all in this "
                "process) [default: one per core]")


def _workers_option(value: int | None) -> int | None:
    if value is not None and value < 0:
        raise typer.BadParameter(f"must be 0 or more, got {value}")
    return value


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"envduels {version('envduels')}")
        except PackageNotFoundError:   # run from a source tree that was never installed
            print("envduels (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    _show_version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_version,
        is_eager=True)] = False,
) -> None:
    """Language models author environments with privileged hints and solve each other's."""


@app.command()
def run(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", help="YAML run configuration (SPEC §6).")],
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live display.")] = False,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Send every model call to the provider, even one this run has "
        "recorded; calls are still recorded. Resuming this way pays again for the calls of "
        "unfinished work.")] = False,
    workers: Annotated[int | None, typer.Option(
        "--workers", metavar="N", callback=_workers_option,
        help="Harness worker processes that hold the sandboxes (0: none, all in this process) "
        "[default: the config's sandbox.workers, else one per core]", show_default=False)] = None,
) -> None:
    """Run or resume a tournament; a kill or Ctrl-C loses nothing finished."""
    from envduels.engine.commands import run_command

    raise typer.Exit(run_command(config, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet,
                                 no_cache=no_cache, workers=workers))


@app.command()
def status(run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run folder (holds run.db).")]) -> None:
    """What is done, left and failed in a run; tokens and cost so far."""
    from envduels.engine.commands import status_command

    raise typer.Exit(status_command(run_dir))


@app.command()
def report(
    # Hidden from the Arguments list (it stays in the usage line): Typer would list it with its
    # type, `<list[Path]>`; the docstring says what RUN_DIR is.
    run_dirs: Annotated[list[Path] | None, typer.Argument(metavar="RUN_DIR", hidden=True)] = None,
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE", help="Write the SPEC §8 JSON here.")] = None,
    html_path: Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Write the HTML report here.")] = None,
    bootstrap: Annotated[int, typer.Option(metavar="N", help="Bootstrap draws for intervals.")] = 1000,
    episodes: Annotated[Path | None, typer.Option(
        "--episodes", metavar="FILE",
        help="Rate a JSON Lines file of episodes recorded by another harness instead of a run.")] = None,
    schema: Annotated[bool, typer.Option("--schema", help="Print the JSON Schema of the --json report and exit.")] = False,
) -> None:
    """Compute every metric of SPEC §5 for RUN_DIR (several run folders: compared side by
    side) or for --episodes FILE; write JSON and a self-contained HTML report (default:
    ./NAME-report.json/.html)."""
    from envduels.report.commands import report_command, report_episodes_command, schema_command

    if schema:
        raise typer.Exit(schema_command())
    if episodes is not None:
        if run_dirs:
            raise UserError("give either run folders or --episodes FILE, not both")
        raise typer.Exit(report_episodes_command(episodes, json_path=json_path, html_path=html_path,
                                                 bootstrap=bootstrap))
    raise typer.Exit(report_command(run_dirs or [], json_path=json_path, html_path=html_path, bootstrap=bootstrap))


@app.command()
def demo(
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE", help="Write the SPEC §8 JSON here.")] = None,
    html_path: Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Write the HTML report here.")] = None,
    bootstrap: Annotated[int, typer.Option(metavar="N", help="Bootstrap draws for intervals.")] = 1000,
) -> None:
    """A report of a simulated tournament whose truth is known: every section with something
    to find, and the planted orders beside the ones the ratings found (no model is run; default
    output ./demo-report.html)."""
    from envduels.report.commands import demo_command

    raise typer.Exit(demo_command(json_path=json_path, html_path=html_path, bootstrap=bootstrap))


@app.command()
def leaderboard(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run folder.")],
    bootstrap: Annotated[int, typer.Option(metavar="N", help="Bootstrap draws for intervals.")] = 1000,
) -> None:
    """The duel, author and solver ratings as terminal tables."""
    from envduels.report.commands import leaderboard_command

    raise typer.Exit(leaderboard_command(run_dir, bootstrap=bootstrap))


@app.command()
def validate(
    path: Annotated[str, typer.Argument(metavar="PATH", help="An environment .py file, an EnvDuels export folder, or a library name.")],
    seeds: Annotated[int, typer.Option(metavar="N", help="How many benchmark seeds to check.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable verdict.")] = False,
    require_oracle: Annotated[bool, typer.Option("--require-oracle", help="An environment without oracle_action is invalid.")] = False,
    hint_max_chars: Annotated[int | None, typer.Option(metavar="N", help="Longest hint allowed [default: that of a run config's tournament.hint_max_chars].", show_default=False)] = None,
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
    revalidate: Annotated[bool, typer.Option("--revalidate", help="Judge library and export environments again instead of reusing the verdict cached for the same source, seeds, options and validator.")] = False,
    workers: Annotated[int | None, typer.Option("--workers", metavar="N", callback=_workers_option, help=WORKERS_HELP, show_default=False)] = None,
) -> None:
    """Validate an environment file or an EnvDuels export folder; exit 0 only if valid."""
    from envduels.config import HINT_MAX_CHARS  # here, not at the top: --help stays fast
    from envduels.envs.commands import validate_command

    raise typer.Exit(
        validate_command(
            path,
            seeds=seeds,
            as_json=as_json,
            require_oracle=require_oracle,
            hint_max_chars=HINT_MAX_CHARS if hint_max_chars is None else hint_max_chars,
            unsafe_no_sandbox=unsafe_no_sandbox,
            revalidate=revalidate,
            workers=workers,
        )
    )


@app.command()
def play(
    path: Annotated[str, typer.Argument(metavar="PATH", help="An environment .py file, an export folder's environment id, or a library name.")],
    config: Annotated[Path | None, typer.Option("--config", metavar="CONFIG", help="Config holding the player.")] = None,
    player: Annotated[str | None, typer.Option("--player", metavar="NAME", help="Name of the player in --config.")] = None,
    human: Annotated[bool, typer.Option("--human", help="Play it yourself.")] = False,
    hint: Annotated[bool, typer.Option("--hint", help="Show the privileged hint.")] = False,
    seed: Annotated[int, typer.Option(metavar="N", help="Environment seed.")] = 0,
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
    workers: Annotated[int | None, typer.Option("--workers", metavar="N", callback=_workers_option, help="Harness worker processes that hold the sandbox (0: none, in this process) [default: 1; an episode lives in one worker]", show_default=False)] = None,
) -> None:
    """Play one episode in the terminal, printing the transcript as it goes."""
    from envduels.engine.commands import play_command

    raise typer.Exit(
        play_command(
            path,
            config=config,
            player=player,
            human=human,
            hint=hint,
            seed=seed,
            unsafe_no_sandbox=unsafe_no_sandbox,
            workers=workers,
        )
    )


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run folder.")],
    out_dir: Annotated[Path, typer.Argument(metavar="OUT_DIR", help="Folder to write.")],
    fmt: Annotated[str, typer.Option("--format", metavar="FORMAT", help="envduels | jsonl | hf")] = "envduels",
    author: Annotated[list[str] | None, typer.Option(metavar="NAME", help="Keep these authors (repeatable).")] = None,
    round_: Annotated[list[int] | None, typer.Option("--round", metavar="N", help="Keep these rounds (repeatable).")] = None,
    flag: Annotated[list[str] | None, typer.Option(metavar="FLAG", help="Keep environments with this flag (repeatable).")] = None,
    min_pass: Annotated[float | None, typer.Option(metavar="RATE", help="Lowest panel no-hint pass rate kept.")] = None,
    max_pass: Annotated[float | None, typer.Option(metavar="RATE", help="Highest panel no-hint pass rate kept.")] = None,
    target: Annotated[str | None, typer.Option(metavar="NAME", help="Keep what this model fails without the hint and passes with it.")] = None,
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
) -> None:
    """Write a run's valid environments as RL training data (jsonl and hf: one self-distillation
    row per environment and seed, its first turn read in the sandbox)."""
    from envduels.export.commands import export_command

    raise typer.Exit(
        export_command(
            run_dir,
            out_dir,
            fmt=fmt,
            authors=author or [],
            rounds=round_ or [],
            flags=flag or [],
            min_pass=min_pass,
            max_pass=max_pass,
            target=target,
            unsafe_no_sandbox=unsafe_no_sandbox,
        )
    )


@app.command()
def correlate(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run folder.")],
    gains: Annotated[Path, typer.Option("--gains", metavar="CSV", help="CSV of measured training gains per author pool or environment.")],
    out: Annotated[Path | None, typer.Option(metavar="DIR", help="Folder for the JSON and the scatter plot.")] = None,
    bootstrap: Annotated[int, typer.Option(metavar="N", help="Bootstrap draws.")] = 2000,
) -> None:
    """Correlate hint lift and other predictors with measured training gains."""
    from envduels.report.commands import correlate_command

    raise typer.Exit(correlate_command(run_dir, gains, out=out, bootstrap=bootstrap))


@library_app.command("list")
def library_list() -> None:
    """Every reference environment with its domain, difficulty and one-line description."""
    from envduels.envs.commands import library_list_command

    raise typer.Exit(library_list_command())


@library_app.command("show")
def library_show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A library environment name.")],
    source: Annotated[bool, typer.Option("--source", help="Print only the source, e.g. to save it as a file.")] = False,
) -> None:
    """Print a reference environment's source, hint and description."""
    from envduels.envs.commands import library_show_command

    raise typer.Exit(library_show_command(name, source_only=source))


@models_app.command("check")
def models_check(config: Annotated[Path, typer.Argument(metavar="CONFIG", help="YAML run configuration.")]) -> None:
    """One short call to every player: latency, tokens, or the error."""
    from envduels.players.commands import check_command

    raise typer.Exit(check_command(config))


@app.command()
def estimate(
    config: Annotated[Path, typer.Argument(help="YAML run configuration.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What a run of CONFIG will cost: calls, tokens, dollars and wall time, low-high."""
    from envduels.engine.commands import estimate_command

    raise typer.Exit(estimate_command(config, json_out=json_out))


@app.command()
def plan(
    config: Annotated[Path | None, typer.Argument(metavar="CONFIG", help="YAML run configuration (or use --players).")] = None,
    players: Annotated[int | None, typer.Option(metavar="N", help="Players who all author and solve (without CONFIG).")] = None,
    envs_per_author: Annotated[int | None, typer.Option(metavar="N", help="Environments per author per round.")] = None,
    seeds: Annotated[int | None, typer.Option(metavar="N", help="Seeds per environment.")] = None,
    rounds: Annotated[int | None, typer.Option(metavar="N", help="Rounds.")] = None,
    trials: Annotated[int | None, typer.Option(metavar="N", help="Trials per seed.")] = None,
    spread: Annotated[list[float] | None, typer.Option(
        metavar="LOGITS", help="Ability spread in logits (half-width; repeatable). Default: 0.4 and 1.5.")] = None,
    cycle: Annotated[float, typer.Option(metavar="LOGITS", help="Size in logits of the planted 3-cycle for cycle power.")] = 2.0,
    replicates: Annotated[int, typer.Option(metavar="N", help="Simulated tournaments per spread and truth.")] = 20,
    bootstrap: Annotated[int, typer.Option(metavar="N", help="Bootstrap draws per simulated tournament.")] = 200,
    seed: Annotated[int, typer.Option(metavar="N", help="Simulation seed.")] = 0,
    jobs: Annotated[int, typer.Option(metavar="N", help="Worker processes (figures do not depend on it).")] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Before spending money: the exact cost of a design and, by simulation, whether it can
    order the models, detect divergence and cycles, and how wide its intervals will be."""
    from envduels.report.commands import plan_command
    from envduels.report.plan import DesignFlags

    flags = DesignFlags(players=players, envs_per_author=envs_per_author, seeds=seeds, rounds=rounds, trials=trials)
    raise typer.Exit(plan_command(config, flags, spreads=spread or [], replicates=replicates, bootstrap=bootstrap,
                                  cycle=cycle, seed=seed, jobs=jobs, as_json=as_json))


@app.command()
def view(
    run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="One run folder or several.")],
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on; loopback unless you mean it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on; 0 picks a free one.")] = 0,
) -> None:
    """Serve a live local web viewer of runs, environments and transcripts (read-only)."""
    from envduels.view.commands import view_command

    raise typer.Exit(view_command(run_dirs, host=host, port=port))


@app.command()
def serve(
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Environments: library names, .py files, export folders, FOLDER/ENV_ID, or run folders (their valid, unflagged environments).")],
    host: Annotated[str | None, typer.Option(metavar="HOST", help="Address to listen on; loopback unless you mean it (there is no login) [default: 127.0.0.1].", show_default=False)] = None,
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on; 0 picks a free one.")] = 0,
    max_sessions: Annotated[int, typer.Option("--max-sessions", metavar="N", help="Most sessions (sandboxes) at once (with --ray: on each node).")] = 32,
    idle_timeout: Annotated[float, typer.Option("--idle-timeout", metavar="S", help="End a session idle this many seconds.")] = 300.0,
    workers: Annotated[int | None, typer.Option("--workers", metavar="N", help="Server processes, each with its own sandboxes (with --ray: on each node) [default: one per core].", show_default=False)] = None,
    ray: Annotated[str | None, typer.Option("--ray", metavar="ADDRESS", help="Serve on every node of the Ray cluster at ADDRESS ('auto': this machine's); prints one URL per node.")] = None,
) -> None:
    """Serve environments to RL trainers over OpenEnv (HTTP and WebSocket), each session in its own sandbox."""
    from envduels.serve.commands import serve_command

    raise typer.Exit(serve_command(names, host=host, port=port, max_sessions=max_sessions,
                                   idle_timeout_s=idle_timeout, workers=workers, ray=ray))


def _plain_usage(*apps: typer.Typer) -> None:
    """Make every command of `apps` (and of their sub-apps) with Typer's default class a
    `_Command`; Typer builds the click commands when the app first runs, so this is in time."""
    for group in apps:
        for info in group.registered_commands:
            if info.cls in (None, typer.core.TyperCommand):
                info.cls = _Command
        _plain_usage(*(g.typer_instance for g in group.registered_groups
                       if isinstance(g.typer_instance, typer.Typer)))


_plain_usage(app)

INTERRUPTED = "interrupted; finished work is saved, run the same command again to resume"


def _mro_names(err: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(err).__mro__}


def _did_you_mean(err: Exception) -> None:
    """Add "Did you mean 'run'?" to "No such command 'runn'." (click does not suggest)."""
    ctx = getattr(err, "ctx", None)
    message = getattr(err, "message", "")
    if ctx is None or not message.startswith("No such command ") or "Did you mean" in message:
        return
    name = message[len("No such command "):].rstrip(".").strip("'\"")
    close = difflib.get_close_matches(name, ctx.command.list_commands(ctx), n=1, cutoff=0.6)
    if close:   # click's usage errors keep their text in `message`
        setattr(err, "message", f"{message} Did you mean {close[0]!r}?")  # noqa: B010


def main() -> None:
    """Console entry point: a user error is one line, a usage mistake the usage line and one
    error line, both with a non-zero exit (2 for usage), never a traceback; Ctrl-C exits 130.

    Typer's own exception classes move between releases (0.12-0.15 raise click's, 0.16 and
    later their vendored copy `typer._click`, and no longer install click), so they are told
    apart by what every version shares: a usage/click error has `show()` and an `exit_code`
    (class `ClickException` in its MRO), `Abort` is a Ctrl-C or end of input at a prompt,
    `Exit` carries an exit code. The tested range is pinned in pyproject.toml;
    tests/test_cli_usage.py runs every mistake through the installed console script.
    """
    # pyarrow (pandas' string columns) reserves 1 GiB of address space up front with mimalloc, which
    # an address-space limit (`ulimit -v`) counts as used; the system allocator reserves nothing
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        rc = app(prog_name="envduels", standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except UserError as err:
        print(f"error: {err.message}", file=sys.stderr)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    except Exception as err:
        names = _mro_names(err)
        if "ClickException" in names:
            _did_you_mean(err)
            ctx = getattr(err, "ctx", None)
            if ctx is not None and "NoArgsIsHelpError" not in names:
                # The usage line and one error line (SPEC §11): click's own `show()` adds a
                # "Try ... --help" line and a blank one, and its layout changes between releases.
                print(ctx.get_usage(), file=sys.stderr)
                print(f"Error: {err.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
            else:   # a group called without a command: its help
                err.show()  # type: ignore[attr-defined]
            sys.exit(int(getattr(err, "exit_code", 2)))
        if "Abort" in names:
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(130)
        if "Exit" in names:
            sys.exit(int(getattr(err, "exit_code", 0)))
        raise
    finally:
        # the interpreter's last collections walk every object the SDKs and pydantic made:
        # 0.1 s after any command that imported them. Frozen, they are skipped; atexit
        # handlers, and every close the code does itself, still run (nothing here relies on
        # the collector to flush a file)
        gc.freeze()


if __name__ == "__main__":
    main()
