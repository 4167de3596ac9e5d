"""What the server processes of one `envduels serve --workers N` share: the count of sessions
and connections against one `--max-sessions`, and which process holds an HTTP episode.

Counts: every process writes only its own two counters (sandboxes alive or opening, WebSocket
connections) in one shared array; a claim adds one to its own counter while holding an flock
on the server's lock file and reading every counter, so two processes never both take the last
place. The kernel releases an flock with the process that held it, so a process killed in the
middle of a claim blocks no one; the supervisor zeroes a dead process's counters (its sandboxes
died with it).

Places: an HTTP episode lives in the process its id hashes to (`owner`), whichever process
the kernel handed the request to; a process that gets another's episode forwards the request
over that process's unix socket (`serve._forward`). A WebSocket connection is a session in the
process that accepted it, so it needs no routing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator, MutableSequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path


class Held(IntEnum):
    """What a server process counts against `--max-sessions` (each kind on its own)."""

    SANDBOXES = 0     # sandboxes alive or being opened: WebSocket sessions and HTTP episodes
    CONNECTIONS = 1   # WebSocket connections, reset or not (OpenEnv's sessions)


def owner(episode_id: str, processes: int) -> int:
    """The server process (0 to `processes`-1) that holds the HTTP episode `episode_id`: the
    same in every process and every run (not Python's salted `hash`)."""
    digest = hashlib.blake2b(episode_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % processes


@dataclass
class Place:
    """One server process's place among `count`: its `index`, the shared counts, and where the
    other processes listen for forwarded HTTP requests. `Place.alone(...)` is a server of one
    process (no lock file, no peers), as `build_app` makes by default."""

    index: int
    count: int
    max_sessions: int
    counts: MutableSequence[int]            # 2 × count: (sandboxes, connections) per process
    lock_path: str | None = None
    sockets_dir: str | None = None          # `process-K.sock` for each K; None with one process
    lost: str | None = None                 # why this process's predecessor stopped, if one did
    _lock_fd: int | None = field(default=None, repr=False)

    @classmethod
    def alone(cls, max_sessions: int) -> Place:
        return cls(index=0, count=1, max_sessions=max_sessions, counts=[0, 0])

    def socket_of(self, index: int) -> str:
        """The unix socket on which process `index` takes forwarded requests."""
        assert self.sockets_dir is not None
        return str(Path(self.sockets_dir) / f"process-{index}.sock")

    def owns(self, episode_id: str) -> bool:
        return self.count == 1 or owner(episode_id, self.count) == self.index

    def new_episode_id(self) -> str:
        """A fresh HTTP episode id that this process holds (so that its `/step`s come back
        here from any process): about `count` draws."""
        while True:
            episode_id = uuid.uuid4().hex
            if self.owns(episode_id):
                return episode_id

    def total(self, kind: Held) -> int:
        """What every process holds of `kind` now."""
        return sum(self.counts[2 * k + kind] for k in range(self.count))

    def claim(self, kind: Held) -> bool:
        """Take one place of `kind` for this process, unless every process together holds
        `max_sessions` already (False)."""
        with self._locked():
            if self.total(kind) >= self.max_sessions:
                return False
            self.counts[2 * self.index + kind] += 1
            return True

    def release(self, kind: Held) -> None:
        """Give back one place of `kind` taken by `claim`."""
        with self._locked():
            slot = 2 * self.index + kind
            self.counts[slot] = max(0, self.counts[slot] - 1)

    def held(self, kind: Held) -> int:
        """What this process holds of `kind`."""
        return self.counts[2 * self.index + kind]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.lock_path is None:
            yield
            return
        if self._lock_fd is None:
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)   # held for microseconds: a few reads
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def clear(self, index: int) -> None:
        """Forget what process `index` held (the supervisor, once that process is dead)."""
        with self._locked():
            for kind in Held:
                self.counts[2 * index + kind] = 0

    def __getstate__(self) -> dict[str, object]:
        # a process opens the lock file for itself: descriptors do not travel
        return {**self.__dict__, "_lock_fd": None}
