"""Per-sandbox cgroups (v1 memory + pids): the total memory and process count of one sandbox.

rlimits are per process, so four children each under RLIMIT_AS, or a fork bomb spread over
several uids, escape them; a cgroup caps the sandbox as a whole. The v1 `memory` and `pids`
hierarchies are used when this process may create child groups in them (root on most hosts);
otherwise `CgroupRoot.probe()` returns None and the caller logs the missing layer once.
Each harness process owns `envduels-<pid>` directories under its own cgroup and removes them
(and those of dead harnesses) when it can.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from pathlib import Path

_V1 = Path("/sys/fs/cgroup")


def _own_path(controller: str) -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


class SandboxCgroup:
    """The memory and pids groups of one sandbox."""

    def __init__(self, memory: Path, pids: Path, memory_mb: int, max_procs: int) -> None:
        self.memory = memory
        self.pids = pids
        self.memory_mb = memory_mb
        self.max_procs = max_procs

    def enter_thread(self) -> None:
        """Move the calling thread (only it: v1 groups hold threads) into this sandbox's
        groups, so that a process it forks starts inside them. This replaces a preexec_fn,
        which costs a Python-level fork of the whole harness per start."""
        tid = str(threading.get_native_id())
        for group in (self.memory, self.pids):
            _write(group / "tasks", tid)

    def oom_eventfd(self) -> int | None:
        """An eventfd that becomes readable when the memory group runs out of memory."""
        try:
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except (OSError, AttributeError):
            return None
        try:
            ofd = os.open(self.memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _write(self.memory / "cgroup.event_control", f"{efd} {ofd}")
            finally:
                os.close(ofd)
        except OSError:
            os.close(efd)
            return None
        return efd

    def pids_inside(self) -> list[int]:
        pids: set[int] = set()
        for group in (self.pids, self.memory):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        return sorted(pids)

    def kill_all(self) -> None:
        for _ in range(3):
            pids = self.pids_inside()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def oom_kills(self) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def remove(self) -> bool:
        """Delete both groups; False while a process (or an unreaped zombie) is still inside."""
        done = True
        for group in (self.memory, self.pids):
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


class CgroupRoot:
    """The directories under which this harness creates one group per sandbox."""

    def __init__(self, memory: Path, pids: Path) -> None:
        self.memory = memory
        self.pids = pids
        self._home = (memory.parent, pids.parent)   # this harness's own groups
        self._names = itertools.count()
        self._leftovers: list[SandboxCgroup] = []

    @classmethod
    def probe(cls) -> tuple[CgroupRoot | None, str]:
        """The usable root, or None and the reason in a few words."""
        mem_own, pids_own = _own_path("memory"), _own_path("pids")
        mem_mount, pids_mount = _V1 / "memory", _V1 / "pids"
        if mem_own is None or pids_own is None or not (mem_mount / "cgroup.procs").exists() \
                or not (pids_mount / "cgroup.procs").exists():
            return None, "no cgroup v1 memory and pids hierarchies"
        tag = f"envduels-{os.getpid()}"
        memory = mem_mount / mem_own.lstrip("/") / tag
        pids = pids_mount / pids_own.lstrip("/") / tag
        try:
            memory.mkdir(exist_ok=True)
            pids.mkdir(exist_ok=True)
        except OSError as exc:
            return None, f"cgroups not writable ({exc.strerror})"
        root = cls(memory, pids)
        root._remove_stale()
        return root, ""

    def _remove_stale(self) -> None:
        """Empty directories left by harness processes that were killed."""
        for parent in (self.memory.parent, self.pids.parent):
            with contextlib.suppress(OSError):
                for entry in parent.iterdir():
                    if not entry.name.startswith("envduels-") or entry == self.memory \
                            or entry == self.pids:
                        continue
                    pid = entry.name.removeprefix("envduels-")
                    if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                        for child in entry.iterdir():
                            if child.is_dir():
                                with contextlib.suppress(OSError):
                                    child.rmdir()
                        with contextlib.suppress(OSError):
                            entry.rmdir()

    def create(self, memory_mb: int, max_procs: int) -> SandboxCgroup:
        name = f"s{next(self._names)}"
        group = SandboxCgroup(self.memory / name, self.pids / name, memory_mb, max_procs)
        group.memory.mkdir()
        group.pids.mkdir()
        limit = str(memory_mb << 20)
        _write(group.memory / "memory.limit_in_bytes", limit)
        with contextlib.suppress(OSError):  # absent without swap accounting
            _write(group.memory / "memory.memsw.limit_in_bytes", limit)
        _write(group.pids / "pids.max", str(max_procs))
        return group

    def leave_thread(self) -> None:
        """Move the calling thread back into the harness's own groups."""
        tid = str(threading.get_native_id())
        for home in self._home:
            _write(home / "tasks", tid)

    def discard(self, group: SandboxCgroup) -> None:
        """Remove `group` now or, while zombies linger, at a later call."""
        self._leftovers = [g for g in self._leftovers if not g.remove()]
        if not group.remove():
            self._leftovers.append(group)

    def close(self) -> None:
        self._leftovers = [g for g in self._leftovers if not g.remove()]
        for top in (self.memory, self.pids):
            with contextlib.suppress(OSError):
                top.rmdir()
