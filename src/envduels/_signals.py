"""SIGTERM treated as Ctrl-C by the commands that run for long (`view`, `run`).

Python's default for SIGTERM ends the process at once: no `finally` block runs, so the child
processes a command started (the viewer's analysis worker and multiprocessing's resource
tracker, a run's sandboxes and local model servers) live on as orphans. A supervisor, a
container runtime or `kill` stops a process with SIGTERM, so it must clean up as Ctrl-C does.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


def _as_interrupt(signum: int, frame: FrameType | None) -> None:
    # Whatever Ctrl-C does at this moment: KeyboardInterrupt by default, inside asyncio.run
    # its runner's handler (which cancels the main task, so its `finally` blocks run)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """For the block, SIGTERM does what SIGINT (Ctrl-C) does; the previous handler comes back
    afterwards. Outside the main thread (where no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _as_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
