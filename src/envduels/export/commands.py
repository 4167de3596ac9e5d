"""`envduels export RUN_DIR OUT_DIR`: select a run's environments, write them, print a line."""

from __future__ import annotations

import sys
from pathlib import Path

from envduels.errors import UserError
from envduels.export._select import Filters, Skipped, select, with_first_observations
from envduels.export._write import FORMATS, MARKER, export_items
from envduels.store import RunReader


def export_command(
    run_dir: Path,
    out_dir: Path,
    *,
    fmt: str,
    authors: list[str],
    rounds: list[int],
    flags: list[str],
    min_pass: float | None,
    max_pass: float | None,
    target: str | None,
    unsafe_no_sandbox: bool = False,
) -> int:
    """The CLI command: select, write, print one summary line (and, on stderr, one line naming
    the seeds left out because their environment faulted on reset); returns 0. UserError on bad
    input (missing run, unknown format/author/round/flag/target, bad band, OUT_DIR not ours,
    nothing selected, no sandbox for the record formats)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r} is unknown; use one of: {', '.join(FORMATS)}")
    if not Path(run_dir).is_dir():
        raise UserError(f"run folder {run_dir} does not exist; pass the output_dir of an `envduels run`")
    filters = Filters(list(authors), list(rounds), list(flags), min_pass, max_pass, target)
    with RunReader(run_dir) as store:
        envs = store.environments()
        tables = store.tables()
        cfg = store.run_config()
    valid = sum(e.valid for e in envs)
    items = select(envs, tables, filters)
    if not items:
        raise UserError(
            f"no environment passes the filters ({valid} valid in {run_dir}); loosen --author/--round/--flag/--min-pass/--max-pass/--target"
        )
    provenance: dict[str, object] = {"run_dir": str(Path(run_dir).absolute()),
                                     "filters": filters.to_json()}
    skipped: list[Skipped] = []
    if fmt != "envduels":
        from envduels.sandbox import SandboxLimits

        limits = SandboxLimits.from_config(cfg.sandbox) if cfg is not None else SandboxLimits()
        items, skipped = with_first_observations(items, limits,
                                                 unsafe_no_sandbox=unsafe_no_sandbox)
        if not items:
            first = skipped[0]
            raise UserError(f"no record to write: every selected seed's environment faulted on "
                            f"reset (such as {first.env_id} seed {first.seed}: {first.reason}); "
                            "`envduels validate` an --format envduels export to see why")
        provenance["skipped"] = [s.to_json() for s in skipped]
    count = export_items(items, Path(out_dir), fmt=fmt, provenance=provenance)
    noun = "environments" if fmt == "envduels" else "records"
    print(f"exported {len(items)} of {valid} valid environments ({count} {noun}, format {fmt}) to {out_dir}")
    if skipped:
        first = skipped[0]
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        print(f"left out {len(skipped)} (environment, seed) whose reset faulted: {first.env_id} "
              f"seed {first.seed} ({first.reason}){more}; {MARKER} lists them", file=sys.stderr)
    return 0
