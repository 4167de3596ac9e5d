"""Untrusted text made safe to keep and to show.

Environment code and model servers are untrusted: their text may hold lone surrogates (which no
UTF-8 encoder, JSON file or SQLite column accepts) and terminal control sequences (an ESC
sequence can clear the screen, retitle the window or write the clipboard). Two helpers, used at
the boundaries where such text enters (`valid_text`) or reaches a terminal (`printable`).
"""

from __future__ import annotations

import re

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


def printable(text: str) -> str:
    """`text` safe to print on a terminal: C0/C1 control characters and DEL removed (\\n and \\t
    kept), lone surrogates replaced by U+FFFD. Ordinary text comes back unchanged."""
    return _CONTROL.sub("", valid_text(text))
