"""How the viewer's pages show values: URLs, numbers, highlighted sources, transcripts, the
environments table's order. Everything that reaches HTML goes through Jinja's autoescaping;
the only markup built here is Pygments' (which escapes the source it highlights) and the hint
marks (escaped pieces joined)."""

from __future__ import annotations

import functools
import math
from typing import Any
from urllib.parse import quote

import numpy as np
from markupsafe import Markup, escape


def q(value: Any) -> str:
    """A path segment for a URL: every character that is not plain is percent-encoded."""
    return quote(str(value), safe="")


def fmt(v: Any, digits: int = 2) -> str:
    """A value as a table cell shows it: – for none, yes/no, 2 decimals, thousands."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def mark_hint(text: str, hint: str) -> Markup:
    """`text` escaped, with every occurrence of `hint` wrapped in <mark class="hint">."""
    if not hint or hint not in text:
        return escape(text)
    parts = [escape(p) for p in text.split(hint)]
    return Markup('<mark class="hint" title="the privileged hint">{}</mark>').format(hint).join(parts)


@functools.lru_cache(maxsize=256)
def highlight(source: str) -> Markup:
    """Python source as HTML with line numbers and token classes (Pygments escapes the text)."""
    from pygments import highlight as pyg
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return Markup(pyg(source, PythonLexer(), HtmlFormatter(linenos="table", cssclass="code",
                                                           lineanchors="L", anchorlinenos=True)))


def pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(cssclass="code").get_style_defs(".code")


def turns(transcript: list[dict[str, Any]], hint: str, hinted: bool) -> list[dict[str, Any]]:
    """The transcript as rows to show: who, what, and the flags of that entry."""
    out = []
    for i, m in enumerate(transcript):
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "?"))
        content = m.get("content")
        text = "" if content is None else str(content)
        flags = [f for f in ("format_error", "truncated") if m.get(f)]
        if m.get("fault"):
            flags.append("fault")
        row: dict[str, Any] = {"i": i, "role": role, "turn": m.get("turn"), "flags": flags,
                               "action": m.get("action"), "reward": m.get("reward"),
                               "terminated": m.get("terminated"),
                               "truncated": m.get("truncated"), "fault": m.get("fault"),
                               "tokens": (m.get("input_tokens"), m.get("output_tokens"))
                               if "input_tokens" in m else None}
        has_hint = hinted and bool(hint) and hint in text and role == "user"
        row["hint_shown"] = has_hint
        row["text"] = mark_hint(text, hint) if has_hint else text
        out.append(row)
    return out


RATES = ("lift", "no_hint", "with_hint")


def sort_rows(rows: list[dict[str, Any]], key: str, descending: bool) -> list[dict[str, Any]]:
    """The environments table sorted by `key`, equal values by env id (both reversed when
    `descending`), rows without a value (never played) last. Rates equal but for rounding (7/10 −
    4/10 and 3/10 − 0 differ in the last bit) sort as equal: `_ties.SHARE_TOLERANCE`."""
    present = [x for x in rows if x[key] is not None]
    missing = [x for x in rows if x[key] is None]
    keys = [x[key] for x in present]
    if key in RATES and present:
        from envduels.analysis._ties import SHARE_TOLERANCE, snap

        keys = [float(v) for v in snap(np.asarray(keys, dtype=float), SHARE_TOLERANCE)]
    at = sorted(range(len(present)), key=lambda k: (keys[k], present[k]["env_id"]), reverse=descending)
    return [present[k] for k in at] + missing
