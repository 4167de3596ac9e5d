"""The embedded model's server process through the prebuilt `xllamacpp` binding.

Run as a script (`python PATH/_xllamacpp_server.py --model FILE --port N --n_ctx N
--threads N --threads-batch N`), never imported by envduels: it starts llama.cpp's own OpenAI-compatible HTTP
server on 127.0.0.1 inside this process and waits until it is told to stop (SIGTERM, SIGINT)
or its parent dies (`_local` arranges that). It imports nothing from envduels, so that the
model's process starts with the binding alone.

The sampling defaults match `llama_cpp.server`'s (the binding envduels used before; its
requests default to repeat_penalty 1.1 over the last 64 tokens, where llama.cpp's server
defaults to no repeat penalty): a request that sets no such parameter samples the same way
under either binding. Temperature, top-p, top-k, min-p and the seed are the request's.
"""

from __future__ import annotations

import argparse
import signal
import sys

# llama_cpp.server's defaults for what envduels' requests leave unset.
REPEAT_PENALTY = 1.1
REPEAT_LAST_N = 64
# llama.cpp log verbosity: 2 prints its warnings and errors (the reason a load failed) and no
# line per request (3, the default, writes about ten per chat completion).
LOG_VERBOSITY = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n_ctx", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--threads-batch", type=int, required=True)
    args = parser.parse_args(argv)

    try:
        import xllamacpp  # here, so that a binary that cannot load here says why in one line
    except ImportError as err:
        print(f"xllamacpp cannot be imported: {err}", file=sys.stderr, flush=True)
        return 1

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = 1  # the player sends one request at a time (ModelServer.slot)
    # Set explicitly: left at its default on a busy 2-core machine it crawled (0.68 tokens/s).
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads_batch
    params.sampling.penalty_repeat = REPEAT_PENALTY
    params.sampling.penalty_last_n = REPEAT_LAST_N
    params.verbosity = LOG_VERBOSITY
    params.ui = False
    try:
        server = xllamacpp.Server(params)  # loads the model, then listens in its own threads
    except RuntimeError as err:  # llama.cpp has logged why (its "E" lines) just before
        print(f"xllamacpp: {err}", file=sys.stderr, flush=True)
        return 1
    print(f"envduels model server: listening on {server.listening_address}", flush=True)
    stop = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stop:
        signal.pause()
    del server  # stops the HTTP server and frees the model before the interpreter exits
    return 0


if __name__ == "__main__":
    sys.exit(main())
