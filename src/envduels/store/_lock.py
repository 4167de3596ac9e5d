"""The run lock: one `envduels run` per run folder, and how a reader tells one is writing."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envduels.errors import UserError

LOCK_NAME = "run.lock"

LOCK_CHECK_S = 1.0
"""How often a live reader following a run asks whether the run still holds its lock."""


@contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold `RUN_DIR/run.lock` exclusively (flock) while the block runs: one `envduels run`
    per run folder, or both would play and pay for the same work. A second one fails at once
    with a UserError naming the holder's pid. Readers (status, report) take no lock. The lock
    goes with the process, however it ends; the file stays.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UserError(f"cannot create the run lock {path} ({err.strerror or err}); choose a "
                        "writable output_dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"pid {holder}" if holder.isdigit() else "another process"
            raise UserError(f"{run_dir} is in use by another envduels run ({who}); wait for it "
                            "to finish or stop it, or set output_dir to another folder") from None
        # one write of a fixed width: a reader never sees the file empty or half the old pid
        os.pwrite(fd, f"{os.getpid():>12}\n".encode(), 0)
        os.ftruncate(fd, 13)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)   # releases the lock


def run_lock_held(run_dir: str | Path) -> bool:
    """Whether a process holds `RUN_DIR/run.lock` now (an `envduels run` is writing), read
    from /proc/locks without taking the lock: taking it, even shared and for an instant, could
    make a run starting in that instant refuse the folder. Matched by inode number alone (a
    file system may show another device number there): a false match only makes a reader read
    the log too. True when it cannot tell (no /proc/locks) and a lock file is there."""
    try:
        inode = os.stat(Path(run_dir) / LOCK_NAME).st_ino
    except OSError:
        return False   # no lock file: no `envduels run` has run here
    try:
        with open("/proc/locks", "rb") as fh:
            table = fh.read(1 << 24)
    except OSError:
        return True
    held = re.findall(rb"\bFLOCK\s+\S+\s+WRITE\s+\S+\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s", table)
    return str(inode).encode() in held
