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
template answers b"ok" once ready; then each b"F" message carries five descriptors (SCM_RIGHTS):
request read end, response write end, output write end, status socket, credentials socket.
"""

# ruff: noqa: F821 (_limit_self, _warm_up, _compile_source, _serve, _PRECOMPILED and
# _MAIN_PID are _worker.py's: this file runs in the same namespace, after it)

import array
import ctypes
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
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 24, 38, 22
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SECCOMP_MODE_FILTER = 2
_CAP_VERSION_3 = 0x20080522

# Imported in the template when the source names them: standard-library modules whose import
# runs no user-visible side effect (no output, no thread, no process, no file). Any other
# import happens in the instance, as in a fresh sandbox.
_PRELOADABLE = frozenset(["abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "colorsys", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "hashlib", "heapq", "hmac", "itertools", "json", "keyword", "math", "numbers", "operator", "pprint", "random", "re", "statistics", "string", "struct", "textwrap", "types", "typing", "unicodedata", "uuid", "zlib"])


class _SockFilterProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _die(code, what):
    try:
        os.write(2, ("envduels template: " + what + "\n").encode())
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
    ctl.send(b"ok")
    state = (libc, prog, filter_buf, covers, obs_cap, frame_max, instance_limits, scratch)
    gc.collect()
    gc.freeze()
    gc.disable()   # no collection counts that advance with the forks served
    ancillary = socket.CMSG_SPACE(5 * 4)
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
        if msg == b"F" and len(fds) == 5:
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                try:
                    _instance(ctl, list(fds), state)
                finally:
                    os._exit(75)
        for fd in fds:
            os.close(fd)   # an instance's descriptors never stay in the template
        del msg, anc, fds


def _instance(ctl, fds, state):
    """The first child: new namespaces, then it forks the instance's init (pid 1 of its own pid
    namespace), reports the init's exit status on the status socket and stays until the
    harness closes that socket, so the init's pid is not reused before the harness lets go."""
    libc = state[0]
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ctl.close()
    req, resp, out, status, cred = fds
    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWNET | _CLONE_NEWPID), libc,
           "unshare")
    pid = os.fork()
    if pid == 0:
        os.close(status)
        _init(req, resp, out, cred, state)
    for fd in (req, resp, out, cred):
        os.close(fd)
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    code = info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
    try:
        os.write(status, str(code).encode())
        os.read(status, 1)   # until the harness closes its end
    finally:
        os._exit(0)


def _init(req, resp, out, cred, state):
    """pid 1 of the instance, as bubblewrap's init is in a fresh sandbox: it gives the
    instance its mounts, confines itself and forks the worker (pid 2), which inherits that, and
    reaps orphans; it exits with the worker's status (128 + n for a signal, as bwrap). Once
    confined it holds nothing the worker lacks (no descriptor, no capability), so, like
    bwrap's init, it is no boundary the worker could gain by reaching it."""
    libc, prog, _buf, covers = state[:4]
    scratch = state[7]
    # Its own process group (the harness kills the instance by group), but no new session:
    # each new session advances the host-wide autogroup id in /proc/self/autogroup, which
    # would number the instances (the seccomp filter denies setsid to environment code).
    os.setpgid(0, 0)
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), libc, "private /")
    _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV,
                      b"size=%d,mode=755" % scratch), libc, "tmpfs /tmp")
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None),
           libc, "proc")
    for point in covers:
        path = point.encode()
        if os.path.exists(point):
            _check(libc.mount(path, path, None, _MS_BIND | _MS_REC, None), libc, "cover")
            _check(libc.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY
                              | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), libc, "cover ro")
    os.chdir("/tmp")
    # Confined before the worker exists: the worker inherits the empty capability sets and
    # bounding set, no_new_privs and the filter across the fork (one filter load, one JIT
    # compilation per instance instead of two), and never runs a moment unconfined.
    _drop_privileges(libc, prog)
    worker = os.fork()
    if worker == 0:
        _become_worker(req, resp, out, cred, state)
    os.closerange(0, 1 << 20)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == worker:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status)
                     else 128 + os.WTERMSIG(status))


def _drop_privileges(libc, prog):
    """Every capability (bounding, ambient, then every set), no_new_privs, the seccomp filter."""
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), libc, "capset")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), libc, "no_new_privs")
    _check(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), libc,
           "seccomp")


def _become_worker(req, resp, out, cred, state):
    _libc, _prog, _buf, _covers, obs_cap, frame_max, instance_limits, _scratch = state
    os.setpgid(0, 0)   # its own group; no session (see _init); /dev/tty is /dev/null here
    # Descriptors: output on 1 and 2, requests on 3, responses on 4, nothing else at all.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in (req, resp, cred)]
    os.dup2(out, 1)
    os.dup2(out, 2)
    for target, fd in ((3, moved[0]), (4, moved[1]), (5, moved[2])):
        os.dup2(fd, target)
    os.closerange(6, 1 << 20)
    # (no capability, no_new_privs and the filter: inherited from the init, see _init)
    _limit_self(instance_limits)
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    sys.argv = [sys.argv[0], "3", "4", str(obs_cap), str(frame_max), instance_limits]
    gc.enable()
    # Tell the harness who we are: the kernel writes our pid as the harness sees it.
    sock = socket.socket(fileno=5)
    sock.send(b"i")
    sock.close()
    try:
        _serve(3, 4, obs_cap, frame_max)
    finally:
        os._exit(0)


if __name__ == "__main__" and sys.argv[1:2] == ["template"]:
    _template_main()
