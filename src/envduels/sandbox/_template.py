"""Instances forked from a template: a fresh instance per episode in a few milliseconds.

A template is one bubblewrap sandbox per environment source (and per role: the replay audit
gets its own), running `_zygote.py`: it has compiled the source and imported the standard
modules it names, never runs environment code, and clones on request. Each instance's init
(cloned into its own mount/IPC/network/pid namespaces, its pidfd handed to the harness)
joins its own memory/pids/cpu cgroup and freezer group, mounts a fresh /tmp and /proc,
drops every capability, takes the seccomp filter and forks the worker, which lowers its
rlimits and greets; only then does the harness send `load`. What is shared with the
template and its other instances, and what is not: docs/templates.md.

Templates need what makes the per-instance limits honest and the confinement complete: root
(a uid per template, setpriv), per-sandbox cgroups, the seccomp filter (it also replaces the
nested-user-namespace ban the template cannot have), and the bubblewrap runtime. Elsewhere,
and when a template cannot start, the pool uses fresh sandboxes (`template_problem`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._cgroup import SandboxCgroup
from ._launcher import (
    _WORKER_STUB,
    SANDBOX_ID,
    UID_BASE,
    UID_SLOTS,
    WORKER_SOURCE,
    Host,
    Launched,
    bwrap_argv,
    discard,
    discard_when_started,
    host,
    launcher_threads,
)
from ._limits import SandboxLimits, start_error

log = logging.getLogger("envduels.sandbox")

ZYGOTE_SOURCE = (Path(__file__).with_name("_zygote.py")).read_text()
TEMPLATE_PIDS = 4096        # RLIMIT_NPROC of the template's uid (each instance has its own)
TEMPLATE_FILES = 1024       # its RLIMIT_NOFILE: a rehearsal's requests hold descriptors
_START_TIMEOUT_S = 20.0
_F_SETPIPE_SZ = 1031
_fallback_reason: str | None = None   # why this process used fresh sandboxes, once it had to
_instance_started = False   # some forked instance of this process joined its cgroups and greeted
RETIRE_SHARE = 0.5   # of a template's memory limit, charged by its live instances: see `full`
JOIN_REFUSED = 72   # the exit status of an instance's init that could not join its cgroups


def template_problem(limits: SandboxLimits) -> str | None:
    """Why instances here come from fresh sandboxes instead of templates (None: templates).

    A static check of this host and these limits; a template that then fails to start is
    reported by `instance_mode` for the rest of the process."""
    if os.environ.get("ENVDUELS_TEMPLATES", "1") == "0":
        return "templates turned off (ENVDUELS_TEMPLATES=0)"
    runtime = getattr(limits, "runtime", "bubblewrap")
    if runtime not in ("bubblewrap", "bwrap"):
        return f"the {runtime} runtime starts a fresh sandbox per instance"
    h = host()
    if h.bwrap is None:
        return "no bubblewrap"
    if not h.root or h.setpriv is None:
        return "the harness is not root (no uid of its own per template)"
    if h.cgroups is None:
        return "no per-sandbox cgroups (an instance's memory and process limits would be shared)"
    if h.seccomp is None:
        return "no seccomp filter (libseccomp not found)"
    return None


def host_template_problem(runtime: str = "bubblewrap") -> str | None:
    """`template_problem` without probing the host (no sandbox started, nothing created):
    for `envduels status`, which reads and never starts anything."""
    import ctypes.util
    import shutil

    if os.environ.get("ENVDUELS_TEMPLATES", "1") == "0":
        return "templates turned off (ENVDUELS_TEMPLATES=0)"
    if runtime not in ("bubblewrap", "bwrap"):
        return f"the {runtime} runtime starts a fresh sandbox per instance"
    if shutil.which("bwrap") is None:
        return "no bubblewrap"
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "the harness is not root (no uid of its own per template)"
    if not all(os.access(f"/sys/fs/cgroup/{c}", os.W_OK) for c in ("memory", "pids")):
        return "no per-sandbox cgroups (an instance's memory and process limits would be shared)"
    if ctypes.util.find_library("seccomp") is None:
        return "no seccomp filter (libseccomp not found)"
    return None


def instance_mode(limits: SandboxLimits | None = None) -> str:
    """One line for `envduels status` and logs: where episode instances come from here."""
    problem = _fallback_reason or template_problem(limits or SandboxLimits())
    return describe_mode(problem)


def describe_mode(problem: str | None) -> str:
    """The line for `problem` (None: templates are used)."""
    if problem is None:
        return "instances forked from per-environment templates (docs/templates.md)"
    return f"fresh sandboxes, one per instance: {problem}"


def instance_started() -> None:
    """A forked instance greeted: its kernel lets an init join its cgroups."""
    global _instance_started
    _instance_started = True


def refused_join(returncode: int | None, output: str) -> str | None:
    """Why this process must use fresh sandboxes, when its first forked instance could not
    join its cgroups (None otherwise). The init joins them through descriptors the harness
    opened; before Linux 5.16 (the CVE-2021-4197 change, and its backports) the kernel checks
    the writer's credentials instead of the opener's, and refuses every instance alike."""
    global _fallback_reason
    if _instance_started or returncode != JOIN_REFUSED:
        return None
    said = [line for line in output.splitlines() if "joining its cgroup failed" in line]
    if not said:
        return None
    why = said[-1].rsplit(": ", 1)[-1].strip()
    _fallback_reason = (f"the kernel refused a forked instance's join of its cgroups ({why}; "
                        "Linux before 5.16 checks the writer's credentials, not the opener's)")
    return _fallback_reason


def _procs_fd(group: Path) -> int:
    """`group`'s cgroup.procs, opened by the harness for the instance to move itself into."""
    return os.open(group / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)


class TemplateUnavailable(Exception):
    """This host cannot run templates (the reason is in args[0]); use fresh sandboxes."""


class ForkedProcess:
    """The Popen-like handle of one forked instance (WorkerChannel and `discard` use `pid`,
    `pidfd`, `poll()`, `wait()`, `kill()`; the channel watches `pidfd` on its event loop).
    `pidfd` (from the template's clone) identifies the instance's init: it is signalled only
    through it, so a pid the kernel has reused is never signalled, and it becomes readable
    once the init has exited, which the kernel reports only after every other process of the
    instance's pid namespace is gone. The exit status is what the init wrote on `status`
    before it exited (none: it was killed)."""

    def __init__(self, pid: int, pidfd: int, status: socket.socket) -> None:
        self.pid = pid
        self.pidfd: int | None = pidfd
        self.returncode: int | None = None
        self._status: socket.socket | None = status
        status.setblocking(False)
        self._poller = select.poll()
        self._poller.register(pidfd, select.POLLIN)

    def poll(self) -> int | None:
        if self.returncode is None and self.pidfd is not None:
            if not self._poller.poll(0):
                return None
            self._collect()
        return self.returncode

    def _collect(self) -> None:
        data = b""
        if self._status is not None:   # one message per write of the worker's (SEQPACKET)
            with contextlib.suppress(OSError):
                while len(data) < 256 and (part := self._status.recv(64)):
                    data += part
        self.returncode = exit_status(data)

    def kill(self) -> None:
        """SIGKILL to the instance's init (ending its pid namespace), if it is still there."""
        if self.pidfd is not None and self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("instance", timeout or 0)
            self._poller.poll(None if left is None else max(1, int(left * 1000)))
        return self.returncode or 0

    def release(self) -> None:
        """Close the status socket and the pidfd (after the exit status is known, or to give
        up on an instance that is already signalled)."""
        if self._status is not None:
            self._status.close()
            self._status = None
        if self.pidfd is not None:
            self._poller.unregister(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None

    @property
    def alive(self) -> bool:
        return self.pidfd is not None and self.poll() is None


# faulthandler's first line in an instance whose worker died of a fatal signal
_FATAL = {b"Segmentation fault": signal.SIGSEGV, b"Floating point exception": signal.SIGFPE,
          b"Aborted": signal.SIGABRT, b"Bus error": signal.SIGBUS,
          b"Illegal instruction": signal.SIGILL}


def exit_status(data: bytes) -> int:
    """An instance's exit status from what its worker (pid 1) wrote on the status socket: its
    `os._exit` code (0-255), or 128 + n for a fatal signal faulthandler named, as bwrap
    reports them; -SIGKILL when nothing was written (killed: by the harness, a limit, or with
    its template; the channel finds which). The environment can write there too: what it
    writes changes only the reason given for its own exit."""
    text = data.strip()
    if text.isdigit() and len(text) <= 3:
        return int(text)
    if text.startswith(b"Fatal Python error: "):
        name = text.removeprefix(b"Fatal Python error: ").split(b"\n", 1)[0].strip()
        if name in _FATAL:
            return 128 + _FATAL[name]
    return -signal.SIGKILL


def _pidfd_pid(pidfd: int) -> int:
    """The host pid of the process `pidfd` refers to (-1 once it has exited)."""
    fd = os.open(f"/proc/self/fdinfo/{pidfd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(fd, 4096)
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.startswith(b"Pid:"):
            return int(line.split()[1])
    return -1


_CODE: dict[str, bytes | None] = {}
_CODE_LOCK = threading.Lock()


def _template_code(python: str) -> bytes | None:
    """The worker and the zygote compiled once by the sandbox's interpreter (marshal)."""
    with _CODE_LOCK:
        if python not in _CODE:
            try:
                done = subprocess.run(
                    [python, "-s", "-S", "-c", "import marshal, sys; sys.stdout.buffer.write("
                     "marshal.dumps(compile(sys.stdin.read(), '<envduels-template>', 'exec')))"],
                    input=(WORKER_SOURCE + "\n" + ZYGOTE_SOURCE).encode(), capture_output=True,
                    timeout=60, env={})
                _CODE[python] = done.stdout if done.returncode == 0 and done.stdout else None
            except (OSError, subprocess.SubprocessError):
                _CODE[python] = None
        return _CODE[python]


def template_argv(h: Host, limits: SandboxLimits) -> list[str]:
    """bwrap's argv for a template: the fresh sandbox's, except that the template keeps
    CAP_SYS_ADMIN (to give each fork its namespaces and mounts), CAP_SETPCAP (so each fork
    can empty its bounding set) and CAP_SETUID/CAP_SETGID (so each fork takes its own uid)
    in the sandbox's own user namespace, may create namespaces, keeps its own uid and a
    writable /proc (each fork mounts its own read-only one after writing its user
    namespaces' maps through this one); each fork drops every capability and takes the
    seccomp filter (which denies new namespaces) before anything else runs. No --seccomp:
    bwrap would filter the template. The harness maps the user namespace (`Template.start`)."""
    argv = bwrap_argv(h, limits, None)
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--cap-drop" and argv[i + 1] == "ALL":
            out += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
                    "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            i += 2
        elif argv[i] in ("--uid", "--gid") or argv[i:i + 2] == ["--remount-ro", "/proc"]:
            i += 2
        elif argv[i] == "--disable-userns":
            i += 1
        else:
            out.append(argv[i])
            i += 1
    return out


def _map_user_namespace(info_r: int, block_w: int) -> None:
    """Map the template's user namespace, which bubblewrap left unmapped and waits on
    (`--info-fd`, `--userns-block-fd`): every sandbox uid slot, as itself, so that each
    instance can take the slot the harness claimed for it. Only root may write such a map;
    the template then holds CAP_SETUID there, and never runs environment code."""
    data = b""
    end = time.monotonic() + _START_TIMEOUT_S
    poller = select.poll()
    poller.register(info_r, select.POLLIN)
    while (left := end - time.monotonic()) > 0 and poller.poll(max(1, int(left * 1000))):
        part = os.read(info_r, 4096)
        if not part:
            break
        data += part
    try:
        child = int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        raise TemplateUnavailable("a template could not start (bubblewrap reported no "
                                  "sandbox process)") from None
    extent = f"{UID_BASE} {UID_BASE} {UID_SLOTS}\n".encode()
    try:
        for name in ("uid_map", "gid_map"):
            fd = os.open(f"/proc/{child}/{name}", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, extent)
            finally:
                os.close(fd)
    except OSError as err:
        raise TemplateUnavailable(f"a template could not start (its user namespace could "
                                  f"not be mapped: {err.strerror})") from None
    os.write(block_w, b"1")


def _joined(group: SandboxCgroup, limits: SandboxLimits) -> list[Path]:
    """The groups an instance joins itself (their `cgroup.procs` go with its fork request)."""
    joined = [g for g in (group.memory, group.pids, group.cpu) if g is not None]
    if group.freezer is not None and limits.freeze_idle:
        joined.append(group.freezer)
    return joined


class Template:
    """One template sandbox. `start` and `fork` block: call them from threads."""

    def __init__(self, key: tuple[str, bool]) -> None:
        self.key = key
        self.launched: Launched | None = None
        self.ctl: socket.socket | None = None
        self.dead: str | None = None
        self.instances: list[ForkedProcess] = []
        self.init_pid: int | None = None
        self._lock = threading.Lock()
        self._prune_at = 64

    @property
    def pid(self) -> int | None:
        return None if self.launched is None else self.launched.popen.pid

    def live(self) -> int:
        with self._lock:   # forks append from their threads
            self.instances = [p for p in self.instances if p.alive]
            return len(self.instances)

    def full(self, limits: SandboxLimits) -> bool:
        """Whether the template's memory group holds more than RETIRE_SHARE of its limit.
        Each fork leaves memory charged there for as long as the instance lives (the page
        tables and kernel objects of its clone, and the template's pages the instance still
        shares after the template wrote its own copy: about 1 MiB an instance, measured), so
        a template that kept forking would reach its limit at some hundreds of live
        instances and be killed by the kernel, its instances with it (issue 32's held-open
        sessions "killed" at 1,024). A full template forks no more: another takes over."""
        launched = self.launched
        if launched is None or launched.cgroup is None:
            return False
        try:
            used = int((launched.cgroup.memory / "memory.usage_in_bytes").read_text())
        except (OSError, ValueError):
            return False
        return used > RETIRE_SHARE * (limits.memory_mb << 20)

    def start(self, limits: SandboxLimits, source: str) -> None:
        """Start the template sandbox and hand it the source; TemplateUnavailable when this
        host cannot run one (before any environment code exists)."""
        h = host()
        code = _template_code(h.python)
        if code is None or h.seccomp is None or h.cgroups is None:
            raise TemplateUnavailable("the template program could not be compiled")
        opened: list[int] = []

        def pipe() -> tuple[int, int]:
            ends = os.pipe2(os.O_CLOEXEC)
            opened.extend(ends)
            return ends

        ctl, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        slot = group = None
        info_r = block_w = -1
        try:
            code_r, code_w = pipe()
            with contextlib.suppress(OSError):
                fcntl.fcntl(code_w, _F_SETPIPE_SZ, 1 << 20)
            os.write(code_w, code)
            seccomp_r, seccomp_w = pipe()
            os.write(seccomp_w, h.seccomp)
            for fd in (code_w, seccomp_w):
                os.close(fd)
                opened.remove(fd)
            out_r, out_w = pipe()
            info_r, info_w = pipe()
            block_r, block_w = pipe()
            slot = h.take_slot()
            uid = h.slot_uid(slot)
            group = h.cgroups.create(*limits.cgroup(pids=TEMPLATE_PIDS))
            bwrap = template_argv(h, limits)
            fork_fds = 4 + len(_joined(group, limits))
            argv = [h.setpriv or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--", *bwrap[:-1], "--info-fd", str(info_w), "--userns-block-fd",
                    str(block_r), bwrap[-1], "-s", "-S", "-c",
                    _WORKER_STUB.format(fd=code_r), "template", str(ctl_child.fileno()),
                    str(seccomp_r), str(limits.observation_max_chars), str(limits.frame_max_bytes),
                    limits.rlimits(cpu_s=1 << 30, nproc=TEMPLATE_PIDS, open_files=TEMPLATE_FILES),
                    limits.rlimits(),
                    str(limits.scratch_mb << 20), str(SANDBOX_ID), str(fork_fds)]
            group.enter_thread()
            try:
                popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w,
                                         stderr=out_w, env={}, cwd="/", process_group=0,
                                         pass_fds=[code_r, seccomp_r, ctl_child.fileno(),
                                                   info_w, block_r])
            finally:
                h.cgroups.leave_thread()
            for fd in (info_w, block_r):
                os.close(fd)
                opened.remove(fd)
        except BaseException:
            for fd in opened:
                with contextlib.suppress(OSError):
                    os.close(fd)
            ctl.close()
            ctl_child.close()
            if group is not None:
                h.cgroups.discard(group)
            if slot is not None:
                h.give_slot(slot)
            raise
        for fd in (code_r, seccomp_r, out_w):
            os.close(fd)
        ctl_child.close()
        self.launched = Launched(popen, ctl.fileno(), out_r, -1, slot, uid, group, True)
        self.ctl = ctl
        try:
            _map_user_namespace(info_r, block_w)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(info_r)
            os.close(block_w)
        self.init_pid = _wait_for_init(popen.pid)
        try:
            ctl.settimeout(_START_TIMEOUT_S)
            data = source.encode("utf-8", "surrogatepass")
            ctl.send(b"S" + len(data).to_bytes(8, "big"))
            for at in range(0, len(data), 32768):
                ctl.send(data[at:at + 32768])
            reply = ctl.recv(16)
        except OSError as err:
            reply = b""
            why = str(err)
        else:
            why = "it exited"
        if reply != b"ok":
            tail = self._output_tail()
            self.close()
            raise TemplateUnavailable(f"a template could not start ({tail or why})")
        ctl.settimeout(None)

    def _output_tail(self) -> str:
        if self.launched is None:
            return ""
        with contextlib.suppress(OSError):
            os.set_blocking(self.launched.response_r, False)
            data = os.read(self.launched.response_r, 4096)
            lines = data.decode("utf-8", "replace").strip().splitlines()
            return lines[-1][:300] if lines else ""
        return ""

    def fork(self, limits: SandboxLimits) -> Launched:
        """A new instance, confining itself in its own cgroups (it greets on its response
        pipe when ready for `load`). OSError when the template cannot fork (it is then marked
        dead when it stopped answering)."""
        h = host()
        if self.dead is not None or self.ctl is None or h.cgroups is None:
            raise OSError(f"the template is gone ({self.dead})")
        parent_ends: list[int] = []
        child_ends: list[int] = []
        status = status_child = None
        # its own host uid, as a fresh sandbox has: the kernel counts processes, pipe buffers,
        # descriptors in flight and queued signals per uid, and siblings that shared one
        # could read each other's counts (docs/templates.md)
        slot = h.take_slot()
        try:
            group = h.cgroups.create(*limits.cgroup())
        except BaseException:
            h.give_slot(slot)
            raise
        joined = _joined(group, limits)
        try:
            # the instance moves itself (writes "0"): the kernel checks a cgroup move against
            # the credentials that opened the file, ours
            child_ends += [_procs_fd(g) for g in joined]
            req_r, req_w = os.pipe2(os.O_CLOEXEC)
            resp_r, resp_w = os.pipe2(os.O_CLOEXEC)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            parent_ends += [req_w, resp_r, out_r]
            status, status_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            fds = array.array("i", [req_r, resp_w, out_w, status_child.fileno(), *child_ends])
            child_ends += [req_r, resp_w, out_w]
            request = b"F" + h.slot_uid(slot).to_bytes(4, sys.byteorder)
            with self._lock:
                try:
                    self.ctl.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                except OSError as err:
                    self.dead = f"the template stopped answering ({err})"
                    raise
            for fd in child_ends:
                os.close(fd)
            child_ends.clear()
            status_child.close()
            status.settimeout(_START_TIMEOUT_S)
            # close-on-exec: an instance's pidfd never reaches a process the harness starts
            data, ancillary, _flags, _addr = status.recvmsg(1, socket.CMSG_SPACE(4),
                                                            socket.MSG_CMSG_CLOEXEC)
            got = array.array("i")
            for level, kind, part in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got.frombytes(part[:len(part) - len(part) % got.itemsize])
            pidfd = got[0] if data == b"p" and len(got) == 1 else -1
            if pidfd < 0:
                for fd in got:
                    os.close(fd)
                tail = self._output_tail()
                raise OSError(f"the template could not fork ({tail or 'no pidfd'})")
            process = ForkedProcess(_pidfd_pid(pidfd), pidfd, status)
            if process.pid <= 0:   # never a pid to signal: the channel signals by pidfd
                process.release()
                raise OSError("the instance's init exited before it started")
        except BaseException:
            for fd in parent_ends + child_ends:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for sock in (status, status_child):
                if sock is not None:
                    sock.close()
            h.cgroups.discard(group)
            h.give_slot(slot)
            raise
        group.freezable = group.freezer is not None and limits.freeze_idle
        for fd in parent_ends:
            os.set_blocking(fd, False)
        with self._lock:
            # the released ones go once the list has doubled since: a long run's template
            # holds what is in use, not every instance it forked. (Released, not polled: this
            # thread must not collect an exit status the event loop's channel is reading.)
            if len(self.instances) >= self._prune_at:
                self.instances = [p for p in self.instances if p.pidfd is not None]
                self._prune_at = max(64, 2 * len(self.instances))
            self.instances.append(process)
        return Launched(process, req_w, resp_r, out_r, slot, h.slot_uid(slot), group, True,
                        forked=True)

    def close(self) -> None:
        """Kill the template and, with its pid namespace, every instance still forked from it."""
        if self.dead is None:
            self.dead = "closed"
        if self.launched is not None:
            launched, self.launched = self.launched, None
            if self.ctl is not None:
                self.ctl.detach()   # the fd is closed by `discard` as request_w
            if self.init_pid is None:
                self.init_pid = _wait_for_init(launched.popen.pid)
            # its init's death ends the sandbox's pid namespace, instances too; bwrap collects
            # it and exits
            discard(launched, self.init_pid)


def _wait_for_init(pid: int) -> int | None:
    """Host pid of bwrap's init inside the sandbox (the child of the outer bwrap); the
    kernel's list of children can miss one while others are forked, so it is read again."""
    for _ in range(50):
        with contextlib.suppress(OSError, ValueError, IndexError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.001)
    return None


_FORKERS: ThreadPoolExecutor | None = None
_FORKERS_LOCK = threading.Lock()


def _forkers() -> ThreadPoolExecutor:
    global _FORKERS
    with _FORKERS_LOCK:
        if _FORKERS is None:
            _FORKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envduels-fork")
        return _FORKERS


class Templates:
    """The templates of one EnvPool: one per (source, role), at most `max_templates` alive
    (the least recently used template with no live instance goes first)."""

    def __init__(self, limits: SandboxLimits, max_templates: int = 32) -> None:
        self.limits = limits
        self.max_templates = max_templates
        self._templates: OrderedDict[tuple[str, bool], asyncio.Future[Template]] = OrderedDict()
        self._retired: list[Template] = []   # full: forking no more, closed when unused
        self._starting: set[asyncio.Task[None]] = set()
        self.retirements = 0

    async def start(self, source: str, *, replay: bool) -> None:
        """`source`'s template for this role, started now if it is not (`EnvPool.prepare`)."""
        key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), replay)
        await self._template(key, source)

    async def fork(self, source: str, *, replay: bool) -> Launched:
        """A forked instance of `source`'s template for this role (started on first use).
        TemplateUnavailable when templates cannot run here; SandboxStartError when this
        template could not fork."""
        key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), replay)
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            template = await self._template(key, source)
            if template.full(self.limits):
                self._retire(key, template)
                template = await self._template(key, source)
            forking = loop.run_in_executor(_forkers(), template.fork, self.limits)
            try:
                return await asyncio.shield(forking)
            except asyncio.CancelledError:   # the fork completes in its thread: discard it then
                forking.add_done_callback(discard_when_started)
                raise
            except OSError as err:
                if template.dead is None or attempt:
                    raise start_error(err) from None
                self._drop(key, template)   # a dead template: start a new one once
        raise AssertionError("unreachable")

    async def _template(self, key: tuple[str, bool], source: str) -> Template:
        future = self._templates.get(key)
        if future is None:
            await self._evict()
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._templates[key] = future
            # a task of its own, not the opener's: an opener cancelled while the template
            # starts (a run stopped, a served client gone) leaves the start to finish for the
            # next open of the source, which would otherwise wait on it forever
            starting = loop.create_task(self._start(key, source, future))
            self._starting.add(starting)
            starting.add_done_callback(self._starting.discard)
        self._templates.move_to_end(key)
        return await asyncio.shield(future)

    async def _start(self, key: tuple[str, bool], source: str,
                     future: asyncio.Future[Template]) -> None:
        """Start `key`'s template and settle `future` with it, or with why it could not."""
        global _fallback_reason
        template = Template(key)
        error: BaseException
        try:
            await asyncio.get_running_loop().run_in_executor(
                launcher_threads(), template.start, self.limits, source)
        except TemplateUnavailable as err:
            _fallback_reason = str(err)
            error = err
        except OSError as err:
            error = start_error(err)
        except BaseException:   # cancelled: the pool is closing
            launcher_threads().submit(template.close)
            self._forget(key, future)
            future.cancel()
            raise
        else:
            future.set_result(template)
            return
        self._forget(key, future)
        future.set_exception(error)
        future.exception()   # retrieved: waiters, if any, raise it themselves

    def _forget(self, key: tuple[str, bool], future: asyncio.Future[Template]) -> None:
        if self._templates.get(key) is future:
            del self._templates[key]

    def _retire(self, key: tuple[str, bool], template: Template) -> None:
        """`template` forks no more (`Template.full`); the next fork of `key` starts a new
        one. It lives on for its instances and is closed once none is left."""
        future = self._templates.get(key)
        if future is not None and future.done() and not future.exception() \
                and future.result() is template:
            del self._templates[key]
            self._retired.append(template)
            self.retirements += 1
        unused = [t for t in self._retired if not t.live()]
        self._retired = [t for t in self._retired if t not in unused]
        for old in unused:
            launcher_threads().submit(old.close)

    def _drop(self, key: tuple[str, bool], template: Template) -> None:
        if self._templates.get(key) is not None and self._templates[key].done() \
                and not self._templates[key].exception() \
                and self._templates[key].result() is template:
            del self._templates[key]
        launcher_threads().submit(template.close)

    async def _evict(self) -> None:
        while len(self._templates) >= self.max_templates:
            for key, future in self._templates.items():
                if future.done() and not future.exception() and not future.result().live():
                    self._drop(key, future.result())
                    break
            else:
                return   # every template serves an instance: one more is allowed

    def pids(self) -> list[int]:
        """Host pids of the template sandboxes (bwrap), for tests and diagnostics."""
        return [f.result().pid or 0 for f in self._templates.values()
                if f.done() and not f.exception()]

    async def aclose(self) -> None:
        if self._starting:   # each settles its future: its template is closed below
            await asyncio.gather(*self._starting, return_exceptions=True)
        templates = [f.result() for f in self._templates.values()
                     if f.done() and not f.cancelled() and not f.exception()] + self._retired
        self._templates.clear()
        self._retired = []
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(launcher_threads(), t.close)
                               for t in templates))
