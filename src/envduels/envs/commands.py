"""`envduels validate` and `envduels library list|show`: the CLI's side of `envduels.envs`."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from envduels._text import plural, printable
from envduels.envs._library import library_dir, library_env, library_names
from envduels.envs._resolve import resolve
from envduels.envs._spec import EnvSpec, Verdict, benchmark_seeds
from envduels.envs._validate import validate_env
from envduels.errors import UserError

VALIDATION_RUN_SEED = 0
"""Run seed used to derive benchmark seeds for environments that carry none (a bare file)."""

_ORACLE_ORDER = ("failed", "skipped", "absent", "passed")


def _shown(text: str) -> str:
    """Untrusted text for a rich console: control characters removed, markup escaped."""
    return escape(printable(text))


def seeds_for(spec: EnvSpec, n: int) -> list[int]:
    """The first `n` of the spec's own benchmark seeds, else `benchmark_seeds(0, spec.id, n)`."""
    if spec.benchmark_seeds:
        return list(spec.benchmark_seeds[:n])
    return benchmark_seeds(VALIDATION_RUN_SEED, spec.id, n)


async def _validate_all(specs: list[EnvSpec], *, seeds: int, require_oracle: bool,
                        hint_max_chars: int, unsafe_no_sandbox: bool,
                        fixed_pool: bool = False, revalidate: bool = False,
                        workers: int | None = None) -> list[Verdict]:
    """Each spec's verdict. A fixed-pool environment (library, export) judged before with the
    same source, seeds, options and validator gets its cached verdict (`_verdict_cache`)
    unless `revalidate`; verdicts judged without the sandbox are never cached."""
    from envduels.envs._verdict_cache import VerdictCache, verdict_key
    from envduels.sandbox import SandboxLimits, SandboxStartError, sandbox_pool

    # A fresh secret salt per invocation: with a fixed one an author could know the probes.
    probe_seed = secrets.token_hex(16)
    options = {"require_oracle": require_oracle, "hint_max_chars": hint_max_chars,
               "fixed_pool": fixed_pool}
    cache = VerdictCache.open() if fixed_pool and not unsafe_no_sandbox else None
    keys = [verdict_key(spec, seeds=seeds_for(spec, seeds), options=options)
            if cache is not None else "" for spec in specs]
    verdicts: list[Verdict | None] = [
        cache.load(key, seeds=seeds_for(spec, seeds))
        if cache is not None and not revalidate else None
        for spec, key in zip(specs, keys, strict=True)]
    if all(v is not None for v in verdicts):
        return [v for v in verdicts if v is not None]
    try:
        async with sandbox_pool(SandboxLimits(), workers=workers,
                                unsafe_no_sandbox=unsafe_no_sandbox) as pool:
            for i, spec in enumerate(specs):
                if verdicts[i] is None:
                    verdict = await validate_env(
                        spec, pool, seeds=seeds_for(spec, seeds), require_oracle=require_oracle,
                        hint_max_chars=hint_max_chars, fixed_pool=fixed_pool,
                        probe_seed=probe_seed)
                    verdicts[i] = verdict
                    if cache is not None:
                        cache.store(keys[i], verdict)
            return [v for v in verdicts if v is not None]
    except SandboxStartError as err:
        raise UserError(f"the sandbox could not start ({err.reason}); no environment was judged: "
                        "check that bubblewrap works here (bwrap --version) and try again") from None


def _env_json(spec: EnvSpec, verdict: Verdict) -> dict[str, Any]:
    return {"id": spec.id, **verdict.to_json()}


def verdict_json(kind: str, path: str, specs: list[EnvSpec], verdicts: list[Verdict]) -> dict[str, Any]:
    """The `--json` object: one environment's verdict, or for a folder the overall verdict
    (`reasons` prefixed with the id, `oracle` the worst of its rows) plus `environments`."""
    if kind != "folder":
        return {**_env_json(specs[0], verdicts[0]), "path": path}
    oracles = {v.oracle for v in verdicts}
    return {
        "valid": all(v.valid for v in verdicts),
        "reasons": [f"{s.id}: {r}" for s, v in zip(specs, verdicts, strict=True) for r in v.reasons],
        "oracle": next((o for o in _ORACLE_ORDER if o in oracles), "passed"),
        "path": path,
        "environments": [_env_json(s, v) for s, v in zip(specs, verdicts, strict=True)],
    }


def validate_command(path: str, *, seeds: int, as_json: bool, require_oracle: bool,
                     hint_max_chars: int, unsafe_no_sandbox: bool,
                     revalidate: bool = False, workers: int | None = None) -> int:
    """Validate what `path` names (`envduels.envs.resolve`: a `.py` file, an export folder, one
    environment of one as `FOLDER/ENV_ID`, a library name); 0 only if every environment
    is valid, 1 otherwise. `UserError` for an unusable path, manifest or sandbox (exit 2 at the
    CLI); with `as_json` it is printed instead as `{"valid": false, "reasons": [message],
    "path": path}` and its exit code returned, so stdout always holds exactly one JSON object."""
    try:
        return _validate(path, seeds=seeds, as_json=as_json, require_oracle=require_oracle,
                         hint_max_chars=hint_max_chars, unsafe_no_sandbox=unsafe_no_sandbox,
                         revalidate=revalidate, workers=workers)
    except UserError as err:
        if not as_json:
            raise
        sys.stdout.write(json.dumps({"valid": False, "reasons": [err.message], "path": path}) + "\n")
        return err.exit_code


def _validate(path: str, *, seeds: int, as_json: bool, require_oracle: bool,
              hint_max_chars: int, unsafe_no_sandbox: bool, revalidate: bool = False,
              workers: int | None = None) -> int:
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    if hint_max_chars < 1:
        raise UserError(f"--hint-max-chars must be at least 1, got {hint_max_chars}")
    found = resolve(path)
    kind, specs = found.kind, found.specs
    if unsafe_no_sandbox:
        Console(stderr=True, soft_wrap=True).print(
            "[bold red]WARNING: --unsafe-no-sandbox: environment code runs WITHOUT the bubblewrap "
            "sandbox and can read your files and secrets. Use it only for code you trust.[/]"
        )
    verdicts = asyncio.run(_validate_all(specs, seeds=seeds, require_oracle=require_oracle,
                                         hint_max_chars=hint_max_chars,
                                         unsafe_no_sandbox=unsafe_no_sandbox,
                                         fixed_pool=kind != "file",  # exports, the library
                                         revalidate=revalidate, workers=workers))
    valid = all(v.valid for v in verdicts)
    if as_json:
        sys.stdout.write(json.dumps(verdict_json(kind, path, specs, verdicts)) + "\n")
        return 0 if valid else 1
    console = Console(highlight=False, soft_wrap=True)
    for spec, verdict in zip(specs, verdicts, strict=True):
        mark = "[bold green]valid[/]" if verdict.valid else "[bold red]INVALID[/]"
        hint = "hint checked" if spec.hints else "no hint supplied"
        # Every field carries environment text or comes from the verdict cache: no escape
        # sequence or markup reaches the terminal (JSON output needs nothing: json.dumps
        # escapes every control character).
        console.print(f"{mark}  {_shown(spec.id)}  [dim](class {_shown(str(verdict.class_name))}, "
                      f"oracle {_shown(verdict.oracle)}, {plural(len(verdict.seeds), 'seed')}, "
                      f"{hint})[/]")
        for reason in verdict.reasons:
            console.print(f"  [red]-[/] {_shown(reason)}")
        for warning, flag in zip(verdict.warnings, verdict.flags, strict=False):
            console.print(f"  [yellow]warning[/] ({_shown(flag)}): {_shown(warning)}")
    if kind == "folder":
        ok = sum(v.valid for v in verdicts)
        console.print(f"{ok} of {plural(len(verdicts), 'environment')} valid")
    return 0 if valid else 1


def library_list_command() -> int:
    """A table of every library environment: name, domain, difficulty, title, description."""
    table = Table(title=f"envduels reference library ({library_dir()})", show_lines=False)
    for column in ("name", "domain", "difficulty"):
        table.add_column(column, no_wrap=True)
    table.add_column("title")
    table.add_column("description", overflow="fold")
    for name in library_names():
        spec = library_env(name)
        table.add_row(*(_shown(str(cell)) for cell in (
            spec.id, spec.domain, spec.metadata.get("difficulty", ""), spec.title,
            spec.metadata.get("description", ""))))
    Console().print(table)
    return 0


def library_show_command(name: str, *, source_only: bool = False) -> int:
    """A library environment's description, hint, seeds and source; with `source_only` just its
    source, byte for byte (to save it as a starting point: `... --source > my_env.py`)."""
    spec = library_env(name)
    if source_only:
        sys.stdout.write(spec.source)
        return 0
    console = Console()
    facts = (
        f"[bold]{_shown(spec.title)}[/] ({_shown(spec.id)})\n"
        f"domain: {_shown(spec.domain)}   difficulty: {_shown(str(spec.metadata.get('difficulty', '')))}   "
        f"max_turns: {spec.max_turns}   class: {_shown(str(spec.class_name))}\n"
        f"{_shown(str(spec.metadata.get('description', '')))}\n\n"
        f"[bold]hint[/] (privileged): {_shown(spec.hint)}\n"
        f"[bold]benchmark seeds[/]: {', '.join(map(str, spec.benchmark_seeds))}"
    )
    console.print(Panel(facts, expand=False))
    # wrapped, never cropped: piped output is 80 columns wide
    console.print(Syntax(printable(spec.source), "python", line_numbers=True, word_wrap=True))
    return 0
