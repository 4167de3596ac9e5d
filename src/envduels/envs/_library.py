"""The reference library: hand-written environments shipped as an EnvDuels v1 export folder.

`library/manifest.json` lists them (title, difficulty, description in `metadata`),
`library/envs/<name>.py` holds the sources and `library/privileged/<name>.json` the hints, so the
library loads with the same `load_export` as any export: by construction, not by a special path.

After editing a library source, refresh the manifest's hashes with
`python -m envduels.envs --rehash` (a test fails while they are stale).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
from pathlib import Path

from envduels.envs._export import MANIFEST, load_export
from envduels.envs._spec import EnvSpec
from envduels.errors import UserError


def library_dir() -> Path:
    """The library's export folder inside the installed package."""
    return Path(__file__).resolve().parent / "library"


@functools.cache
def _library() -> dict[str, EnvSpec]:
    return {spec.id: spec for spec in load_export(library_dir())}


def library_names() -> list[str]:
    """Every library environment name, in manifest order (grouped by domain)."""
    return list(_library())


def library_env(name: str) -> EnvSpec:
    """The library environment `name`; `UserError` listing the names when there is none."""
    try:
        return _library()[name]
    except KeyError:
        raise UserError(
            f"no library environment {name!r}: choose one of {', '.join(library_names())} "
            "(see `envduels library list`)"
        ) from None


def rehash(folder: Path | None = None) -> list[str]:
    """Rewrite every row's `source_sha256` from its file; returns the ids whose hash changed."""
    folder = folder or library_dir()
    path = folder / MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8"))
    changed = []
    for row in manifest["environments"]:
        digest = hashlib.sha256((folder / row["source"]).read_bytes()).hexdigest()
        if row["source_sha256"] != digest:
            row["source_sha256"] = digest
            changed.append(row["id"])
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _library.cache_clear()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envduels.envs", description=__doc__.split("\n")[0])
    parser.add_argument("--rehash", action="store_true", help="rewrite the manifest's source hashes")
    args = parser.parse_args(argv)
    if args.rehash:
        changed = rehash()
        print(f"rehashed: {', '.join(changed) if changed else 'nothing changed'}")
        return 0
    for spec in _library().values():
        print(f"{spec.id:18s} {spec.domain:9s} {spec.metadata.get('difficulty', ''):7s} {spec.title}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
