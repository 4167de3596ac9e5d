"""Inside the sandbox: the template of one environment's instances, a fork server.

Runs in the same namespace as _worker.py (the launcher compiles _worker.py's text followed by
this one). Standard library only. The template never runs the environment's code: it compiles
the source, imports the standard-library modules the source names (from an allow-list of
modules without import-time side effects), warms the request path up, and then only forks.
Each fork becomes one instance, and before any environment code exists the instance has:
its own mount, IPC, network and pid namespaces (pid 1 in its own), a fresh private /tmp and
/proc, every capability dropped, no_new_privs and the seccomp filter, the instance rlimits,
its own process group (no new session: sessions number themselves host-wide), and no
descriptor but its protocol pipes and output. The template keeps no
state per fork (no counter, no list of children; SIGCHLD is ignored so the kernel reaps), its
collector is frozen and disabled, so every instance starts from the same memory image.

Usage: python -s -S -c PROGRAM template CTL_FD SECCOMP_FD OBS_CAP FRAME_MAX TEMPLATE_RLIMITS
       INSTANCE_RLIMITS SCRATCH_BYTES
CTL_FD is a SOCK_SEQPACKET socket: first the source (b"S" + 8-byte length, then chunks), the
template answers b"ok" once ready; then each b"F" message carries (SCM_RIGHTS) the request
read end, the response write end, the output write end, the status socket, and 0 to 4
`cgroup.procs` descriptors of the instance's own groups, opened by the harness (the kernel
checks a cgroup move against the opener's credentials, so the instance moves itself: writing
"0" moves the writer). The template answers on the status socket with a pidfd of the
instance's init (SCM_RIGHTS); the init writes its exit status there before it exits.
"""

# ruff: noqa: F821 (_limit_self, _warm_up, _compile_source, _serve, _PRECOMPILED and
# _MAIN_PID are _worker.py's: this file runs in the same namespace, after it)

import array
import ctypes
import errno
import fcntl
import gc
import os
import signal
import socket
import sys

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 2
_PR_CAPBSET_READ, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 23, 24, 38, 22
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_DUMPABLE = 4
_SECCOMP_MODE_FILTER = 2
_CLONE_PIDFD, _SYS_CLONE3 = 0x00001000, 435   # clone3: one number on every architecture
_CAP_VERSION_3 = 0x20080522

# Imported in the template when the source names them: standard-library modules whose import
# runs no user-visible side effect (no output, no thread, no process, no file). Any other
# import happens in the instance, as in a fresh sandbox.
_PRELOADABLE = frozenset(["abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "colorsys", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "hashlib", "heapq", "hmac", "itertools", "json", "keyword", "math", "numbers", "operator", "pprint", "random", "re", "statistics", "string", "struct", "textwrap", "types", "typing", "unicodedata", "uuid", "zlib"])


class _SockFilterProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls",
        "set_tid", "set_tid_size", "cgroup")]


_STATUS_FD = -1   # in an instance's init: where its exit status goes (see _init)


def _die(code, what):
    try:
        os.write(2, ("envduels template: " + what + "\n").encode())
        if _STATUS_FD >= 0:
            os.write(_STATUS_FD, str(code).encode())
    finally:
        os._exit(code)


def _check(rc, libc, what):
    if rc != 0:
        _die(72, what + " failed: " + os.strerror(ctypes.get_errno()))


def _read_fd(fd):
    parts = []
    while part := os.read(fd, 65536):
        parts.append(part)
    os.close(fd)
    return b"".join(parts)


def _recv_source(ctl, frame_max):
    head = ctl.recv(16)
    if head[:1] != b"S" or len(head) != 9:
        _die(73, "expected the source")
    size = int.from_bytes(head[1:], "big")
    if size > frame_max:
        _die(73, "source too large")
    parts, got = [], 0
    while got < size:
        part = ctl.recv(65536)
        if not part:
            _die(73, "source cut short")
        parts.append(part)
        got += len(part)
    return b"".join(parts).decode("utf-8", "surrogatepass")


def _preimport(source):
    """Import the allowed standard-library modules the source names (top-level imports)."""
    for line in source.splitlines():
        words = line.replace(",", " ").split()
        if len(words) < 2 or words[0] not in ("import", "from"):
            continue
        names = words[1:2] if words[0] == "from" else [w for w in words[1:] if w != "as"]
        for name in names:
            top = name.split(".")[0]
            if top in _PRELOADABLE:
                try:  # noqa: SIM105 (no contextlib: the worker avoids imports)
                    __import__(top)
                except BaseException:
                    pass


def _proc_covers():
    """The read-only binds bubblewrap put over parts of /proc. The template removes them (a
    fresh proc may only be mounted where no proc is partly hidden) and every instance puts
    them back over its own /proc."""
    covers = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4]
            if point.startswith("/proc/"):
                covers.append(point)
    return covers


def _template_main():
    ctl_fd, seccomp_fd = int(sys.argv[2]), int(sys.argv[3])
    obs_cap, frame_max = int(sys.argv[4]), int(sys.argv[5])
    template_limits, instance_limits, scratch = sys.argv[6], sys.argv[7], int(sys.argv[8])
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    libc = ctypes.CDLL(None, use_errno=True)
    seccomp = _read_fd(seccomp_fd)
    if not seccomp or len(seccomp) % 8:
        _die(74, "no seccomp filter")
    filter_buf = ctypes.create_string_buffer(seccomp, len(seccomp))
    prog = _SockFilterProg(len(seccomp) // 8, ctypes.addressof(filter_buf))
    covers = _proc_covers()
    for point in reversed(covers):
        _check(libc.umount2(point.encode(), _MNT_DETACH), libc, "umount " + point)
    _limit_self(template_limits)
    ctl = socket.socket(fileno=ctl_fd)
    source = _recv_source(ctl, frame_max)
    _warm_up(obs_cap)
    global _PRECOMPILED
    _PRECOMPILED = _compile_source(source)
    _preimport(source)
    del source
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the kernel reaps: no list of children
    state = _instance_plan(libc, prog, filter_buf, covers, scratch,
                           (obs_cap, frame_max, instance_limits))
    clone = _Cloner()
    ctl.send(b"ok")
    gc.collect()
    gc.freeze()
    gc.disable()   # no collection counts that advance with the forks served
    ancillary = socket.CMSG_SPACE(8 * 4)
    while True:
        try:
            msg, anc, _flags, _addr = ctl.recvmsg(16, ancillary)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)   # the harness is gone
        fds = array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if msg == b"F" and 4 <= len(fds) <= 8:
            pid = clone.clone(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWNET | _CLONE_NEWPID)
            if pid == 0:
                try:
                    ctl.close()
                    _init(list(fds), state)
                finally:
                    os._exit(75)
            if pid > 0:
                # the harness signals and watches the init through this descriptor only, so
                # a pid number that the kernel reused is never the one it signals
                status = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, fds[3])
                try:  # noqa: SIM105 (no contextlib: the template imports nothing it needn't)
                    status.sendmsg([b"p"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                             array.array("i", [clone.pidfd]))])
                except OSError:
                    pass   # the harness gave up on this instance: the init dies with its pipes
                status.detach()
                del status   # nothing of one fork stays alive for the next (gc counts)
                os.close(clone.pidfd)
        # an instance's descriptors never stay in the template (closed with no loop variable:
        # a name bound only after the first fork would tell the first instance from the rest)
        list(map(os.close, fds))
        del msg, anc, fds


class _Cloner:
    """clone3 into new namespaces, with a pidfd, as os.fork() is done (Python's fork hooks
    around it, so that `random` is reseeded and the interpreter's locks are reset in the
    child): the init of an instance is the template's child, with no process in between.
    The template ignores SIGCHLD, so the kernel reaps it: the template keeps no state per
    fork, and the pidfd (not the pid) is what identifies the init afterwards."""

    def __init__(self):
        api = ctypes.pythonapi   # the GIL stays held across these calls, as in os.fork()
        self._before, self._parent, self._child = (
            api.PyOS_BeforeFork, api.PyOS_AfterFork_Parent, api.PyOS_AfterFork_Child)
        self._syscall = ctypes.PyDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long
        self._pidfd = ctypes.c_int(-1)
        self._args = _CloneArgs(pidfd=ctypes.addressof(self._pidfd),
                                exit_signal=signal.SIGCHLD)
        self._size = ctypes.sizeof(_CloneArgs)
        self.pidfd = -1
        # A clone3 with no arguments fails with EINVAL where the kernel has it (5.3 on):
        # elsewhere the template does not start, and the pool uses fresh sandboxes.
        if self._syscall(ctypes.c_long(_SYS_CLONE3), None, ctypes.c_size_t(0)) != -1 \
                or ctypes.get_errno() != errno.EINVAL:
            _die(76, "no clone3 here (" + os.strerror(ctypes.get_errno()) + ")")

    def clone(self, namespaces):
        """0 in the child, the child's pid in the template (self.pidfd its pidfd), -1."""
        self._args.flags = namespaces | _CLONE_PIDFD
        # the child inherits this object: the last fork's pidfd number would tell the first
        # instance of a template (which sees -1) from every later one
        self.pidfd = self._pidfd.value = -1
        self._before()
        pid = self._syscall(ctypes.c_long(_SYS_CLONE3), ctypes.byref(self._args),
                            ctypes.c_size_t(self._size))
        if pid == 0:
            self._child()
            return 0
        self._parent()
        self.pidfd = self._pidfd.value
        return pid if pid > 0 else -1


def _instance_plan(libc, prog, filter_buf, covers, scratch, worker_args):
    """Everything an instance's init does, worked out once in the template: the mounts, in
    order, and the confinement calls with their arguments (the C functions looked up here:
    a lookup per instance would cost more than the calls)."""
    mount = libc.mount
    nosuid_nodev = _MS_NOSUID | _MS_NODEV
    # (/ made private first: the template's mount namespace belongs to bubblewrap's parent
    # user namespace, so only an instance's own copy can be changed)
    mounts = [((None, b"/", None, _MS_REC | _MS_PRIVATE, None), "private /"),
              ((b"tmpfs", b"/tmp", b"tmpfs", nosuid_nodev, b"size=%d,mode=755" % scratch),
               "tmpfs /tmp"),
              ((b"proc", b"/proc", b"proc", nosuid_nodev | _MS_NOEXEC, None), "proc")]
    ro = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | nosuid_nodev | _MS_NOEXEC
    for point in covers:
        if os.path.exists(point):   # the same kernel objects in every instance's /proc
            path = point.encode()
            mounts += [((path, path, None, _MS_BIND | _MS_REC, None), "cover " + point),
                       ((None, path, None, ro, None), "cover ro " + point)]
    # What bubblewrap left in the bounding set (the two capabilities it was asked to keep):
    # each instance drops exactly these, one prctl each, instead of probing all 64.
    prctl = libc.prctl
    bounding = [cap for cap in range(64) if prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1]
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    no_caps = (ctypes.c_uint32 * 6)()
    confine = [(prctl, (_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping a capability")
               for cap in bounding]
    confine += [(prctl, (_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient"),
                (libc.capset, (header, no_caps), "capset"),
                (prctl, (_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs"),
                # not dumpable: the worker (same uid) may not reach the init's memory through
                # /proc/1/mem and so its status socket; the worker turns it back on for itself
                (prctl, (_PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable"),
                (prctl, (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
                 "seccomp")]
    keep = (filter_buf, header, no_caps)   # alive as long as the pointers above
    dumpable = (prctl, (_PR_SET_DUMPABLE, 1, 0, 0, 0))
    return libc, mount, mounts, confine, (dumpable, *worker_args), keep


def _init(fds, state):
    """pid 1 of the instance, as bubblewrap's init is in a fresh sandbox: it joins the
    instance's cgroups, gives the instance its mounts, confines itself and forks the worker
    (pid 2), which inherits all of that, and reaps orphans; it writes the worker's status
    (128 + n for a signal, as bwrap) on the status socket and exits with it. Once confined it
    holds nothing the worker lacks but that socket, and it is not dumpable, so the worker
    (same uid, no capability) can reach neither its memory nor its descriptors."""
    global _STATUS_FD
    req, resp, out, status, *procs = fds
    _STATUS_FD = status
    libc, mount, mounts, confine, worker_args, _keep = state
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # (inherited ignored) it waits for the worker
    os.dup2(out, 2)   # what goes wrong here reaches the instance's output
    # Into its memory, pids, cpu and freezer groups before it allocates or forks anything:
    # the worker is born in them, so the harness moves no process.
    for fd in procs:
        try:
            os.write(fd, b"0")
        except OSError as err:
            _die(72, "joining its cgroup failed: " + err.strerror)   # _template.JOIN_REFUSED
        os.close(fd)
    # Its own process group (the harness kills the instance by group), but no new session:
    # each new session advances the host-wide autogroup id in /proc/self/autogroup, which
    # would number the instances (the seccomp filter denies setsid to environment code).
    os.setpgid(0, 0)
    for args, what in mounts:
        _check(mount(*args), libc, what)
    os.chdir("/tmp")
    # Confined before the worker exists: the worker inherits the empty capability sets and
    # bounding set, no_new_privs and the filter across the fork (one filter load, one JIT
    # compilation per instance instead of two), and never runs a moment unconfined:
    # every capability (bounding, ambient, then every set), no_new_privs, the filter.
    for call, args, what in confine:
        _check(call(*args), libc, what)
    worker = os.fork()
    if worker == 0:
        os.close(status)
        _STATUS_FD = -1
        _become_worker(req, resp, out, worker_args)
    os.closerange(0, status)
    os.closerange(status + 1, 1 << 20)
    # The kernel shields a pid namespace's init only from signals it leaves at SIG_DFL, and
    # Python's SIGINT handler is not: the worker's kill(1, SIGINT) would end the init with no
    # status written, its fault misread as a CPU limit.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == worker:
            code = os.WEXITSTATUS(code) if os.WIFEXITED(code) else 128 + os.WTERMSIG(code)
            try:  # noqa: SIM105
                os.write(status, str(code).encode())
            except OSError:
                pass
            os._exit(code)


def _become_worker(req, resp, out, worker_args):
    (prctl, dumpable), obs_cap, frame_max, instance_limits = worker_args
    prctl(*dumpable)   # as a fresh sandbox's worker: its own /proc files are its own
    os.setpgid(0, 0)   # its own group; no session (see _init); /dev/tty is /dev/null here
    # Descriptors: output on 1 and 2, requests on 3, responses on 4, nothing else at all.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in (req, resp)]
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.dup2(moved[0], 3)
    os.dup2(moved[1], 4)
    os.closerange(5, 1 << 20)
    # (no capability, no_new_privs and the filter: inherited from the init, see _init)
    _limit_self(instance_limits)
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    sys.argv = [sys.argv[0], "3", "4", str(obs_cap), str(frame_max), instance_limits]
    gc.enable()
    try:
        _serve(3, 4, obs_cap, frame_max)
    finally:
        os._exit(0)


if __name__ == "__main__" and sys.argv[1:2] == ["template"]:
    _template_main()
