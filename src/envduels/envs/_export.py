"""Reading environments from disk: a single `.py` file, or an EnvDuels v1 export folder (SPEC §9).

An export folder is `manifest.json` plus the files its rows name. Loading is strict: a row whose
path escapes the folder (absolute, `..`, or a symlink resolving outside), names a missing file,
or whose source does not match `source_sha256` is refused with a `UserError` naming the row.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from envduels._safe_load import load_json_capped, read_text_capped
from envduels._text import one_line, valid_text
from envduels.envs._spec import DEFAULT_MAX_TURNS, EnvSpec
from envduels.envs._static import (
    MAX_SOURCE_CHARS,
    StaticError,
    default_max_turns,
    find_env_class,
    parse_source,
)
from envduels.errors import UserError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HINT_KEYS = ("hint", "hint_1", "hint_2")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_BAD_PATH_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_SEED = 2**63
"""Benchmark seeds are 63-bit, so that every seed fits a signed 64-bit database integer."""


def _short(value: object, limit: int = 60) -> str:
    return one_line(repr(value), limit)


# Byte caps on what a loader reads (`envduels._safe_load`): a source past MAX_SOURCE_CHARS
# (at most 4 UTF-8 bytes each) could never be valid; a hint file holds a few hundred characters.
SOURCE_MAX_BYTES = 4 * MAX_SOURCE_CHARS
HINTS_MAX_BYTES = 1 << 20
MANIFEST_MAX_BYTES = 64 << 20


def _read_text(path: Path, what: str, max_bytes: int = SOURCE_MAX_BYTES) -> str:
    """The text of `path` (bytes decoded: the hash covers the file exactly); one-line
    `UserError` when it is missing, not a regular file, over `max_bytes` or not UTF-8."""
    return read_text_capped(path, max_bytes, what)


def load_env_file(path: str | Path) -> EnvSpec:
    """An environment from one `.py` file; id = the file's stem.

    A sidecar `<stem>.hint.txt` next to the file, when present, is its hint (so a bare file can be
    checked against the hint rules too); without one, `hints` is empty. `max_turns` is the literal
    default of the class's `__init__(max_turns=...)` when the source parses, else 20. The source
    is never executed here. `UserError` when the file is missing or unreadable.
    """
    path = Path(path)
    source = _read_text(path, "environment file")
    max_turns = DEFAULT_MAX_TURNS
    try:
        tree = parse_source(source)
        max_turns = default_max_turns(tree, find_env_class(tree))
    except StaticError:
        pass  # validation reports it; loading only needs the text
    hints: dict[str, str] = {}
    sidecar = path.with_name(f"{path.stem}.hint.txt")
    if sidecar.exists():   # a FIFO or device there is refused by name, not skipped
        hints["hint"] = _read_text(sidecar, "hint file", HINTS_MAX_BYTES).strip()
    return EnvSpec(id=path.stem, source=source, max_turns=max_turns, hints=hints)


def _row_error(index: int, row: object, problem: str) -> UserError:
    row_id = row.get("id") if isinstance(row, dict) else None
    label = f"manifest row {index}" + (f" (id {row_id!r})" if row_id is not None else "")
    return UserError(f"{label}: {problem}")


def _inside(folder: Path, rel: object, index: int, row: object, key: str) -> Path:
    """`folder / rel`, refused unless it is a relative path that stays inside `folder`."""
    if not isinstance(rel, str) or not rel:
        raise _row_error(index, row, f"{key!r} must be a relative path string, got {rel!r}")
    if _BAD_PATH_CHAR.search(rel):
        raise _row_error(index, row, f"{key} {ascii(rel)} holds a control character or a lone "
                         "surrogate: name the file with printable characters")
    pure = Path(rel)
    if pure.is_absolute() or rel.startswith(("/", "\\")) or ".." in pure.parts:
        raise _row_error(index, row, f"{key} {rel!r} escapes the export folder: use a path relative to the folder, without '..'")
    path = folder / pure
    try:
        resolved = path.resolve()
        inside = resolved.is_relative_to(folder.resolve())
        exists = resolved.exists()   # a FIFO or device is refused by the reader, by name
    except (OSError, ValueError) as err:  # e.g. a name too long for the file system
        raise _row_error(index, row, f"{key} {rel!r} is not a usable path ({type(err).__name__}): "
                         "give a short relative path to a file in the folder") from None
    if not inside:
        raise _row_error(index, row, f"{key} {rel!r} is a symlink pointing outside the export folder: copy the file into the folder")
    if not exists:
        raise _row_error(index, row, f"{key} file {rel!r} is missing: restore it or remove the row")
    return path


def _read_manifest(folder: Path) -> list[Any]:
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder: give an EnvDuels export folder holding {MANIFEST}")
    path = folder / MANIFEST
    manifest = load_json_capped(path, MANIFEST_MAX_BYTES, "manifest",
                                missing=f"{folder} has no {MANIFEST}: not an EnvDuels export folder")
    if not isinstance(manifest, dict):
        raise UserError(f"{path} must hold a JSON object with format_version and environments")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise UserError(f"{path}: format_version {version!r} is not supported: envduels reads format_version {FORMAT_VERSION}")
    rows = manifest.get("environments")
    if not isinstance(rows, list):
        raise UserError(f"{path}: 'environments' must be a list of rows")
    return rows


def _load_row(folder: Path, index: int, row: Any) -> EnvSpec:
    if not isinstance(row, dict):
        raise _row_error(index, row, "must be a JSON object")
    env_id = row.get("id")
    if not isinstance(env_id, str) or not env_id:
        raise _row_error(index, row, "'id' must be a non-empty string")
    source_path = _inside(folder, row.get("source"), index, row, "source")
    try:
        source = _read_text(source_path, "source")
    except UserError as err:
        raise _row_error(index, row, err.message) from None
    expected = row.get("source_sha256")
    actual = hashlib.sha256(source.encode("utf-8")).hexdigest()
    if expected != actual:
        raise _row_error(index, row, f"source {row['source']!r} does not match source_sha256 (file {actual[:12]}…, manifest {str(expected)[:12]}…): the file changed after export; re-export or fix the hash")
    max_turns = row.get("max_turns", DEFAULT_MAX_TURNS)
    if type(max_turns) is not int or max_turns < 1:
        raise _row_error(index, row, f"max_turns must be a positive integer, got {max_turns!r}")
    class_name = row.get("class_name")
    if class_name is not None and not isinstance(class_name, str):
        raise _row_error(index, row, f"class_name must be a string or null, got {class_name!r}")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _row_error(index, row, "metadata must be a JSON object")
    seeds = metadata.get("benchmark_seeds", [])
    if not isinstance(seeds, list) or not all(type(s) is int for s in seeds):
        raise _row_error(index, row, f"metadata.benchmark_seeds must be a list of integers, got {_short(seeds)}")
    for seed in seeds:
        if not 0 <= seed < MAX_SEED:
            raise _row_error(index, row, f"benchmark seed {_short(seed)} is outside 0 <= seed < 2**63: "
                             "use non-negative 63-bit seeds (as benchmark_seeds() derives them)")
    hints: dict[str, str] = {}
    if row.get("privileged") is not None:
        hints = _load_hints(folder, index, row, env_id)
    carried = {f.name: _carried_value(index, row, f.name, metadata[f.name])
               for f in _carried_fields() if f.name in metadata}
    extra = {k: v for k, v in metadata.items()
             if k not in ("benchmark_seeds", "title") and k not in carried}
    if "split" in row:
        extra["split"] = row["split"]
    return EnvSpec(
        id=env_id,
        source=source,
        class_name=class_name,
        max_turns=max_turns,
        # lone surrogates (JSON's "\ud800") as U+FFFD: every text a spec carries must encode
        # as UTF-8 wherever it is shown or sent (the server's responses, the store)
        domain=valid_text(str(row.get("domain") or "other")),
        author=valid_text(str(row.get("author") or "")),
        title=valid_text(str(metadata.get("title") or "")),
        hints=hints,
        benchmark_seeds=tuple(seeds),
        metadata=extra,
        **carried,
    )


def _carried_fields() -> list[Field]:
    """The `EnvSpec` fields without a place of their own in a manifest row: each travels in the
    row's `metadata` under its own name, written when it differs from its default. So a field
    added to `EnvSpec` survives an export and its import with no change here."""
    own = {"id", "source", "class_name", "max_turns", "domain", "author", "title", "hints",
           "benchmark_seeds", "metadata"}
    return [f for f in fields(EnvSpec) if f.name not in own]


def _carried_value(index: int, row: object, name: str, value: object) -> object:
    """`metadata[name]` as the value of `EnvSpec.name`; a row error when its JSON type is not
    the field's."""
    hint = get_type_hints(EnvSpec)[name]
    kind = get_origin(hint) or hint
    if kind is tuple and isinstance(value, list):
        return tuple(value)
    if isinstance(kind, type) and type(value) is kind:
        return value
    raise _row_error(index, row, f"metadata.{name} must be a {getattr(kind, '__name__', kind)}, "
                     f"got {_short(value)}")


def _load_hints(folder: Path, index: int, row: dict[str, Any], env_id: str) -> dict[str, str]:
    path = _inside(folder, row["privileged"], index, row, "privileged")
    try:
        data = load_json_capped(path, HINTS_MAX_BYTES, "privileged file")
    except UserError as err:
        raise _row_error(index, row, err.message) from None
    hints = data.get("hints") if isinstance(data, dict) else None
    if not isinstance(hints, dict):
        raise _row_error(index, row, f"privileged file {row['privileged']!r} must hold {{\"environment_id\": ..., \"hints\": {{\"hint\": ...}}}}")
    if data.get("environment_id", env_id) != env_id:
        raise _row_error(index, row, f"privileged file {row['privileged']!r} is for environment {data['environment_id']!r}, not {env_id!r}")
    kept = {k: v for k, v in hints.items() if k in HINT_KEYS}
    if not kept or not all(isinstance(v, str) for v in kept.values()):
        raise _row_error(index, row, f"privileged file {row['privileged']!r} needs a string 'hint' (or graded 'hint_1'/'hint_2')")
    return {k: valid_text(v) for k, v in kept.items()}


def load_export(folder: str | Path) -> list[EnvSpec]:
    """Every environment of an EnvDuels v1 export folder, in manifest order.

    `UserError` naming the row (index and id) on a path escape, a missing file, a hash mismatch,
    a malformed field or a duplicate id; `UserError` if the folder or manifest is unusable.
    The `split` of a row and metadata other than `title`/`benchmark_seeds` land in `metadata`.
    """
    folder = Path(folder)
    specs: list[EnvSpec] = []
    seen: set[str] = set()
    for index, row in enumerate(_read_manifest(folder)):
        spec = _load_row(folder, index, row)
        if spec.id in seen:
            raise _row_error(index, row, f"duplicate id {spec.id!r}: every row needs its own id")
        seen.add(spec.id)
        specs.append(spec)
    return specs


def file_stem(env_id: str) -> str:
    """A file name for an environment id: the id with unsafe characters replaced, plus a short
    hash when anything was replaced so that distinct ids never share a file."""
    safe = _SAFE_NAME.sub("_", env_id).strip("._") or "env"
    if safe != env_id:
        safe += "-" + hashlib.sha256(env_id.encode("utf-8")).hexdigest()[:8]
    return safe


def manifest_row(spec: EnvSpec, source_rel: str, privileged_rel: str | None) -> dict[str, Any]:
    """The manifest row of `spec` (SPEC §9); `metadata` gets `benchmark_seeds`, `title` and
    every other field without a row key of its own that differs from its default."""
    metadata = {k: v for k, v in spec.metadata.items() if k != "split"}
    metadata["benchmark_seeds"] = list(spec.benchmark_seeds)
    if spec.title:
        metadata["title"] = spec.title
    for f in _carried_fields():
        value = getattr(spec, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if value != default:
            metadata[f.name] = list(value) if isinstance(value, tuple) else value
    return {
        "id": spec.id,
        "source": source_rel,
        "source_sha256": spec.source_sha256,
        "class_name": spec.class_name,
        "max_turns": spec.max_turns,
        "domain": spec.domain,
        "author": spec.author,
        "split": spec.metadata.get("split", "test"),
        "metadata": metadata,
        "privileged": privileged_rel,
    }


def write_export(folder: str | Path, specs: list[EnvSpec]) -> Path:
    """Write `specs` as an EnvDuels v1 export into `folder` (created if needed) and return the
    path of its `manifest.json`. Sources go to `envs/<id>.py`, hints to `privileged/<id>.json`
    (no privileged file for a spec without hints); a row's split is `metadata["split"]`, default
    "test". `load_export` of the result gives back equal specs, with the split made explicit.
    `ValueError` on duplicate ids."""
    folder = Path(folder)
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("write_export: duplicate environment ids")
    (folder / "envs").mkdir(parents=True, exist_ok=True)
    (folder / "privileged").mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in specs:
        stem = file_stem(spec.id)
        source_rel = f"envs/{stem}.py"
        (folder / source_rel).write_bytes(spec.source.encode("utf-8"))
        privileged_rel = None  # a spec without hints (a bare .py file) has no privileged file
        if spec.hints:
            privileged_rel = f"privileged/{stem}.json"
            privileged = {"environment_id": spec.id, "hints": dict(spec.hints)}
            (folder / privileged_rel).write_text(json.dumps(privileged, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        rows.append(manifest_row(spec, source_rel, privileged_rel))
    manifest = {"format_version": FORMAT_VERSION, "environments": rows}
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
