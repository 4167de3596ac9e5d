"""Starting one sandboxed worker process: bubblewrap flags, uid, rlimits, cgroup, pipes.

Layers (docs/sandbox.md says what each one stops):
* a dedicated host uid per concurrent sandbox when the harness runs as root (bwrap run as
  root keeps capabilities, and `--uid` would map back to host root);
* bwrap with every namespace unshared, no nested user namespaces, all capabilities dropped, a
  root made of `/usr` only, a size-capped private /tmp, `/` and `/dev` read-only, started
  with an empty environment (its pid 1 would otherwise expose ours in /proc/1/environ);
* a seccomp deny-list (`_seccomp.py`) installed by bwrap right before the worker starts;
* rlimits the worker sets on itself before any environment code exists, and a cgroup for the
  sandbox's total memory and processes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import fcntl
import logging
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import _gvisor
from ._cgroup import CgroupRoot, SandboxCgroup
from ._limits import SandboxLimits, SandboxUnavailable
from ._resident import ResidentView
from ._resident import build as build_resident
from ._seccomp import build_filter

log = logging.getLogger("envduels.sandbox")

WORKER_SOURCE = (Path(__file__).with_name("_worker.py")).read_text()


def _find_python() -> tuple[str, list[str]]:
    """A lean interpreter for the sandbox and the host directories it needs read-only."""
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13",
                      "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate, []
    prefix = os.path.realpath(sys.base_prefix)
    binds = [] if prefix.startswith("/usr/") or prefix == "/usr" else [prefix]
    return os.path.realpath(sys.executable), binds


@dataclass
class Host:
    """What this machine allows, probed once per harness process."""

    bwrap: str | None
    python: str
    python_binds: list[str]
    root: bool
    cgroups: CgroupRoot | None
    seccomp: bytes | None
    missing: list[str] = field(default_factory=list)
    _free_slots: list[int] = field(default_factory=list)   # claimed by us, not in use now
    _claimed: dict[int, int] = field(default_factory=dict)  # slot -> fd holding its lock
    _lock: threading.Lock = field(default_factory=threading.Lock)
    setpriv: str | None = None        # switches uid in an exec, so Popen may use vfork
    usr_view: list[str] | None = None  # the parts of /usr the interpreter needs (None: all)
    worker_code: bytes | None = None  # the worker compiled once by the sandbox interpreter
    resident: ResidentView | None = None  # usr_view copied into RAM (None: host files bound)
    runsc: str | None = None          # gVisor's runtime, for `runtime: gvisor`

    def take_slot(self) -> int:
        """A uid slot for one sandbox: one this harness already holds and is not using, else a
        newly claimed one. OSError when every slot is taken."""
        with self._lock:
            if self._free_slots:
                return self._free_slots.pop()
            return self._claim_slot()

    def give_slot(self, slot: int) -> None:
        """`slot` is free again for this harness (it keeps the claim until it exits)."""
        with self._lock:
            if slot in self._claimed and slot not in self._free_slots:
                self._free_slots.append(slot)

    def slot_uid(self, slot: int) -> int:
        return UID_BASE + slot

    def claimed_uids(self) -> list[int]:
        """The uids this harness holds (in use or not), for diagnostics and tests."""
        with self._lock:
            return sorted(self.slot_uid(s) for s in self._claimed)

    def _claim_slot(self) -> int:
        """Claim a slot no other harness holds, by an flock on its lock file, held as long as
        this process lives (the kernel releases it however the process ends). A slot whose
        uid still owns processes (left by a harness that was killed) is skipped. The search
        starts at a random slot: a forked instance holds its uid in its own memory, and the
        lowest free slot would tell it how many sandboxes the machine runs."""
        folder = _slot_folder()
        start = secrets.randbelow(UID_SLOTS)
        for slot in (*range(start, UID_SLOTS), *range(start)):
            if slot in self._claimed:
                continue
            path = os.path.join(folder, f"{self.slot_uid(slot)}.lock")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if _count_own_processes(self.slot_uid(slot)):
                os.close(fd)
                continue
            self._claimed[slot] = fd
            return slot
        raise OSError(errno.EAGAIN, f"all {UID_SLOTS} sandbox uids are taken")


# Sandbox uids are shared by every harness on the machine: each claims slots by lock file, so
# two harnesses never run sandboxes under one uid (RLIMIT_NPROC and signals are per uid).
UID_BASE = 100000
UID_SLOTS = 65536
_SLOT_FOLDERS = ("/run/envduels/uid-slots", "/tmp/envduels-uids")


def _slot_folder() -> str:
    """The folder of the uid lock files: root's own, never one another user made or a link."""
    problems = []
    for folder in _SLOT_FOLDERS:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError as err:
            problems.append(f"{folder}: {err.strerror or err}")
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() \
                and not info.st_mode & 0o022:
            return folder
        problems.append(f"{folder}: not a directory owned by us and writable by us only")
    raise OSError(errno.EACCES, "no folder for sandbox uid locks (" + "; ".join(problems) + ")")


_HOST_LOCK = threading.Lock()
_LAUNCHERS: ThreadPoolExecutor | None = None


def launcher_threads() -> ThreadPoolExecutor:
    """The threads that fork workers. They live as long as the process, because bwrap's
    --die-with-parent follows the *thread* that forked it: a worker started from a thread that
    later exits would be killed with it."""
    global _LAUNCHERS
    with _HOST_LOCK:
        if _LAUNCHERS is None:
            _LAUNCHERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="envduels-launch")
        return _LAUNCHERS


_HOST: Host | None = None


def host() -> Host:
    """The probed host (cached). Logs once which protection layers this machine lacks."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = _probe()
        return _HOST


def _probe() -> Host:
    python, binds = _find_python()
    root = os.geteuid() == 0
    missing = []
    cgroups, why = CgroupRoot.probe()
    if cgroups is None:
        missing.append(f"no per-sandbox memory/process cgroup ({why}; rlimits only)")
    else:
        atexit.register(cgroups.close)
        missing.extend(cgroups.missing)
    _raise_open_file_limit()
    seccomp = build_filter()
    if seccomp is None:
        missing.append("no seccomp filter (libseccomp not found)")
    if not root:
        missing.append("no per-sandbox uid (the harness is not root; sandboxes share your uid)")
    usr_view, stdlib, multiarch = _usr_view(python)
    resident = build_resident(python, stdlib, multiarch) if usr_view is not None else None
    if resident is None:
        missing.append("the sandbox reads host files, whose page-cache state it can sense "
                       "(no tmpfs /dev/shm, no ldd, or the interpreter is not in /usr)")
    else:
        log.info("sandbox view in RAM: %.1f MiB at %s (%s)", resident.size_bytes / 2**20,
                 resident.root, f"copied in {resident.copy_s:.2f} s" if resident.copy_s
                 else "made by an earlier harness")
    if missing:
        log.warning("sandbox running with reduced protection: %s", "; ".join(missing))
    return Host(bwrap=shutil.which("bwrap"), python=python, python_binds=binds, root=root,
                cgroups=cgroups, seccomp=seccomp, missing=missing,
                setpriv=shutil.which("setpriv") if root else None, runsc=shutil.which("runsc"),
                worker_code=_compile_worker(python), usr_view=usr_view, resident=resident)


def _compile_worker(python: str) -> bytes | None:
    """The worker's code object, marshalled by the interpreter that will run it (marshal is
    version-specific). `-c SOURCE` would compile 300 lines at every start: a few ms of CPU
    each, more under load. None (compile at each start) if that interpreter cannot do it."""
    try:
        done = subprocess.run(
            [python, "-s", "-S", "-c", "import marshal, sys; sys.stdout.buffer.write(marshal."
             "dumps(compile(sys.stdin.read(), '<envduels-worker>', 'exec')))"],
            input=WORKER_SOURCE.encode(), capture_output=True, timeout=60, env={})
    except (OSError, subprocess.SubprocessError):
        return None
    ok = done.returncode == 0 and 0 < len(done.stdout) < 60_000   # fits a pipe's buffer
    return done.stdout if ok else None


def _usr_view(python: str) -> tuple[list[str] | None, str, str]:
    """The host paths under /usr that `python` needs, each bound read-only on its own: the
    binary, its stdlib (with lib-dynload), the shared libraries and the loader, the C.UTF-8
    locale. Not /usr/share (timezones, dictionaries, docs: host facts and state) nor
    /usr/local (whatever the admin installed). None (bind all of /usr) when the interpreter
    does not live in /usr or cannot say where its stdlib is. Also returns the stdlib folder
    and the multiarch triplet ("" when unknown)."""
    if not python.startswith("/usr/"):
        return None, "", ""
    try:
        done = subprocess.run(
            [python, "-s", "-S", "-c", "import os, sys; print(os.path.dirname(os.__file__)); "
             "print(getattr(sys.implementation, '_multiarch', ''))"],
            capture_output=True, text=True, timeout=60, env={})
    except (OSError, subprocess.SubprocessError):
        return None, "", ""
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2 or not lines[0].startswith("/usr/lib/"):
        return None, "", ""
    stdlib, multiarch = lines
    view = [python, stdlib, "/usr/lib64", "/usr/lib32", "/usr/libx32", "/usr/lib/locale/C.utf8"]
    if multiarch:
        view.append(f"/usr/lib/{multiarch}")
    else:   # no multiarch layout: the libraries sit in /usr/lib itself
        view.append("/usr/lib")
    return [path for path in view if os.path.exists(path)], stdlib, multiarch


# Reads the marshalled worker from a pipe (written before the fork, closed by us) and runs it.
_WORKER_STUB = """import marshal, os
def _code(fd):
    parts = []
    while part := os.read(fd, 65536):
        parts.append(part)
    os.close(fd)
    return marshal.loads(b"".join(parts))
exec(_code({fd}))
"""


def _raise_open_file_limit() -> None:
    """Each live worker holds five fds in the harness; hundreds of episodes at once need more
    than the usual soft limit of 1024, and the hard limit is ours to take."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def require_bwrap() -> None:
    """Raise SandboxUnavailable when bubblewrap is not installed."""
    if host().bwrap is None:
        raise SandboxUnavailable()


def require_runtime(runtime: str) -> None:
    """Raise SandboxUnavailable when `runtime` ("bubblewrap" or "gvisor") cannot run here:
    its program is not installed, or (gVisor) the harness is not root, which runsc needs."""
    if runtime != "gvisor":
        require_bwrap()
        return
    h = host()
    if h.runsc is None:
        raise SandboxUnavailable("gVisor (runsc) is not installed", fix=(
            "sandbox.runtime gvisor runs each sandbox under gVisor; install it (Debian/Ubuntu: "
            "`apt-get install runsc`) or set sandbox.runtime to bubblewrap"))
    if not h.root:
        raise SandboxUnavailable("gVisor's runsc needs root to create its sandboxes", fix=(
            "run envduels as root for sandbox.runtime gvisor, or set sandbox.runtime to "
            "bubblewrap"))


SANDBOX_HOSTNAME = "envduels-sandbox"   # its own UTS name: the host's says where it runs
# The uid and gid every bubblewrap sandbox sees itself as (a forked instance too): the host
# uid behind it is a slot that says how many sandboxes this harness ran at once.
SANDBOX_ID = 1000


def bwrap_argv(h: Host, limits: SandboxLimits, seccomp_fd: int | None = None) -> list[str]:
    argv = [
        h.bwrap or "bwrap",
        # No --new-session: every new session advances the host-wide autogroup id that
        # /proc/self/autogroup shows, so fresh sandboxes could read their start order there.
        # What the session stopped (TIOCSTI/TIOCLINUX into our terminal) the seccomp filter
        # denies, /dev/tty is /dev/null inside, and the process group is the sandbox's own.
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
        "--cap-drop", "ALL", "--clearenv", "--hostname", SANDBOX_HOSTNAME,
        "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID),
    ]
    if h.resident is not None:   # RAM-resident copies: no page-cache state to sense
        argv += ["--ro-bind", h.resident.usr, "/usr"]
    else:
        for path in h.usr_view if h.usr_view is not None else ["/usr"]:
            argv += ["--ro-bind", path, path]
    for name in ("lib", "lib64", "lib32", "libx32", "bin", "sbin"):
        if os.path.islink(f"/{name}") or not os.path.exists(f"/{name}"):
            if os.path.exists(f"/usr/{name}"):
                argv += ["--symlink", f"usr/{name}", f"/{name}"]
        else:  # a merged-/usr-less system: bind the real directory
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    for extra in h.python_binds:
        argv += ["--ro-bind", extra, extra]
    argv += [
        "--proc", "/proc", "--dev", "/dev", "--dev-bind", "/dev/null", "/dev/tty",
        "--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp",
        "--chdir", "/tmp",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0",
        # /proc read-only too: its writable files change kernel state that outlives the
        # sandbox or is shared with the harness (the session's autogroup nice, which renices
        # the user's whole session; loginuid, whose first write draws a host-wide audit
        # session id); a sandbox's own oom_score_adj, comm or timer slack go with them
        "--remount-ro", "/", "--remount-ro", "/dev", "--remount-ro", "/proc",
    ]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv.append(h.python)
    return argv


class WorkerProcess(Protocol):
    """What the channel needs of a worker's process: a `subprocess.Popen` for a fresh
    sandbox, a `_template.ForkedProcess` for an instance forked from a template."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


@dataclass
class Launched:
    """A started worker process and the parent's ends of its pipes."""

    popen: WorkerProcess
    request_w: int
    response_r: int
    output_r: int
    slot: int | None
    uid: int | None
    cgroup: SandboxCgroup | None
    sandboxed: bool
    scratch: str | None = None
    runtime: str = "bubblewrap"   # what runs it: "bubblewrap" or "gvisor"
    # Forked from a template: `popen.pid` is the instance's pid 1, signalled and watched
    # through its pidfd only (so never a reused pid), so SIGKILL to it ends every process of
    # the instance's pid namespace (no cgroup listing to read), and its exit, once reported,
    # says none is left.
    forked: bool = False


def _count_own_processes(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def launch(limits: SandboxLimits, *, unsafe_no_sandbox: bool) -> Launched:
    """Start a worker that waits for its "load" frame. Blocking (fork + exec): call it from a
    launcher thread (`launcher_threads()`) when an event loop is running."""
    h = host()
    if not unsafe_no_sandbox and limits.runtime == "gvisor":
        return _launch_gvisor(h, limits)
    if not unsafe_no_sandbox and h.bwrap is None:
        raise SandboxUnavailable()
    opened: list[int] = []
    slot: int | None = None
    group: SandboxCgroup | None = None
    scratch: str | None = None

    def pipe() -> tuple[int, int]:
        ends = os.pipe2(os.O_CLOEXEC)
        opened.extend(ends)
        return ends

    try:
        req_r, req_w = pipe()
        resp_r, resp_w = pipe()
        out_r, out_w = pipe()
        child_ends = [req_r, resp_w, out_w]
        # Not -I: it would ignore PYTHONHASHSEED. The environment is ours alone (bwrap starts
        # from an empty one), so -s -S and a fixed hash seed are as isolated, and reproducible.
        program = WORKER_SOURCE
        if h.worker_code is not None:
            code_r, code_w = pipe()
            _write_all(code_w, h.worker_code)
            os.close(code_w)
            opened.remove(code_w)
            child_ends.append(code_r)
            program = _WORKER_STUB.format(fd=code_r)
        tail = ["-s", "-S", "-c", program, str(req_r), str(resp_w),
                str(limits.observation_max_chars), str(limits.frame_max_bytes)]
        uid: int | None = None
        if unsafe_no_sandbox:
            argv = [h.python, *tail]
            scratch = tempfile.mkdtemp(prefix="envduels-unsafe-")
            env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "LANG": "C.UTF-8",
                   "PYTHONHASHSEED": "0"}
            cwd = scratch
        else:
            seccomp_r = None
            if h.seccomp is not None:
                seccomp_r, seccomp_w = pipe()
                os.write(seccomp_w, h.seccomp)   # a few hundred bytes: fits the pipe buffer
                os.close(seccomp_w)
                opened.remove(seccomp_w)
                child_ends.append(seccomp_r)
            argv = bwrap_argv(h, limits, seccomp_r) + tail
            env, cwd = {}, "/"
            if h.root:
                slot = h.take_slot()
                uid = h.slot_uid(slot)
            if h.cgroups is not None:
                group = h.cgroups.create(limits.memory_mb, limits.max_procs, limits.cpu_cores)
        nproc = limits.max_procs
        if group is None and uid is None:
            # Shared with every process of this uid: leave room for the ones already running.
            nproc += _count_own_processes(os.getuid())
        # The worker lowers its own limits before it reads any environment code: no
        # preexec_fn, whose Python-level fork of the whole harness costs milliseconds.
        argv.append(_rlimit_spec(limits, nproc))
        popen_uid: int | None = None   # only without setpriv: Popen then switches uid itself
        if uid is not None and h.setpriv is not None:
            # Popen(user=...) forks the whole harness (no vfork with a uid switch): ms per start
            argv = [h.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                    *argv]
        elif uid is not None:
            popen_uid = uid
        if group is not None:
            group.enter_thread()
        try:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=env, cwd=cwd,
                pass_fds=[fd for fd in child_ends if fd != out_w], process_group=0,
                user=popen_uid, group=popen_uid,
                extra_groups=None if popen_uid is None else [],
            )
        finally:
            if group is not None and h.cgroups is not None:
                h.cgroups.leave_thread()
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        if group is not None and h.cgroups is not None:
            h.cgroups.discard(group)
        if slot is not None:
            h.give_slot(slot)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    for fd in child_ends:
        os.close(fd)
    for fd in (resp_r, out_r, req_w):
        os.set_blocking(fd, False)
    return Launched(popen, req_w, resp_r, out_r, slot, uid, group, not unsafe_no_sandbox, scratch)


def _rlimit_spec(limits: SandboxLimits, nproc: int) -> str:
    """The worker's last argument: the limits it sets on itself (see `_worker._limit_self`)."""
    return ",".join(str(v) for v in (limits.memory_mb << 20, limits.cpu_s, limits.cpu_s + 1,
                                     limits.open_files, limits.file_size_mb << 20, nproc))


def _launch_gvisor(h: Host, limits: SandboxLimits) -> Launched:
    """`launch` under gVisor (`_gvisor.py`): `runsc run` of a bundle written for this
    sandbox, the protocol on its standard streams, the whole of runsc inside the sandbox's
    cgroup (with room for gVisor's own tasks and memory), killed with its launcher thread."""
    require_runtime("gvisor")
    opened: list[int] = []
    group: SandboxCgroup | None = None
    scratch: str | None = None
    try:
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        opened += [req_r, req_w]
        resp_r, resp_w = os.pipe2(os.O_CLOEXEC)
        opened += [resp_r, resp_w]
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        opened += [out_r, out_w]
        scratch = tempfile.mkdtemp(prefix="envduels-gvisor-")
        program = _gvisor.program(WORKER_SOURCE, h.worker_code, h.seccomp)
        args = [h.python, "-s", "-S", "-c", program, "0", "1", str(limits.observation_max_chars),
                str(limits.frame_max_bytes), _rlimit_spec(limits, limits.max_procs)]
        if h.resident is not None:
            binds = [(h.resident.usr, "/usr")]
        else:
            binds = [(p, p) for p in (h.usr_view if h.usr_view is not None else ["/usr"])]
        binds += [(p, p) for p in h.python_binds]
        _gvisor.write_bundle(scratch, args=args, binds=binds, scratch_mb=limits.scratch_mb,
                             hostname=SANDBOX_HOSTNAME)
        # runsc under a reaper of ours (_gvisor.REAPER): it dies with us, as bwrap's
        # --die-with-parent, runsc and its sandbox with it, and it collects runsc's tree
        argv = [h.python, "-s", "-S", "-c", _gvisor.REAPER, str(os.getpid()),
                *_gvisor.argv(h.runsc or "runsc", scratch)]
        if h.cgroups is not None:
            group = h.cgroups.create(limits.memory_mb + _gvisor.MEMORY_OVERHEAD_MB,
                                     limits.max_procs + _gvisor.TASKS_OVERHEAD, limits.cpu_cores)
            group.enter_thread()
        try:
            popen = subprocess.Popen(argv, stdin=req_r, stdout=resp_w, stderr=out_w, env={},
                                     cwd="/", process_group=0)
        finally:
            if group is not None and h.cgroups is not None:
                h.cgroups.leave_thread()
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        if group is not None and h.cgroups is not None:
            h.cgroups.discard(group)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    for fd in (req_r, resp_w, out_w):
        os.close(fd)
    for fd in (resp_r, out_r, req_w):
        os.set_blocking(fd, False)
    return Launched(popen, req_w, resp_r, out_r, None, None, group, True, scratch, "gvisor")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# A fresh sandbox ends child first: what runs under its launcher (our child: bwrap, whose
# child is the sandbox's pid-namespace init; or runsc, whose children are gVisor's sandbox
# and gofer) is killed, and the launcher collects it and exits by itself. A launcher killed
# first hands its children to the nearest child subreaper or to pid 1, which on some hosts
# (this one, and a container started without an init) never collects them: a zombie per
# sandbox. The harness is no subreaper (it would collect other libraries' orphans too, which
# nobody waits for: Ray's workers). The launcher is killed too only after this long.
LAUNCHER_GRACE_S = 1.0


def children(pid: int) -> list[int]:
    """The live children of host process `pid` (of all its threads)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every live descendant of host process `pid`."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 4096:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def end_under_launcher(launched: Launched, init_pid: int | None = None) -> None:
    """SIGKILL what runs under a fresh sandbox's launcher, which then collects it and exits
    (`LAUNCHER_GRACE_S`), and thaw the sandbox so that it can; the launcher itself is
    killed at once when nothing runs under it yet. `init_pid`: bwrap's init, if known. (A
    forked instance's init is signalled through its pidfd: `ForkedProcess.kill`.)"""
    pid = launched.popen.pid
    if not launched.sandboxed:   # the worker is our child itself: its process group
        kill_launcher(launched)
        return
    if launched.runtime == "gvisor":
        victims = set(descendants(pid))
        if launched.cgroup is not None:
            victims.update(launched.cgroup.pids_inside())
        victims.discard(pid)
    else:   # the pid namespace's init: its death ends every process inside
        init = init_pid or next(iter(children(pid)), None)
        victims = {init} if init else set()
    if not victims:
        kill_launcher(launched)
        return
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    if launched.cgroup is not None:
        launched.cgroup.thaw()


def kill_launcher(launched: Launched) -> None:
    """SIGKILL a fresh sandbox's launcher with its process group, and whatever is left in
    the sandbox's cgroup."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(launched.popen.pid, signal.SIGKILL)
    if launched.cgroup is not None:
        launched.cgroup.kill_all()


def discard_when_started(started: asyncio.Future[Launched]) -> None:
    """Done callback of a start or fork whose opener was cancelled: discard what it started."""
    if not started.cancelled() and started.exception() is None:
        launcher_threads().submit(discard, started.result())


def discard(launched: Launched, init_pid: int | None = None) -> None:
    """Kill and release a worker that never got a channel (its opener was cancelled), or a
    template (`init_pid`: its bwrap's init). Blocking."""
    if launched.forked:   # by its pidfd, never by a pid number (ForkedProcess)
        launched.popen.kill()
        if launched.cgroup is not None:
            launched.cgroup.kill_all()
    else:
        end_under_launcher(launched, init_pid)
        try:
            launched.popen.wait(LAUNCHER_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_launcher(launched)
    launched.popen.wait()
    for fd in (launched.request_w, launched.response_r, launched.output_r):
        with contextlib.suppress(OSError):
            os.close(fd)
    release = getattr(launched.popen, "release", None)
    if release is not None:   # a forked instance: its pidfd and status socket (ForkedProcess)
        release()
    h = host()
    if launched.cgroup is not None and h.cgroups is not None:
        h.cgroups.discard(launched.cgroup)
    if launched.slot is not None:
        h.give_slot(launched.slot)
    if launched.scratch:
        shutil.rmtree(launched.scratch, ignore_errors=True)
