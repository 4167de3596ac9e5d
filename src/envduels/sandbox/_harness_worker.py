"""A harness worker process: an `InstanceHost` served over the socket its pool passed it.

Started by `HarnessPool` as `python -m envduels.sandbox._harness_worker FD CONFIG`. Each request
`[id, method, args]` runs as its own task on this process's event loop; its reply is
`[id, value]` (none for id 0), or `[id, ["error", text]]` when the host itself broke. The
worker ends its sandboxes and exits when the stream ends (its pool closed, or the caller's
process died), and dies with the caller's process (PR_SET_PDEATHSIG) even if it cannot read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from ._harness import FRAME_MAX_BYTES, encode, read_frame
from ._limits import SandboxLimits
from ._remote import InstanceHost

_PR_SET_PDEATHSIG = 1
_METHODS = ("open", "call", "close", "expect", "prepare", "shutdown", "stats")


class _Worker(InstanceHost):
    def stats(self) -> dict[str, Any]:
        """This process's own CPU (children included) and its open instances: for benches."""
        times = os.times()
        return {"pid": os.getpid(), "instances": self.open_instances,
                "templates": self.uses_templates(),
                "cpu_s": times.user + times.system,
                "children_cpu_s": times.children_user + times.children_system}


async def _serve(fd: int, config: dict[str, Any]) -> None:
    host = _Worker(SandboxLimits(**config["limits"]), bool(config["unsafe"]), **config["pool"])
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd),
                                                        limit=FRAME_MAX_BYTES)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(rid: int, method: str, args: list[Any]) -> None:
        try:
            if method not in _METHODS:
                raise ValueError(f"unknown method {method!r}")
            result = getattr(host, method)(*args)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as err:   # the host broke: the caller raises it as the harness's
            result = ["error", f"{type(err).__name__}: {err}"[:2000]]
        if rid:
            writer.write(encode([rid, result]))

    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, _resolve, stop)
    try:
        while True:
            reading = asyncio.ensure_future(read_frame(reader))
            await asyncio.wait([reading, stop], return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                reading.cancel()
                break
            message = reading.result()
            if message is None:
                break
            rid, method, args = message
            task = loop.create_task(handle(rid, method, args))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await host.shutdown()
        with contextlib.suppress(Exception):
            writer.close()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def main() -> None:
    fd, config = int(sys.argv[1]), json.loads(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != config["parent"]:
        sys.exit(0)   # the caller died before the death signal was set
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the caller's to handle
    logging.basicConfig(level=logging.WARNING, format="envduels: %(message)s")
    asyncio.run(_serve(fd, config))


if __name__ == "__main__":
    main()
