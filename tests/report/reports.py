"""Hand-written reports for the tests of the report's sentences.

A test writes only the keys its sentence reads (`{"run": {"episodes": 10}, ...}`); `complete`
fills every other field a `RunReport` requires with its blank (None where the field allows it,
else an empty list, 0, "" or False), so the test reads like the story it checks and the sentence
code reads the same typed record a real run gives it.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from envduels.analysis.result import RatingRow, RunReport

M = TypeVar("M", bound=BaseModel)


def _members(annotation: Any) -> tuple[Any, ...]:
    return get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    return next((a for a in _members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def _list_item(annotation: Any) -> Any:
    return next((get_args(a)[0] for a in _members(annotation) if get_origin(a) is list), None)


def _blank(annotation: Any) -> Any:
    members = _members(annotation)
    if type(None) in members:
        return None
    if any(get_origin(a) is list for a in members):
        return []
    if (model := _model_in(annotation)) is not None:
        return _fill(model, {})
    first = members[0]
    if get_origin(first) is Literal:
        return get_args(first)[0]
    return {bool: False, int: 0, float: 0.0, str: ""}[first]


def _value(annotation: Any, value: Any) -> Any:
    if isinstance(value, dict) and (model := _model_in(annotation)) is not None:
        return _fill(model, value)
    if isinstance(value, list) and (item := _list_item(annotation)) is not None and _model_in(item) is not None:
        return [_value(item, v) for v in value]
    return value


def _fill(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(model)
    out = {}
    for name, field in model.model_fields.items():
        if name in data:
            out[name] = _value(hints[name], data[name])
        elif field.is_required():
            out[name] = _blank(hints[name])
    return out | {k: v for k, v in data.items() if k not in model.model_fields}  # unknown keys: refused


def complete(doc: dict[str, Any]) -> RunReport:
    """The `RunReport` of a hand-written report: `doc`'s keys as given, every other one blank."""
    return RunReport.model_validate(_fill(RunReport, doc))


def filled(model: type[M], data: dict[str, Any]) -> M:
    """A record of `model` from a hand-written part of a report, every field not given blank."""
    return model.model_validate(_fill(model, data))


def rating_rows(rows: list[dict[str, Any]]) -> list[RatingRow]:
    """Hand-written rating rows (`model`, `rating`, and whatever else the test needs) as records."""
    return [filled(RatingRow, r) for r in rows]
