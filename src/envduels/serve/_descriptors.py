"""A server process's descriptors: whether one more session's sandbox fits under its limit with
RESERVE descriptors left over.

A session costs descriptors (its socket, its sandbox's pipes and process handles), and a
process out of them fails wherever the next one is needed: mostly at `accept`, where asyncio
logs a traceback and the client's handshake times out with no word of why. Keeping RESERVE
free for accepting and answering makes the refusal come earlier and say what ran out (503, the
harness's capacity). Counting the open descriptors (/proc/self/fd) costs about 2 µs each, so
it is done only when an estimate says the limit may be near: after a count, each open is
assumed to take PER_OPEN more until the next.
"""

from __future__ import annotations

import os
import resource

RESERVE = 64     # kept free: connections to accept and answer, forwarded requests, logs
PER_OPEN = 16    # assumed taken by each sandbox opened since the last count (about 9 measured)


class Descriptors:
    """This process's descriptor room for sandboxes. Not thread-safe: the hub's event loop."""

    def __init__(self) -> None:
        self.limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.in_use = 0      # at the last count
        self._since = -1     # opens since the last count (-1: never counted)

    def room(self) -> bool:
        """Whether one more sandbox fits with RESERVE descriptors to spare; counts them when
        the estimate is near the limit."""
        if self.limit == resource.RLIM_INFINITY:
            return True
        if self._since < 0 or self._estimate() < RESERVE + PER_OPEN:
            self.in_use = len(os.listdir("/proc/self/fd"))
            self._since = 0
        if self.limit - self.in_use < RESERVE + PER_OPEN:
            return False
        self._since += 1
        return True

    def _estimate(self) -> int:
        return self.limit - self.in_use - self._since * PER_OPEN

    def why(self) -> str:
        """What ran out, in the words of a refusal."""
        return (f"{self.in_use} of this server process's {self.limit} descriptors are in use "
                f"and {RESERVE} are kept to accept connections (raise `ulimit -n`, or run "
                "more --workers)")
