"""Types between stages (issue 21): `Any` at most 6 times per 1,000 lines of src/envduels.

Counted as the AST's `Name` and `Attribute` nodes named `Any` (`Any`, `typing.Any`) in every
module, annotations in strings not included; `from typing import Any` itself is not a use.
Lines are physical lines, docstrings and comments included. An alias of `Any` would be counted
where it is defined, and where it is used it hides nothing from a reader: don't."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "envduels"
PER_THOUSAND_LINES = 6


def any_uses(source: str) -> int:
    return sum(1 for node in ast.walk(ast.parse(source))
               if (isinstance(node, ast.Name) and node.id == "Any")
               or (isinstance(node, ast.Attribute) and node.attr == "Any"))


def test_the_counter_counts_uses_not_imports():
    assert any_uses("from typing import Any\nimport typing\n"
                    "def f(x: Any) -> dict[str, typing.Any]: ...") == 2


def test_src_uses_any_at_most_six_times_per_thousand_lines():
    lines = uses = 0
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines += len(text.splitlines())
        uses += any_uses(text)
    assert uses * 1000 <= PER_THOUSAND_LINES * lines, (
        f"{uses} uses of Any in {lines} lines: {uses * 1000 / lines:.2f} per 1,000 lines")
