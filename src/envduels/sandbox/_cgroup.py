"""Per-sandbox cgroups (v1): the total memory and process count of one sandbox, its CPU quota,
and the freezer that stops it between calls.

rlimits are per process, so four children each under RLIMIT_AS, or a fork bomb spread over
several uids, escape them; a cgroup caps the sandbox as a whole. The v1 `memory` and `pids`
hierarchies are used when this process may create child groups in them (root on most hosts);
otherwise `CgroupRoot.probe()` returns None and the caller logs the missing layer once. The
v1 `cpu` hierarchy (quota) and the cgroup v2 freezer (`cgroup.freeze`, no controller needed)
are used when writable too; each one missing is reported (`CgroupRoot.missing`) and the other
limits stay. The v1 `freezer` controller is deliberately not used: a task frozen there ignores
SIGKILL until it is thawed, so a sandbox frozen when its harness is killed (bwrap's
--die-with-parent sends SIGKILL) would stay behind forever; a v2-frozen task dies at once.
Each harness process owns `envduels-<pid>` directories under its own cgroup and removes them
(and those of dead harnesses) when it can.
"""

from __future__ import annotations

import contextlib
import os
import secrets
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


def _write(path: Path | str, value: str) -> None:
    # open, write, close: a text-mode open() adds an fstat, an ioctl and an lseek, and its
    # buffering objects, to each of the dozen writes per sandbox
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class SandboxCgroup:
    """The memory and pids groups of one sandbox, and its freezer and cpu groups if any."""

    def __init__(self, memory: Path, pids: Path, memory_mb: int, max_procs: int,
                 freezer: Path | None = None, cpu: Path | None = None) -> None:
        self.memory = memory
        self.pids = pids
        self.memory_mb = memory_mb
        self.max_procs = max_procs
        self.freezer = freezer   # a cgroup v2 folder: processes are moved in by `adopt`
        # (a forked instance's init joins all its groups itself: _zygote._init)
        self.cpu = cpu
        self._freeze_fd: int | None = None
        self.frozen = False
        self.freezable = False   # set by `adopt` (or by a forked instance that joined it)

    def adopt(self, pids: list[int]) -> bool:
        """Move `pids` (the sandbox's processes before any environment code ran) into its
        freezer group; what they fork later starts there. v2 groups hold whole processes, so
        the launching thread cannot enter it the way it enters the v1 groups. False (and no
        freezing for this sandbox) if it cannot."""
        if self.freezer is None:
            return False
        try:
            for pid in pids:
                _write(self.freezer / "cgroup.procs", str(pid))
        except OSError:
            return False
        self.freezable = True
        return True

    @property
    def groups(self) -> list[Path]:
        return [g for g in (self.memory, self.pids, self.freezer, self.cpu) if g is not None]

    def _state_fd(self) -> int | None:
        if self._freeze_fd is None and self.freezer is not None and self.freezable:
            # kept open: one write per freeze or thaw, no open/close on the call path
            with contextlib.suppress(OSError):
                self._freeze_fd = os.open(self.freezer / "cgroup.freeze",
                                          os.O_WRONLY | os.O_CLOEXEC)
        return self._freeze_fd

    def freeze(self) -> bool:
        """Stop every process of the sandbox (they keep their state and resume on `thaw`).
        The kernel completes the freeze asynchronously, within microseconds; False if the
        sandbox has no freezer."""
        fd = self._state_fd()
        if fd is None:
            return False
        try:
            os.write(fd, b"1")
        except OSError:
            return False
        self.frozen = True
        return True

    def thaw(self) -> None:
        """Let the sandbox run again."""
        if not self.frozen:
            return
        fd = self._state_fd()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"0")
        self.frozen = False

    def enter_thread(self) -> None:
        """Move the calling thread (only it: v1 groups hold threads) into this sandbox's
        groups, so that a process it forks starts inside them. This replaces a preexec_fn,
        which costs a Python-level fork of the whole harness per start."""
        tid = str(threading.get_native_id())
        for group in (self.memory, self.pids, self.cpu):
            if group is not None:
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
        for group in self.groups:
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
            self.thaw()   # not needed for v2 (a frozen task dies of SIGKILL), but tidy

    def oom_kills(self) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by every process that joined this sandbox's v2 group (its
        `cpu.stat`, which the kernel keeps for every v2 group, controller or not, and which
        still counts processes that exited); None where the sandbox has no v2 group."""
        if self.freezer is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            for line in (self.freezer / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        return None

    def pids_limit_hits(self) -> int:
        """How often a fork in the sandbox was refused by `pids.max`."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.pids / "pids.events").read_text().splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
        return 0

    def remove(self) -> bool:
        """Delete both groups; False while a process (or an unreaped zombie) is still inside."""
        done = True
        if self._freeze_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._freeze_fd)
            self._freeze_fd = None
        for group in self.groups:
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _v2_freezer(tag: str) -> tuple[Path | None, str]:
    """This harness's `tag` folder in the cgroup v2 hierarchy, if it has `cgroup.freeze`."""
    mount = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                mount = Path(left.split()[4])
                break
    own = _own_v2_path()
    if mount is None or own is None:
        return None, "no cgroup v2 hierarchy"
    folder = mount / own.lstrip("/") / tag
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"cgroup v2 not writable ({exc.strerror})"
    if not (folder / "cgroup.freeze").exists():
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None, "no cgroup.freeze (kernel older than 5.2)"
    return folder, ""


def _own_v2_path() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    return None


def _optional(controller: str, probe_file: str, tag: str) -> tuple[Path | None, str]:
    """This harness's `tag` folder in the v1 `controller` hierarchy, or None and why not."""
    own, mount = _own_path(controller), _V1 / controller
    if own is None or not (mount / "cgroup.procs").exists():
        return None, f"no cgroup v1 {controller} hierarchy"
    folder = mount / own.lstrip("/") / tag
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"cgroup {controller} not writable ({exc.strerror})"
    if not (folder / probe_file).exists():
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None, f"no {probe_file} in the {controller} hierarchy"
    return folder, ""


class CgroupRoot:
    """The directories under which this harness creates one group per sandbox."""

    def __init__(self, memory: Path, pids: Path, freezer: Path | None = None,
                 cpu: Path | None = None) -> None:
        self.memory = memory
        self.pids = pids
        self.freezer = freezer
        self.cpu = cpu
        self.missing: list[str] = []   # optional layers this host lacks, in a few words each
        # this harness's own groups
        self._home = tuple(g.parent for g in (memory, pids, cpu) if g is not None)
        self._stale_parents = self._home
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
        root.freezer, why = _v2_freezer(tag)
        if why:
            root.missing.append(f"no freezer between calls ({why})")
        root.cpu, why = _optional("cpu", "cpu.cfs_quota_us", tag)
        if why:
            root.missing.append(f"no CPU quota ({why})")
        root._home = tuple(g.parent for g in (root.memory, root.pids, root.cpu)
                           if g is not None)
        root._stale_parents = (*root._home, *([root.freezer.parent] if root.freezer else []))
        root._remove_stale()
        return root, ""

    def _remove_stale(self) -> None:
        """Empty directories left by harness processes that were killed."""
        for parent in self._stale_parents:
            with contextlib.suppress(OSError):
                for entry in parent.iterdir():
                    if not entry.name.startswith("envduels-") or entry.name == self.memory.name:
                        continue
                    pid = entry.name.removeprefix("envduels-")
                    if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                        for child in entry.iterdir():
                            if child.is_dir():
                                with contextlib.suppress(OSError):
                                    child.rmdir()
                        with contextlib.suppress(OSError):
                            entry.rmdir()

    def create(self, memory_mb: int, max_procs: int, cpu_cores: float = 1.0) -> SandboxCgroup:
        # A random name, not a count: an instance reads its own cgroup path in /proc/self/cgroup
        # and must not learn from it how many sandboxes came before it.
        name = f"s{secrets.token_hex(8)}"
        group = SandboxCgroup(self.memory / name, self.pids / name, memory_mb, max_procs,
                              self.freezer / name if self.freezer else None,
                              self.cpu / name if self.cpu else None)
        made = []
        try:
            for folder in group.groups:
                folder.mkdir()
                made.append(folder)
        except OSError:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        try:
            if group.cpu is not None:
                # µs; the quota is `cpu_cores` of the period, over all the sandbox's tasks. The
                # period is the kernel's default for a new group (100 ms): not written.
                period = 100_000
                _write(group.cpu / "cpu.cfs_quota_us", str(max(1000, int(cpu_cores * period))))
            limit = str(memory_mb << 20)
            _write(group.memory / "memory.limit_in_bytes", limit)
            with contextlib.suppress(OSError):  # absent without swap accounting
                _write(group.memory / "memory.memsw.limit_in_bytes", limit)
            _write(group.pids / "pids.max", str(max_procs))
        except OSError:
            # a limit that cannot be set (a lower memory limit than the group already uses, a
            # pids.max the kernel refuses): no process is in the group yet, so remove it now
            # rather than leave one empty group behind per failed sandbox start
            group.remove()
            raise
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
        for top in (self.memory, self.pids, self.freezer, self.cpu):
            if top is None:
                continue
            with contextlib.suppress(OSError):
                top.rmdir()
