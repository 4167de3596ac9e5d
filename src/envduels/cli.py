"""The `envduels` command line: parses arguments, calls one function per command, prints.

Every command's work lives in its package's `commands` module; imports are lazy so that
`envduels --help` stays fast. A `UserError` becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from envduels.errors import UserError

app = typer.Typer(
    name="envduels",
    help="Language models author environments with privileged hints and solve each other's.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
library_app = typer.Typer(help="The reference environments shipped with envduels.", no_args_is_help=True)
models_app = typer.Typer(help="Check the players of a config before a long run.", no_args_is_help=True)
app.add_typer(library_app, name="library")
app.add_typer(models_app, name="models")

UNSAFE_HELP = "Run environment code WITHOUT the bubblewrap sandbox. Only for code you trust."


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML run configuration (SPEC §6).")],
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No live display.")] = False,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Send every model call to the provider, even one this run has "
        "recorded; calls are still recorded. Resuming this way pays again for the calls of "
        "unfinished work.")] = False,
) -> None:
    """Run or resume a tournament; a kill or Ctrl-C loses nothing finished."""
    from envduels.engine.commands import run_command

    raise typer.Exit(run_command(config, unsafe_no_sandbox=unsafe_no_sandbox, quiet=quiet,
                                 no_cache=no_cache))


@app.command()
def status(run_dir: Annotated[Path, typer.Argument(help="A run folder (holds run.db).")]) -> None:
    """What is done, left and failed in a run; tokens and cost so far."""
    from envduels.engine.commands import status_command

    raise typer.Exit(status_command(run_dir))


@app.command()
def report(
    run_dirs: Annotated[list[Path] | None, typer.Argument(help="One run folder, or several to compare.")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the SPEC §8 JSON here.")] = None,
    html_path: Annotated[Path | None, typer.Option("--html", help="Write the HTML report here.")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws for intervals.")] = 1000,
    episodes: Annotated[Path | None, typer.Option(
        "--episodes", help="Rate a JSON Lines file of episodes recorded by another harness instead of a run.")] = None,
) -> None:
    """Compute every metric of SPEC §5; write JSON and a self-contained HTML report."""
    from envduels.report.commands import report_command, report_episodes_command

    if episodes is not None:
        if run_dirs:
            raise UserError("give either run folders or --episodes FILE, not both")
        raise typer.Exit(report_episodes_command(episodes, json_path=json_path, html_path=html_path,
                                                 bootstrap=bootstrap))
    raise typer.Exit(report_command(run_dirs or [], json_path=json_path, html_path=html_path, bootstrap=bootstrap))


@app.command()
def leaderboard(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws for intervals.")] = 1000,
) -> None:
    """The duel, author and solver ratings as terminal tables."""
    from envduels.report.commands import leaderboard_command

    raise typer.Exit(leaderboard_command(run_dir, bootstrap=bootstrap))


@app.command()
def validate(
    path: Annotated[str, typer.Argument(help="An environment .py file, an EnvDuels export folder, or a library name.")],
    seeds: Annotated[int, typer.Option(help="How many benchmark seeds to check.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable verdict.")] = False,
    require_oracle: Annotated[bool, typer.Option("--require-oracle", help="An environment without oracle_action is invalid.")] = False,
    hint_max_chars: Annotated[int, typer.Option(help="Longest hint allowed.")] = 600,
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
) -> None:
    """Validate an environment file or an EnvDuels export folder; exit 0 only if valid."""
    from envduels.envs.commands import validate_command

    raise typer.Exit(
        validate_command(
            path,
            seeds=seeds,
            as_json=as_json,
            require_oracle=require_oracle,
            hint_max_chars=hint_max_chars,
            unsafe_no_sandbox=unsafe_no_sandbox,
        )
    )


@app.command()
def play(
    path: Annotated[str, typer.Argument(help="An environment .py file, an export folder's environment id, or a library name.")],
    config: Annotated[Path | None, typer.Option("--config", help="Config holding the player.")] = None,
    player: Annotated[str | None, typer.Option("--player", help="Name of the player in --config.")] = None,
    human: Annotated[bool, typer.Option("--human", help="Play it yourself.")] = False,
    hint: Annotated[bool, typer.Option("--hint", help="Show the privileged hint.")] = False,
    seed: Annotated[int, typer.Option(help="Environment seed.")] = 0,
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help=UNSAFE_HELP)] = False,
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
        )
    )


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write.")],
    fmt: Annotated[str, typer.Option("--format", help="envduels | jsonl | hf")] = "envduels",
    author: Annotated[list[str] | None, typer.Option(help="Keep these authors (repeatable).")] = None,
    round_: Annotated[list[int] | None, typer.Option("--round", help="Keep these rounds (repeatable).")] = None,
    flag: Annotated[list[str] | None, typer.Option(help="Keep environments with this flag (repeatable).")] = None,
    min_pass: Annotated[float | None, typer.Option(help="Lowest panel no-hint pass rate kept.")] = None,
    max_pass: Annotated[float | None, typer.Option(help="Highest panel no-hint pass rate kept.")] = None,
    target: Annotated[str | None, typer.Option(help="Keep what this model fails without the hint and passes with it.")] = None,
) -> None:
    """Write a run's valid environments as RL training data."""
    from envduels.export import export_command

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
        )
    )


@app.command()
def correlate(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    gains: Annotated[Path, typer.Option("--gains", help="CSV of measured training gains per author pool or environment.")],
    out: Annotated[Path | None, typer.Option(help="Folder for the JSON and the scatter plot.")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws.")] = 2000,
) -> None:
    """Correlate hint lift and other predictors with measured training gains."""
    from envduels.report.correlate import correlate_command

    raise typer.Exit(correlate_command(run_dir, gains, out=out, bootstrap=bootstrap))


@library_app.command("list")
def library_list() -> None:
    """Every reference environment with its domain, difficulty and one-line description."""
    from envduels.envs.commands import library_list_command

    raise typer.Exit(library_list_command())


@library_app.command("show")
def library_show(
    name: Annotated[str, typer.Argument(help="A library environment name.")],
    source: Annotated[bool, typer.Option("--source", help="Print only the source, e.g. to save it as a file.")] = False,
) -> None:
    """Print a reference environment's source, hint and description."""
    from envduels.envs.commands import library_show_command

    raise typer.Exit(library_show_command(name, source_only=source))


@models_app.command("check")
def models_check(config: Annotated[Path, typer.Argument(help="YAML run configuration.")]) -> None:
    """One short call to every player: latency, tokens, or the error."""
    from envduels.players.commands import check_command

    raise typer.Exit(check_command(config))


@app.command()
def estimate(
    config: Annotated[Path, typer.Argument(help="YAML run configuration.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What a run of CONFIG will cost: calls, tokens, dollars and wall time, low-high."""
    from envduels.engine.estimate import estimate_command

    raise typer.Exit(estimate_command(config, json_out=json_out))


@app.command()
def plan(
    config: Annotated[Path | None, typer.Argument(help="YAML run configuration (or use --players).")] = None,
    players: Annotated[int | None, typer.Option(help="Players who all author and solve (without CONFIG).")] = None,
    envs_per_author: Annotated[int | None, typer.Option(help="Environments per author per round.")] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds per environment.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds.")] = None,
    trials: Annotated[int | None, typer.Option(help="Trials per seed.")] = None,
    spread: Annotated[list[float] | None, typer.Option(
        help="Ability spread in logits (half-width; repeatable). Default: 0.4 and 1.5.")] = None,
    cycle: Annotated[float, typer.Option(help="Size in logits of the planted 3-cycle for cycle power.")] = 2.0,
    replicates: Annotated[int, typer.Option(help="Simulated tournaments per spread and truth.")] = 20,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws per simulated tournament.")] = 200,
    seed: Annotated[int, typer.Option(help="Simulation seed.")] = 0,
    jobs: Annotated[int, typer.Option(help="Worker processes (figures do not depend on it).")] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Before spending money: the exact cost of a design and, by simulation, whether it can
    order the models, detect divergence and cycles, and how wide its intervals will be."""
    from envduels.report.plan import DesignFlags, plan_command

    flags = DesignFlags(players=players, envs_per_author=envs_per_author, seeds=seeds, rounds=rounds, trials=trials)
    raise typer.Exit(plan_command(config, flags, spreads=spread or [], replicates=replicates, bootstrap=bootstrap,
                                  cycle=cycle, seed=seed, jobs=jobs, as_json=as_json))


@app.command()
def view(
    run_dirs: Annotated[list[Path], typer.Argument(help="One run folder or several.")],
    host: Annotated[str, typer.Option(help="Address to listen on; loopback unless you mean it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 0,
) -> None:
    """Serve a live local web viewer of runs, environments and transcripts (read-only)."""
    from envduels.view.commands import view_command

    raise typer.Exit(view_command(run_dirs, host=host, port=port))


def main() -> None:
    """Console entry point: user errors are one line and a non-zero exit, never a traceback."""
    try:
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except UserError as err:
        print(f"error: {err.message}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except KeyboardInterrupt:
        print("interrupted; finished work is saved, run the same command again to resume", file=sys.stderr)
        sys.exit(130)
    except Exception as err:  # click's own usage errors
        import click

        if isinstance(err, click.exceptions.ClickException):
            err.show()
            sys.exit(err.exit_code)
        if isinstance(err, click.exceptions.Abort):
            print("interrupted; finished work is saved, run the same command again to resume", file=sys.stderr)
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
