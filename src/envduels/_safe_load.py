"""Reading a file a user handed us without trusting it: one place for every loader.

A config, an export folder's manifest, hints and sources, an episodes file or a gains CSV may be
hostile or broken: a FIFO that never ends, a device, a 64 GiB sparse file, JSON nested 100,000
deep (RecursionError in `json.loads`), a 5,000-digit integer (ValueError from Python's
int-to-string limit). Every loader reads through here, so each of these is one `UserError` line
(exit 2), never a traceback or an exhausted memory:

- the file is opened without blocking (a FIFO opens at once) and `fstat`ed before any byte is
  read: anything but a regular file, or a file over the caller's byte cap, is refused, and no
  more than the cap is ever read (a file that grows while read is refused too);
- JSON and YAML are refused beyond `MAX_NESTING` levels of nesting and integers beyond
  `MAX_INT_DIGITS` digits, checked before the value is built; YAML anchors may not expand to
  more than `MAX_YAML_VALUES` values (the "billion laughs");
- whatever still escapes the parser (RecursionError, ValueError, MemoryError) becomes one line.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from envduels.errors import UserError

MAX_NESTING = 64
"""Deepest nesting of lists and objects a loaded JSON or YAML value may have (an honest config
or manifest nests four or five levels)."""
MAX_INT_DIGITS = 100
"""Most digits of an integer in a loaded JSON or YAML file (seeds are 63-bit: 19 digits)."""
MAX_YAML_VALUES = 100_000
"""Most values a YAML file may hold once its anchors and aliases are expanded."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


@contextmanager
def open_capped(path: str | Path, max_bytes: int, what: str,
                missing: str | None = None) -> Iterator[IO[bytes]]:
    """`path` opened for reading as bytes, once `fstat` has shown a regular file of at most
    `max_bytes`. `UserError` naming `what` and the path when it is missing (`missing`, if
    given, is the whole message then), unreadable, not a regular file or too large. The caller
    must not read past `max_bytes` (`read_capped` checks that for it)."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of hanging
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UserError(missing or f"{what} {path} does not exist: check the path") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a folder, not a file: give the file's path") from None
    except (OSError, ValueError) as err:   # ValueError: a NUL in the path
        why = getattr(err, "strerror", None) or type(err).__name__
        raise UserError(f"{what} {path} cannot be read ({why}): check the path and its "
                        "permissions") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file: give "
                            "the path of an ordinary file")
        if st.st_size > max_bytes:
            raise UserError(f"{what} {path} is {_mib(st.st_size)}, over the limit of "
                            f"{_mib(max_bytes)}: check that it is the right file")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_capped(path: str | Path, max_bytes: int, what: str, missing: str | None = None) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes` (see `open_capped`)."""
    with open_capped(path, max_bytes, what, missing) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as err:
            raise UserError(f"{what} {path} cannot be read ({err.strerror}): check the "
                            "file") from None
    if len(data) > max_bytes:   # it grew after the fstat
        raise UserError(f"{what} {path} is over the limit of {_mib(max_bytes)}: check that "
                        "it is the right file")
    return data


def read_text_capped(path: str | Path, max_bytes: int, what: str,
                     missing: str | None = None, *, encoding: str = "utf-8") -> str:
    """`read_capped` decoded (`encoding`); `UserError` when it is not UTF-8 text."""
    try:
        return read_capped(path, max_bytes, what, missing).decode(encoding)
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text: save it as UTF-8") from None


# -- JSON ----------------------------------------------------------------------------------

# Linear time on hostile input: escapes go first, so a string is then a plain "[^"]*"
_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_BRACKETS = str.maketrans({"[": "\x01", "{": "\x01", "]": "\x02", "}": "\x02"})
_OTHER = re.compile(r"[^\x01\x02]+")


def json_depth_over(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text opens more than `limit` nested brackets, found without recursion:
    strings are blanked, brackets become +1/-1 and the running sum is bounded."""
    if text.count("[") + text.count("{") <= limit:
        return False   # too few brackets to nest deeper: the usual case, one C scan
    steps = _OTHER.sub("", _STRING.sub("", _ESCAPE.sub("_", text)).translate(_BRACKETS))
    signed = array("b", steps.encode("ascii").replace(b"\x02", b"\xff"))
    return max(itertools.accumulate(signed), default=0) > limit


class _TooManyDigits(ValueError):
    pass


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooManyDigits(digits)
    return int(digits)


def parse_json(text: str, where: str, fix: str = "fix it") -> Any:
    """`text` parsed as JSON, with `where` (the file, or "FILE line N") naming it in the
    one-line `UserError` on invalid JSON (ending in `fix`), nesting past `MAX_NESTING`, an
    integer past `MAX_INT_DIGITS` digits, or a value too large for memory."""
    if json_depth_over(text):
        raise UserError(f"{where}: nested more than {MAX_NESTING} levels deep: no honest file "
                        "nests so deep; check that it is the right file")
    try:
        return json.loads(text, parse_int=_int)
    except _TooManyDigits as err:
        raise UserError(f"{where}: an integer of {len(str(err).lstrip('-')):,} digits, over the "
                        f"{MAX_INT_DIGITS} allowed: check that it is the right file") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not valid JSON ({err.msg} at line {err.lineno} column "
                        f"{err.colno}); {fix}") from None
    except (RecursionError, ValueError, MemoryError) as err:
        raise UserError(f"{where}: cannot be read as JSON ({type(err).__name__}): check that "
                        "it is the right file") from None


def load_json_capped(path: str | Path, max_bytes: int, what: str,
                     missing: str | None = None) -> Any:
    """The JSON value of the file `path` (at most `max_bytes`, UTF-8), checked as by
    `parse_json`; every problem is one `UserError` line naming `what` and the path."""
    return parse_json(read_text_capped(path, max_bytes, what, missing), f"{what} {path}")


# -- YAML ----------------------------------------------------------------------------------

def _check_yaml_events(text: str, where: str) -> None:
    """Refuse, from PyYAML's event stream (its parser keeps a stack, it does not recurse),
    nesting past `MAX_NESTING`, a plain integer past `MAX_INT_DIGITS` digits and anchors that
    expand past `MAX_YAML_VALUES` values; before any value is built."""
    import yaml

    resolver = yaml.resolver.Resolver()
    sizes: dict[str, int] = {}              # anchor -> values it stands for once expanded
    # per open collection (the document first): its anchor, and the values it holds so far
    anchors: list[str | None] = [None]
    counts: list[int] = [0]
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            anchors.append(event.anchor)
            counts.append(1)
            if len(counts) - 1 > MAX_NESTING:
                raise UserError(f"{where}: nested more than {MAX_NESTING} levels deep: no honest "
                                "config nests so deep; check that it is the right file")
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, n = anchors.pop(), counts.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, n = event.anchor, 1
            if (event.implicit[0] and len(event.value) > MAX_INT_DIGITS and resolver.resolve(
                    yaml.ScalarNode, event.value, event.implicit) == "tag:yaml.org,2002:int"):
                raise UserError(f"{where}: an integer of {len(event.value):,} characters, over "
                                f"the {MAX_INT_DIGITS} allowed: check the value")
        elif isinstance(event, yaml.AliasEvent):
            anchor, n = None, sizes.get(event.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        counts[-1] += n
        if counts[0] > MAX_YAML_VALUES or n > MAX_YAML_VALUES:
            raise UserError(f"{where}: its anchors and aliases expand to more than "
                            f"{MAX_YAML_VALUES:,} values: write the values out, or use fewer "
                            "aliases")


def parse_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML (`yaml.safe_load`) after `_check_yaml_events`. `yaml.YAMLError`
    (a syntax error) is left to the caller, which knows how to word it; RecursionError,
    ValueError and MemoryError become one `UserError` line."""
    import yaml

    try:
        _check_yaml_events(text, where)
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise
    except (RecursionError, ValueError, MemoryError) as err:
        raise UserError(f"{where}: cannot be read as YAML ({type(err).__name__}): check that "
                        "it is the right file") from None
