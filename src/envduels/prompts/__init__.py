"""Prompt templates, kept as files beside this module and rendered with Jinja2.

`render(name, **values)` returns the template's text with the one trailing newline of the file
removed, so a template file reads naturally and the rendered prompt is exact.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

PROMPTS_DIR = Path(__file__).parent


@lru_cache(maxsize=1)
def _jinja() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        autoescape=False,
        keep_trailing_newline=False,
        undefined=jinja2.StrictUndefined,
    )


def render(name: str, **values: Any) -> str:
    """Render the template file `name` (e.g. "solver_first_turn.j2") with `values`."""
    return _jinja().get_template(name).render(**values)
