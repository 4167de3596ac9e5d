"""`envduels play`: one episode in the terminal, by a person (`--human`) or a configured player.

The episode is the engine's (`play_episode`), so its rules are the duel's own protocol
(`envduels.duel.protocol`), shared with `run`, the Gym adapter and `envduels serve`.

Everything an environment or a model prints is untrusted: `_printer` shows it as plain text
with control and format characters removed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.text import Text

from envduels._text import printable
from envduels.duel.faults import ENVIRONMENT_FAULT
from envduels.duel.protocol import Entry
from envduels.engine.solving import Event
from envduels.players import ChatResult

if TYPE_CHECKING:
    pass


class StdinClosed(BaseException):
    """The person at `play --human` closed standard input (Ctrl-D): the episode stops.

    A BaseException, like KeyboardInterrupt: the person ended it, so it is no solver failure
    for the episode's last-resort guard (`except Exception`) to record as an `error`."""


def _wake(ready: asyncio.Future[None]) -> None:
    """The reader callback: the line `HumanSolver` waits on is ready (once)."""
    if not ready.done():
        ready.set_result(None)


class HumanSolver:
    """A person at the terminal: each turn reads one line; `\\boxed{}` is added when missing.

    A line is read from the file descriptor as the event loop sees it become readable, not by
    a blocking `readline` in a thread: Ctrl-C then ends `play` at once (a thread blocked in
    `readline` kept the process alive until Enter). An in-memory stream (tests) or a regular
    file, which never blocks, is read directly. End of input raises `StdinClosed`.
    """

    def __init__(self, stdin: TextIO | None = None) -> None:
        self._stdin = stdin
        self._pending = b""

    async def _readline(self) -> str:
        stream = self._stdin if self._stdin is not None else sys.stdin
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            return stream.readline()
        loop = asyncio.get_running_loop()
        while b"\n" not in self._pending:
            ready: asyncio.Future[None] = loop.create_future()
            try:
                loop.add_reader(fd, _wake, ready)
            except (OSError, ValueError, NotImplementedError):   # a regular file: never blocks
                chunk = os.read(fd, 65536)
            else:
                try:
                    await ready
                finally:
                    loop.remove_reader(fd)
                chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._pending += chunk
        line, sep, self._pending = self._pending.partition(b"\n")
        return (line + sep).decode("utf-8", "replace")

    async def chat(self, messages: list[dict[str, str]], **_: object) -> ChatResult:
        """The person's next line as a reply (free, never cached: no tokens, no cost)."""
        print("your action> ", end="", flush=True)
        line = await self._readline()
        if not line:
            raise StdinClosed
        action = line.strip()
        if "\\boxed{" not in action:
            action = f"\\boxed{{{action}}}"
        return ChatResult(text=action, finish_reason="stop")

    async def aclose(self) -> None:
        """Nothing to release (a `Player` closes its connections)."""


def _printer(console: Console) -> Event:
    """Print transcript entries. Observations, environment errors and model replies are
    untrusted: control and format characters (ESC sequences that clear the screen, retitle the
    window or write the clipboard; bidi overrides and zero-width characters that disguise text)
    are removed, and the text is printed as a plain `Text`, so neither Rich markup (`[bold]`)
    nor emoji codes (`:smile:`) in it take effect: it cannot forge a transcript line."""
    def line(label: str, style: str, text: object = "", text_style: str = "") -> None:
        console.print(Text.assemble((label, style), (printable(str(text)), text_style)))

    def show(entry: Entry) -> None:
        role = entry.get("role")
        if role == "system":
            line("system: ", "dim", entry["content"], "dim")
        elif role == "user":
            line("environment -> ", "bold cyan", entry["content"])
        elif role == "assistant":
            line("solver -> ", "bold green", entry["content"])
        elif role == "env":
            if "fault" in entry:
                line(f"{ENVIRONMENT_FAULT}: ", "red", entry["fault"], "red")
            else:
                line("step ", "dim", f"{entry['action']}: reward {entry['reward']:g}, terminated "
                     f"{entry['terminated']}, truncated {entry['truncated']}", "dim")
        elif role == "outcome":
            line("", "", entry["content"], "bold")
    return show
