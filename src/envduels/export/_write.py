"""Writing an export folder: in one of `FORMATS`, fresh beside OUT_DIR and then swapped in, with
`export.json` (`MARKER`) saying what was written from where; an earlier export is replaced only
when that file says every file in it was its own."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envduels._safe_load import load_json_capped
from envduels.errors import UserError
from envduels.export._select import Selected, records

if TYPE_CHECKING:
    from datasets import Features

FORMATS = ("envduels", "jsonl", "hf")
MARKER = "export.json"
JSONL_NAME = "environments.jsonl"


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
