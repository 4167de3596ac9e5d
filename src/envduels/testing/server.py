"""Run the scripted server as a process: prints its base URL on the first stdout line.

    python -m envduels.testing.server --port 0 --latency-ms 100 [--script FILE.py] [--faults 429,500]

A script file defines ``respond(model, messages) -> str``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import runpy
import sys

from envduels.testing._server import ScriptedServer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envduels.testing.server", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--script", help="a Python file defining respond(model, messages) -> str")
    ap.add_argument("--faults", default="", help="comma-separated faults served first, in order")
    ap.add_argument("--api-key", default=None, help="require this bearer key")
    args = ap.parse_args(argv)
    responder = None
    if args.script:
        respond = runpy.run_path(args.script).get("respond")
        if not callable(respond):
            print(f"error: {args.script} defines no respond(model, messages)", file=sys.stderr)
            return 2
        responder = respond
    server = ScriptedServer(responder, latency_s=args.latency_ms / 1000.0,
                            faults=[f for f in args.faults.split(",") if f],
                            api_key=args.api_key, port=args.port, record=False)

    async def serve() -> None:
        task = asyncio.ensure_future(server.serve_forever())
        while not server.base_url and not task.done():
            await asyncio.sleep(0.001)
        if task.done():
            await task
        print(server.base_url, flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
