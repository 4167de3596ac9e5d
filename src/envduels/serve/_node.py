"""One node's `envduels serve` on a Ray cluster (`serve._ray`): `python -m envduels.serve._node`,
started by that node's `ServeNode` actor.

stdin brings the request (8 bytes of length, then a pickle from the command's own process:
the options, the address, the number of server processes); the first stdout line is the
node's URL, once every server process accepts. The server stops, closing its sandboxes, when
stdin ends: the actor stopped it, or died with the node or the command.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import sys
import threading

from envduels.errors import UserError
from envduels.serve.commands import raise_open_files


def main() -> int:
    from envduels.sandbox import check_sandbox
    from envduels.serve._processes import Supervisor
    from envduels.view.commands import allowed_hosts, bind, url_of

    size = int.from_bytes(sys.stdin.buffer.read(8), "big")
    # from the command's own process, through its actor: the pickle is ours
    options, host, port, workers = pickle.loads(sys.stdin.buffer.read(size))

    def stop_at_end_of_stdin() -> None:
        while sys.stdin.buffer.read(65536):
            pass
        os.kill(os.getpid(), signal.SIGTERM)   # as Ctrl-C: the sandboxes are closed

    threading.Thread(target=stop_at_end_of_stdin, name="envduels-stdin", daemon=True).start()
    raise_open_files()
    options = dataclasses.replace(options, allowed_hosts=allowed_hosts(host))
    try:
        for limits in {s.limits for s in options.served.values()}:
            check_sandbox(limits, unsafe_no_sandbox=options.unsafe_no_sandbox)
        held = bind(host, port, reuse_port=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    try:
        return Supervisor(options, held, workers,
                          on_ready=lambda: print(url_of(held), flush=True)).run()
    finally:
        held.close()


if __name__ == "__main__":
    sys.exit(main())
