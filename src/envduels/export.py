"""`envduels export RUN_DIR OUT_DIR`: a run's valid environments as RL training data.

Formats:
- `envduels`: an EnvDuels v1 export folder (SPEC §9) written by `envs.write_export`; sources are
  byte-identical to the run's, and each row's metadata carries `benchmark_seeds` plus the run's
  results (`round`, `flags`, `panel` rates, per-solver `results`).
- `jsonl`: `OUT_DIR/environments.jsonl`, one record per (environment, seed): see `ROW_FIELDS`.
  The record carries the source text, so a loader needs nothing but the file (the source hash
  lets it deduplicate), and the rows self-distillation trainers read: `prompt` (the duel's
  solver system prompt and unhinted first user turn for that seed, as a conversation: each
  environment is reset in the sandbox, with the run's limits, to read it) and
  `privileged_context` (the hint), `hint_1`/`hint_2` (a graded pair's; `hint_1` is the hint
  otherwise). A seed whose reset faults has no record; the summary and `export.json` name it.
- `hf`: a Hugging Face `datasets` folder (`Dataset.save_to_disk`) with the same records, which
  `datasets.load_from_disk` hands to TRL's SDFT/SDPO trainers as it is (docs/training.md).

Every format also writes `OUT_DIR/export.json` (what was exported, from where, with which
filters); an existing non-empty OUT_DIR is replaced only when it holds that file.

Selection (all filters combine): `authors`, `rounds`, `flags` (keep environments carrying any of
these flags), `[min_pass, max_pass]` on the panel's no-hint pass rate (environments without panel
data are dropped when a band is given), and `target`: per (environment, seed) keep only the seeds
the target model failed on every no-hint trial and passed on some hinted trial; an environment
keeps those seeds as its benchmark seeds and is dropped when none is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from envduels._safe_load import load_json_capped
from envduels.analysis.metrics import AUTHOR_FAULT_FLAGS, FLAGS, TablesLike
from envduels.analysis.transfer import env_solver_rates, matched_pairs
from envduels.envs import EnvSpec
from envduels.errors import UserError
from envduels.rl._distill import first_observations, solver_prompt
from envduels.rl._episodes import hint_text
from envduels.rl._rescue import HINT_1, HINT_2
from envduels.store import EnvRecord

if TYPE_CHECKING:
    from datasets import Features

    from envduels.sandbox import SandboxLimits

FORMATS = ("envduels", "jsonl", "hf")
MARKER = "export.json"
JSONL_NAME = "environments.jsonl"
ROW_FIELDS = (
    "id", "author", "round", "domain", "title", "seed", "source_sha256", "class_name",
    "max_turns", "hint", "flags", "panel_no_hint_rate", "panel_hinted_rate", "learnability",
    "solvers", "source", "prompt", "privileged_context", "hint_1", "hint_2",
)


class SolverResult(TypedDict):
    """One solver's results on one exported environment (a manifest row's `results` entry)."""

    solver: str
    no_hint_rate: float
    hinted_rate: float
    learnability: float
    pairs: int


@dataclass(frozen=True)
class Filters:
    """What `export` keeps; empty lists and None mean no restriction."""

    authors: list[str] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    min_pass: float | None = None
    max_pass: float | None = None
    target: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "authors": list(self.authors), "rounds": list(self.rounds), "flags": list(self.flags),
            "min_pass": self.min_pass, "max_pass": self.max_pass, "target": self.target,
        }


@dataclass(frozen=True)
class Selected:
    """One environment an export keeps: the run's record of it, the benchmark seeds kept, and the
    run's results on it."""

    env: EnvRecord
    seeds: list[int]
    flags: list[str]
    panel_no_hint_rate: float | None
    panel_hinted_rate: float | None
    learnability: float | None
    solvers: list[SolverResult]
    first_observations: dict[int, str] = field(default_factory=dict)
    """Per kept seed, the observation the environment resets to (`with_first_observations`
    fills it for the record formats); a record's `prompt` is built from it."""

    @property
    def env_id(self) -> str:
        return self.env.env_id

    def results_metadata(self) -> dict[str, object]:
        """The run's results as stored in an EnvDuels manifest row's metadata."""
        return {
            "round": self.env.round,
            "flags": list(self.flags),
            "panel": {
                "no_hint_rate": self.panel_no_hint_rate,
                "hinted_rate": self.panel_hinted_rate,
                "learnability": self.learnability,
            },
            "results": {s["solver"]: {k: v for k, v in s.items() if k != "solver"} for s in self.solvers},
        }

    def spec(self) -> EnvSpec:
        """The environment as exported: its recorded spec with the seeds kept and the run's
        results in its metadata."""
        spec = self.env.spec
        kept = {k: v for k, v in spec.metadata.items() if k != "benchmark_seeds"}
        return replace(spec, benchmark_seeds=tuple(self.seeds),
                       metadata={**kept, **self.results_metadata()})


def author_fault_flags(spec: EnvSpec) -> list[str]:
    """The author's-fault flags (`nondeterministic`, `trivial`, `hint_is_key`) an exported
    environment carries in its metadata: `export` keeps such environments unless `--flag` is
    given, and whoever serves or trains on an export skips them, as a run folder's are."""
    flags = spec.metadata.get("flags") if isinstance(spec.metadata, dict) else None
    return [f for f in flags if f in AUTHOR_FAULT_FLAGS] if isinstance(flags, list) else []


def check_filters(filters: Filters, envs: list[EnvRecord], tables: TablesLike) -> None:
    """UserError (one line, with the fix) for a filter naming something the run does not hold:
    an author or round of no environment in `envs`, a target that solved nothing in `tables`."""
    authors = sorted({e.author for e in envs})
    rounds = sorted({e.round for e in envs})
    for a in filters.authors:
        if a not in authors:
            raise UserError(f"--author {a!r} wrote no environment in this run; authors: {', '.join(authors) or 'none'}")
    for r in filters.rounds:
        if r not in rounds:
            raise UserError(f"--round {r} is not a round of this run; rounds: {', '.join(map(str, rounds)) or 'none'}")
    for f in filters.flags:
        if f not in FLAGS:
            raise UserError(f"--flag {f!r} is not a flag; use one of: {', '.join(FLAGS)}")
    for name, value in (("--min-pass", filters.min_pass), ("--max-pass", filters.max_pass)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise UserError(f"{name} {value} is outside [0, 1]; give a pass rate such as 0.05")
    if filters.min_pass is not None and filters.max_pass is not None and filters.min_pass > filters.max_pass:
        raise UserError(f"--min-pass {filters.min_pass} is above --max-pass {filters.max_pass}; swap them")
    if filters.target is not None:
        solvers = sorted(set(tables.episodes["solver"].astype(str))) if len(tables.episodes) else []
        if filters.target not in solvers:
            players = set(tables.players["name"].astype(str)) if len(tables.players) else set()
            what = "solved nothing in this run" if filters.target in players else "is no player of this run"
            raise UserError(f"--target {filters.target!r} {what}; solvers: {', '.join(solvers) or 'none'}")


def rescued_seeds(pairs: pd.DataFrame, target: str) -> dict[str, list[int]]:
    """Per environment, the seeds `target` failed on every no-hint trial and won on some hinted one."""
    mine = pairs[pairs["solver"] == target]
    if mine.empty:
        return {}
    per_seed = mine.groupby(["env_id", "seed"]).agg(cold=("y0", "max"), hinted=("yh", "max")).reset_index()
    kept = per_seed[(per_seed["cold"] == 0) & (per_seed["hinted"] == 1)]
    return {str(e): sorted(int(s) for s in g["seed"]) for e, g in kept.groupby("env_id")}


def select(
    envs: list[EnvRecord],
    tables: TablesLike,
    filters: Filters,
    *,
    flags: dict[str, list[str]] | None = None,
) -> list[Selected]:
    """The valid environments of `envs` that pass `filters`, in env id order (the order of the
    analysis tables), with the run's results on them from `tables` (the same run's `Tables`).

    `flags` defaults to `analysis.metrics.environment_flags(tables)`. Checks the filters first
    (`check_filters`).
    """
    check_filters(filters, envs, tables)
    if flags is None:
        from envduels.analysis.metrics import environment_flags

        flags = environment_flags(tables)
    pairs = matched_pairs(tables.episodes)
    rates = env_solver_rates(pairs)
    rescued = rescued_seeds(pairs, filters.target) if filters.target else {}
    kept = []
    for env in sorted(envs, key=lambda e: e.env_id):
        env_id = env.env_id
        if not env.valid:
            continue
        if filters.authors and env.author not in filters.authors:
            continue
        if filters.rounds and env.round not in filters.rounds:
            continue
        env_flags = list(flags.get(env_id, []))
        if filters.flags and not set(env_flags) & set(filters.flags):
            continue
        env_pairs = pairs[pairs["env_id"] == env_id]
        panel0 = float(env_pairs["y0"].mean()) if len(env_pairs) else None
        panelh = float(env_pairs["yh"].mean()) if len(env_pairs) else None
        if filters.min_pass is not None or filters.max_pass is not None:
            if panel0 is None:
                continue
            if filters.min_pass is not None and panel0 < filters.min_pass:
                continue
            if filters.max_pass is not None and panel0 > filters.max_pass:
                continue
        seeds = list(env.benchmark_seeds)
        if filters.target:
            seeds = [s for s in seeds if s in rescued.get(env_id, [])] or rescued.get(env_id, [])
            if not seeds:
                continue
        env_rates = rates[rates["env_id"] == env_id]
        solvers = [
            SolverResult(solver=str(r["solver"]), no_hint_rate=float(r["no_hint_rate"]),
                         hinted_rate=float(r["hinted_rate"]), learnability=float(r["learnability"]),
                         pairs=int(r["pairs"]))
            for r in env_rates.to_dict("records")
        ]
        kept.append(Selected(
            env=env, seeds=seeds, flags=env_flags, panel_no_hint_rate=panel0,
            panel_hinted_rate=panelh,
            learnability=float(env_rates["learnability"].mean()) if len(env_rates) else None,
            solvers=solvers,
        ))
    return kept


def records(selected: list[Selected]) -> list[dict[str, object]]:
    """One JSON-ready record per (environment, seed), with the fields of `ROW_FIELDS`; `prompt`
    is None for a seed without a first observation in `first_observations`, and
    `privileged_context`, `hint_1` and `hint_2` are None where the environment has no such
    hint."""
    out = []
    for item in selected:
        spec = item.env.spec
        for seed in item.seeds:
            observation = item.first_observations.get(seed)
            out.append({
                "id": spec.id, "author": spec.author, "round": item.env.round,
                "domain": spec.domain, "title": spec.title, "seed": seed,
                "source_sha256": spec.source_sha256, "class_name": spec.class_name,
                "max_turns": spec.max_turns, "hint": spec.hint, "flags": list(item.flags),
                "panel_no_hint_rate": item.panel_no_hint_rate,
                "panel_hinted_rate": item.panel_hinted_rate, "learnability": item.learnability,
                "solvers": [dict(s) for s in item.solvers], "source": spec.source,
                "prompt": None if observation is None else solver_prompt(observation),
                "privileged_context": hint_text(spec, HINT_1),
                "hint_1": hint_text(spec, HINT_1), "hint_2": hint_text(spec, HINT_2),
            })
    return out


@dataclass(frozen=True)
class Skipped:
    """An (environment, seed) whose reset faulted: no record is written for it."""

    env_id: str
    seed: int
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"id": self.env_id, "seed": self.seed, "reason": self.reason}


def with_first_observations(items: list[Selected], limits: SandboxLimits, *,
                            unsafe_no_sandbox: bool = False
                            ) -> tuple[list[Selected], list[Skipped]]:
    """`items` with each kept seed's first observation, read by resetting the environment in
    a fresh sandbox with `limits`; a seed whose reset faults is dropped (and listed), an
    environment left without seeds too. UserError (one line) when no sandbox can run here."""
    from envduels.sandbox import SandboxStartError, SandboxUnavailable, check_sandbox

    try:
        check_sandbox(limits, unsafe_no_sandbox=unsafe_no_sandbox)
        got = asyncio.run(first_observations(
            [(item.spec(), seed) for item in items for seed in item.seeds], limits,
            unsafe_no_sandbox=unsafe_no_sandbox))
    except SandboxUnavailable as err:
        raise UserError(f"the record formats reset each environment in the sandbox to read its "
                        f"first turn: {err.message}") from None
    except SandboxStartError as err:
        raise UserError(f"a sandbox could not start while reading first turns ({err.reason}); "
                        "the host is short of something: try the export again") from None
    kept: list[Selected] = []
    skipped: list[Skipped] = []
    for item in items:
        seen: dict[int, str] = {}
        for seed in item.seeds:
            result = got[(item.env_id, seed)]
            if isinstance(result, str):
                seen[seed] = result
            else:
                skipped.append(Skipped(item.env_id, seed, result.reason))
        if seen:
            kept.append(replace(item, seeds=list(seen), first_observations=seen))
    return kept, skipped


def _hf_features() -> Features:
    from datasets import Features, Sequence, Value

    solver = {
        "solver": Value("string"), "no_hint_rate": Value("float64"),
        "hinted_rate": Value("float64"), "learnability": Value("float64"), "pairs": Value("int64"),
    }
    return Features({
        "id": Value("string"), "author": Value("string"), "round": Value("int64"),
        "domain": Value("string"), "title": Value("string"), "seed": Value("int64"),
        "source_sha256": Value("string"), "class_name": Value("string"),
        "max_turns": Value("int64"), "hint": Value("string"), "flags": Sequence(Value("string")),
        "panel_no_hint_rate": Value("float64"), "panel_hinted_rate": Value("float64"),
        "learnability": Value("float64"), "solvers": [solver], "source": Value("string"),
        "prompt": [{"role": Value("string"), "content": Value("string")}],
        "privileged_context": Value("string"), "hint_1": Value("string"),
        "hint_2": Value("string"),
    })


def write(items: list[Selected], folder: Path, fmt: str) -> int:
    """Write `items` into the empty or new `folder` in format `fmt`; returns the record count."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "envduels":
        from envduels.envs import write_export

        write_export(folder, [item.spec() for item in items])
        return len(items)
    rows = records(items)
    if fmt == "jsonl":
        with (folder / JSONL_NAME).open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        return len(rows)
    try:
        from datasets import Dataset
    except ImportError:
        raise UserError("--format hf needs the `datasets` package; pip install 'envduels[hf]'") from None
    Dataset.from_list(rows, features=_hf_features()).save_to_disk(str(folder))
    return len(rows)


def _check_contained(folder: Path) -> None:
    """Every file written stays inside `folder` (no symlink or odd name led out)."""
    root = folder.resolve()
    for path in folder.rglob("*"):
        if path.is_symlink() or not path.resolve().is_relative_to(root):
            raise RuntimeError(f"export wrote {path} outside {folder}")


def _files(folder: Path) -> list[str]:
    """Every file below `folder`, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


def _prepare_out_dir(out_dir: Path) -> None:
    """OUT_DIR must be new, empty, or an earlier export holding only the files it wrote: an
    export replaces the whole folder, so anything else in it would be deleted."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file; give a new or empty folder as OUT_DIR")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not (out_dir / MARKER).is_file():
        raise UserError(
            f"{out_dir} is not empty and holds no earlier envduels export; give a new or empty folder"
        )
    try:   # a damaged marker (any of it) counts as none: every file is then foreign
        written = set(load_json_capped(out_dir / MARKER, 64 << 20, "export marker")["files"])
    except (UserError, KeyError, TypeError):
        written = set()
    foreign = [f for f in _files(out_dir) if f != MARKER and f not in written]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(
            f"{out_dir} holds files the earlier export did not write, such as {foreign[0]}{more}; "
            "a new export replaces the whole folder, so move them away or choose another OUT_DIR"
        )


def export_items(items: list[Selected], out_dir: Path, *, fmt: str, provenance: Mapping[str, object]) -> int:
    """Write a fresh export next to `out_dir`, then swap it in; an earlier export is replaced.

    Nothing is left half-written in `out_dir`: a failure removes the fresh copy and keeps the old.
    """
    _prepare_out_dir(out_dir)
    out_dir = out_dir.absolute()
    fresh = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        count = write(items, fresh, fmt)
        marker = {"envduels_export": 1, "format": fmt, "environments": len(items), "records": count,
                  **provenance, "files": _files(fresh)}
        (fresh / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        _check_contained(fresh)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            out_dir.rename(old)
            fresh.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            fresh.rename(out_dir)
    except OSError as err:
        raise UserError(f"cannot write {out_dir} ({err.strerror}); choose a writable OUT_DIR") from None
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return count


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
    from envduels.store import Store

    filters = Filters(list(authors), list(rounds), list(flags), min_pass, max_pass, target)
    with Store.open_readonly(run_dir, live=False) as store:
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
