"""Which environments a string names: the one resolver behind `validate`, `play`,
`tournament.environments` and `envduels.gym.make` (the order and why: docs/environments.md).

Order, first match wins:
1. `library:NAME`: the library environment NAME, whatever lies on disk.
2. An existing file or folder: the file (`load_env_file`) or the export folder (`load_export`).
   A bare name that is also a library name is refused instead: the same text would name one
   environment here and another in a folder without that file.
3. `FOLDER/ENV_ID` (a "/" in the text) where FOLDER holds a `manifest.json`: that one
   environment of the export.
4. A library name.
Anything else is a `UserError` naming the text and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envduels.envs._export import MANIFEST, load_env_file, load_export
from envduels.envs._library import library_env, library_names
from envduels.envs._spec import EnvSpec
from envduels.errors import UserError

LIBRARY_PREFIX = "library:"

ResolvedKind = Literal["file", "folder", "entry", "library"]


@dataclass(frozen=True)
class Resolved:
    """The environments a string names, and where they came from.

    `kind`: "file" (one `.py` file), "folder" (every environment of an export folder), "entry"
    (one environment of an export folder, named `FOLDER/ENV_ID`) or "library" (one library
    environment). Every kind but "file" is a fixed, curated environment (a bare file is a draft).
    """

    text: str
    kind: ResolvedKind
    specs: list[EnvSpec]

    def one(self) -> EnvSpec:
        """The single environment named; `UserError` when a folder holds several (naming how to
        pick one)."""
        if len(self.specs) == 1:
            return self.specs[0]
        ids = ", ".join(s.id for s in self.specs[:8])
        raise UserError(f"{self.text} holds {len(self.specs)} environments; name one as "
                        f"{self.text}/ENV_ID (ids: {ids})")


def resolve(text: str | Path) -> Resolved:
    """The environments `text` names, in the module's order. `UserError` when it names none, or
    when a bare library name is also a file or folder here (write `./NAME` for the path or
    `library:NAME` for the library environment)."""
    text = str(text)
    if text.startswith(LIBRARY_PREFIX):
        return Resolved(text, "library", [library_env(text[len(LIBRARY_PREFIX):])])
    path = Path(text)
    if _exists(path):
        if text in library_names():
            what = "folder" if path.is_dir() else "file"
            raise UserError(
                f"{text!r} is both a library environment and the {what} ./{text} here; write "
                f"./{text} for the {what} or {LIBRARY_PREFIX}{text} for the library environment")
        if path.is_dir():
            return Resolved(text, "folder", load_export(path))
        return Resolved(text, "file", [load_env_file(path)])
    if "/" in text and _exists(path.parent / MANIFEST):   # never a bare name: see step 4
        by_id = {s.id: s for s in load_export(path.parent)}
        if path.name in by_id:
            return Resolved(text, "entry", [by_id[path.name]])
        raise UserError(f"export {path.parent} has no environment {path.name!r}; choose one of "
                        f"{', '.join(list(by_id)[:8])}")
    if text in library_names():
        return Resolved(text, "library", [library_env(text)])
    raise UserError(f"{text!r} is not an environment file, an EnvDuels export folder or a library "
                    "name: check the path, or see `envduels library list`")


def _exists(path: Path) -> bool:
    """Whether `path` exists; False for a name the OS cannot even look up (a component over
    255 bytes, a NUL), so that such text gets the resolver's one-line error, not a traceback."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
