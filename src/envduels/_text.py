"""Untrusted text made safe to keep and to show.

Environment code and model servers are untrusted: their text may hold lone surrogates (which no
UTF-8 encoder, JSON file or SQLite column accepts), terminal control sequences (an ESC
sequence can clear the screen, retitle the window or write the clipboard) and Unicode format
characters (a bidi override shows "exe.txt" for "txt.exe"). Two helpers, used at
the boundaries where such text enters (`valid_text`) or reaches a terminal (`printable`); and
re-exported from the duel's vocabulary: `last_boxed` (`duel.protocol`, where the episode rules
live) and `one_line` (`duel.faults`, where every reason is made one line: the one "cut to one
line" helper).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

from envduels.duel.faults import one_line  # noqa: F401 (re-exported)
from envduels.duel.protocol import ACTION_SEARCH_MAX_CHARS, last_boxed  # noqa: F401 (re-exported)

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls except \t and \n, DEL, and the C1 controls (CSI, OSC, ... as single code points).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8.

    In a Python str a surrogate code point is always unpaired (a valid pair is one astral
    character), so ordinary text comes back unchanged, the same object.
    """
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


@functools.cache
def _format_chars() -> re.Pattern[str]:
    """Every Unicode format character (category Cf) of this Python's Unicode database: bidi
    overrides and isolates (U+202A-202E, U+2066-2069) reorder what a terminal shows, zero-width
    ones (U+200B-200D, U+2060, U+FEFF) hide text. Built on first use (~0.2 s), not at import."""
    chars = "".join(chr(c) for c in range(sys.maxunicode + 1)
                    if unicodedata.category(chr(c)) == "Cf")
    return re.compile(f"[{re.escape(chars)}]")


def printable(text: str) -> str:
    """`text` safe to print on a terminal: C0/C1 control characters and DEL removed (\\n and \\t
    kept), Unicode format characters (category Cf: bidi overrides, zero-width characters)
    removed, lone surrogates replaced by U+FFFD. Ordinary text comes back unchanged.

    It does not neutralise Rich markup or emoji codes: print the result as a `rich.text.Text`
    (or with markup and emoji off), never inside a markup string."""
    return _format_chars().sub("", _CONTROL.sub("", valid_text(text)))


def plural(n: int, word: str, many: str | None = None) -> str:
    """`n` and `word` agreeing in number: plural(1, "seed") -> "1 seed", plural(2, "seed") ->
    "2 seeds", plural(3, "retry", "retries") -> "3 retries"."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
