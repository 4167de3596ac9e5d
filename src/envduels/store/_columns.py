"""How a record's fields become a table's columns: SQL types, values written and read back.

A table that stores a record (environments, episodes) has one column per field of its
dataclass. `Column.of` reads everything about a column from the field's declaration: its SQL
type, how a value is written (JSON for dicts and tuples), how it reads back, and what a row
written before the column existed reads as (the field's default).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields
from functools import cached_property
from types import UnionType
from typing import Union, cast, get_args, get_origin, get_type_hints

from envduels._text import valid_text

SQLValue = str | int | float | bytes | None
"""What a column of the run database holds (SQLite's storage classes)."""


def text_value(value: str | None) -> str | None:
    """Text for a TEXT column: lone surrogates (from environment code or a model reply) as
    U+FFFD, since SQLite stores UTF-8 and one such character would stop the run."""
    return valid_text(value) if isinstance(value, str) else value


def json_text(value: object, *, sort_keys: bool = False,
              default: Callable[[object], object] | None = None) -> str:
    """`value` as JSON with every lone surrogate in it as U+FFFD (not as a `\\udXXX` escape,
    which would come back as a lone surrogate when read)."""
    return valid_text(json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, default=default))


@dataclass(frozen=True)
class Column:
    """One column of a table that stores a record: its SQL type, how a field's value is written
    and read back, and what a row written before the column existed reads as (the field's
    default), all from the field's declaration."""

    name: str
    field: str            # the record's field it holds
    kind: type            # bool, int, float, str, or dict/list/tuple (stored as JSON text)
    default: Callable[[], object]
    sort_keys: bool = False

    @classmethod
    def of(cls, f: Field[object], hint: object, *, name: str | None = None,
           sort_keys: bool = False) -> Column:
        args = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (
            Union, UnionType) else [hint]
        kind = cast(type, get_origin(args[0]) or args[0])
        if f.default is not MISSING:
            value = f.default
            default: Callable[[], object] = lambda: value  # noqa: E731
        elif f.default_factory is not MISSING:
            default = f.default_factory
        else:
            default = lambda: None  # noqa: E731
        return cls(name or f.name, f.name, kind, default, sort_keys)

    @property
    def sql(self) -> str:
        return {bool: "INTEGER", int: "INTEGER", float: "REAL"}.get(self.kind, "TEXT")

    def encode(self, value: object) -> SQLValue:
        if value is None:
            return None
        if self.kind is bool:
            return int(bool(value))
        if self.kind in (dict, list, tuple):
            return json_text(list(value) if isinstance(value, tuple) else value,
                             sort_keys=self.sort_keys, default=str)
        if isinstance(value, str):
            return valid_text(value) if self.kind is str else value
        if isinstance(value, int | float | bytes):
            return value
        raise TypeError(f"column {self.name} cannot hold a {type(value).__name__}")

    @cached_property
    def read(self) -> Callable[[SQLValue], object]:
        """The field's value from the column's (None, as in a column added after the row was
        written, is the field's default). One function per kind: tables read it per cell."""
        default = self.default

        def text(v: str | int | float | bytes) -> str | bytes:
            return v if isinstance(v, str | bytes) else str(v)

        if self.kind is bool:
            return lambda v: default() if v is None else bool(v)
        if self.kind is tuple:
            return lambda v: default() if v is None else tuple(json.loads(text(v)))
        if self.kind in (dict, list):
            return lambda v: default() if v is None else json.loads(text(v))
        return lambda v: default() if v is None else v


def columns(record: type, *, skip: tuple[str, ...] = (), rename: dict[str, str] | None = None,
            sort_keys: bool = False) -> list[Column]:
    """The columns of `record`'s fields (but `skip`), in field order; `rename` maps a field to
    a column of another name."""
    hints = get_type_hints(record)
    return [Column.of(f, hints[f.name], name=(rename or {}).get(f.name), sort_keys=sort_keys)
            for f in fields(record) if f.name not in skip]
