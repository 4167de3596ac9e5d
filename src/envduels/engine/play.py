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
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from rich.console import Console
from rich.text import Text

from envduels._text import printable
from envduels.config import load_config
from envduels.duel.outcomes import Outcome
from envduels.duel.protocol import Entry, turn_cap
from envduels.engine.checks import check_reachable
from envduels.engine.solving import EpisodeResult, EpisodeTask, Event, play_episode
from envduels.envs import resolve
from envduels.errors import UserError
from envduels.players import ChatResult

if TYPE_CHECKING:
    from envduels.players import Player


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
                line("environment fault: ", "red", entry["fault"], "red")
            else:
                line("step ", "dim", f"{entry['action']}: reward {entry['reward']:g}, terminated "
                     f"{entry['terminated']}, truncated {entry['truncated']}", "dim")
        elif role == "outcome":
            line("", "", entry["content"], "bold")
    return show


def _exit_at_once(code: int) -> NoReturn:
    """End the process now: atexit handlers run (they remove the sandbox's cgroups) and output
    is flushed, but the interpreter's teardown of every loaded module is skipped. That teardown
    is pure CPU, over a second on a loaded machine, and Ctrl-C must end `play` within one."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def play_command(path: str, *, config: Path | None, player: str | None, human: bool, hint: bool,
                 seed: int, unsafe_no_sandbox: bool, workers: int | None = None) -> int:
    """Play one episode in the terminal; exit 0 on success, 1 otherwise (also when the person
    at `--human` closes standard input); Ctrl-C ends the process at once with exit 130."""
    from envduels.sandbox import SandboxLimits, sandbox_pool

    if human == (player is not None) or (player is not None and config is None):
        raise UserError("choose who plays: --human, or --config CONFIG --player NAME")
    spec = resolve(path).one()
    if hint and not spec.hint:
        raise UserError(f"{path} has no hint to show; play without --hint")
    max_turns = turn_cap(spec.max_turns)
    limits = SandboxLimits()
    solver: HumanSolver | Player
    if human or player is None or config is None:   # checked above: --human, or both given
        solver, name = HumanSolver(), "human"
    else:
        from envduels.players import build_players

        cfg = load_config(config)
        cfg.player(player)
        check_reachable(cfg)
        solver, name = build_players(cfg, cache=None, run_seed=cfg.seed)[player], player
        max_turns = turn_cap(spec.max_turns, cfg.tournament.max_turns)
        limits = SandboxLimits.from_config(cfg.sandbox)
    task = EpisodeTask(key=f"play:{spec.id}:{seed}:{int(hint)}", env=spec, solver=str(name),
                       seed=seed, trial=0, hinted=hint, max_turns=max_turns)
    console = Console(highlight=False, emoji=False, markup=False)

    async def main() -> EpisodeResult:
        # one episode lives in one worker: more would start processes for nothing
        pool = sandbox_pool(limits, workers=1 if workers is None else workers,
                            unsafe_no_sandbox=unsafe_no_sandbox, warm=0)
        try:
            return await play_episode(task, solver, lambda: pool.open(
                spec.source, class_name=spec.class_name, max_turns=spec.max_turns),
                on_event=_printer(console))
        finally:
            await solver.aclose()
            await pool.aclose()

    try:
        result = asyncio.run(main())
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        _exit_at_once(130)
    except StdinClosed:
        print("\nyou closed standard input; episode stopped", file=sys.stderr)
        return 1
    return 0 if result.outcome == Outcome.SUCCESS else 1
