"""Inside the sandbox: the template of one environment's instances, a fork server.

Runs in the same namespace as _worker.py (the launcher compiles _worker.py's text followed by
this one). Standard library only. The template never runs the environment's code: it compiles
the source, imports the standard-library modules the source names (from an allow-list of
modules without import-time side effects), warms the request path up, and then only forks.
Each fork becomes one instance, and before any environment code exists the instance has:
its own mount, IPC and pid namespaces (its worker is pid 1 in its own; the network namespace
is its template's, where the filter leaves it no socket to make), its own host uid (the
harness's, one per live instance) behind two user namespaces of its own (it reads the same
uid as every other sandbox), a fresh private /tmp and a read-only /proc, every capability
dropped, no_new_privs and the seccomp filter, the instance rlimits, its own process group (no
new session: sessions number themselves host-wide), and no descriptor but its protocol pipes
and output. The template keeps no state per fork (no counter, no list of children; SIGCHLD is
ignored so the kernel reaps), its collector is frozen and disabled, and between forks it makes
no Python object, so every instance starts from the same memory image (docs/templates.md).

Usage: python -s -S -c PROGRAM template CTL_FD SECCOMP_FD OBS_CAP FRAME_MAX TEMPLATE_RLIMITS
       INSTANCE_RLIMITS SCRATCH_BYTES VISIBLE_ID FORK_FDS
VISIBLE_ID is the uid and gid an instance sees itself as; FORK_FDS the descriptors each fork
request carries. CTL_FD is a SOCK_SEQPACKET socket: first the source (b"S" + 8-byte length,
then chunks), the template answers b"ok" once ready; then each fork request, b"F" and the
instance's host uid (4 bytes, native byte order; the template's user namespace maps every
uid slot), carries (SCM_RIGHTS) the request
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
import faulthandler
import fcntl
import gc
import os
import signal
import socket
import sys

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_CLONE_NEWPID = 0x20000000
# No network namespace per instance (docs/sandbox.md, "No network namespace"): the seccomp
# filter leaves an instance no socket() of any family, no bind, connect or addressed send, so
# its instances, which share their template's namespace, have nothing to meet in it.
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 2
_PR_CAPBSET_READ, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 23, 24, 38, 22
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_DUMPABLE = 4
_SECCOMP_MODE_FILTER = 2
_CLONE_PIDFD, _SYS_CLONE3 = 0x00001000, 435   # clone3: one number on every architecture
_CLONE_CHILD_SETTID, _CLONE_NEWUSER = 0x01000000, 0x10000000
_MSG_NOSIGNAL = 0x4000
_FORK_FDS_MAX = 8   # request, response, output, status, and up to 4 cgroup.procs
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


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Cmsg(ctypes.Structure):   # a cmsghdr and its SCM_RIGHTS descriptors
    _fields_ = [("len", ctypes.c_size_t), ("level", ctypes.c_int), ("type", ctypes.c_int),
                ("fds", ctypes.c_int * _FORK_FDS_MAX)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.c_void_p), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


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
    """Set the template up, then serve forks; returns only in a forked child: the instance's
    descriptors and host uid (the caller then runs `_init`)."""
    ctl_fd, seccomp_fd = int(sys.argv[2]), int(sys.argv[3])
    obs_cap, frame_max = int(sys.argv[4]), int(sys.argv[5])
    template_limits, instance_limits, scratch = sys.argv[6], sys.argv[7], int(sys.argv[8])
    visible, fork_fds = int(sys.argv[9]), int(sys.argv[10])
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
    state = _instance_plan(libc, prog, filter_buf, covers, scratch, visible,
                           (obs_cap, frame_max, instance_limits))
    _probe_user_namespaces(state[-1])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the kernel reaps: no list of children
    serve, args, keep = _fork_server(libc, ctl.detach())
    del ctl
    gc.collect()
    gc.freeze()
    gc.disable()   # no collection counts that advance with the forks served
    # (after the collection, which empties the interpreter's free lists: the rehearsal
    # fills them again as every fork will find them)
    _rehearse(serve, args, keep[-1], fork_fds)
    os.write(args[0], b"ok")   # (the control socket, as a bare descriptor from here on)
    nfds = serve(*args)
    if nfds < 0:
        return None
    # In the instance's init from here on (the template never returns from serve). Only now
    # are Python objects made: the request's descriptors and uid, read from its buffers.
    _wipe_adaptive_code(serve.__code__)
    buf, cmsg = args[5], args[6]
    uid = int.from_bytes(bytes(buf[1:5]), sys.byteorder)
    return [list(cmsg.fds[:nfds]), uid, state]


def _wipe_adaptive_code(code):
    """Zero the instructions the adaptive interpreter rewrote in `code` as it ran (counters
    that advanced with every fork the template served): the code object is freed with
    `serve`, but freed memory keeps its bytes, and an instance can read its own memory
    (ctypes). They are the object's variable part (2-byte code units right after its fixed
    part, CPython 3.11 to 3.13), read nowhere first: a copy would leave them in the heap
    again. Where the object is not laid out so (checked by its unit count), nothing is
    written."""
    units = type(code).__itemsize__ == 2 and len(code.co_code) // 2
    size_at = id(code) + 2 * ctypes.sizeof(ctypes.c_void_p)   # ob_size, after refcount and type
    if units and ctypes.c_ssize_t.from_address(size_at).value == units:
        ctypes.memset(id(code) + type(code).__basicsize__, 0, 2 * units)


# The loop the template runs between forks, compiled from this text when the template starts:
# - it makes no Python object (ctypes calls into buffers made once, small ints only), so the
#   template's heap, reference counts and collector counts are the same at every fork;
# - the adaptive interpreter rewrites a loop's code as it runs (counters in the code object's
#   `_co_code_adaptive` advance with every iteration, so they count the forks served): this
#   code object is referenced only by the function `serve`, which a child drops by returning
#   from it, so no instance can reach it (the module's own code would keep it as a constant).
# A request is b"F" + the instance's uid (4 bytes) with 4 to 8 descriptors; anything else is
# dropped with its descriptors. The child is told apart by CLONE_CHILD_SETTID (the kernel
# writes the child's tid, 1, into the child's copy of `child`), so no pid becomes an object.
_FORK_LOOP = """
def serve(ctl, recvmsg, request_ref, request, request_size, buf, cmsg, clone, clone_args,
          clone_size, before, after_parent, after_child, child, pidfd, sendmsg, reply_ref,
          reply_cmsg, close, errno):
    while True:
        request.controllen = request_size
        cmsg.len = 0
        got = recvmsg(ctl, request_ref, 0)
        if got == 0:
            close(ctl)
            return -1   # the harness is gone
        if got < 0:
            if errno() == 4:   # EINTR
                continue
            return -1
        nfds = 0
        if cmsg.level == 1 and cmsg.type == 1 and cmsg.len > 16:   # SOL_SOCKET, SCM_RIGHTS
            nfds = (cmsg.len - 16) // 4
        if got == 5 and buf[0] == 70 and 4 <= nfds:   # b"F"
            i = 0   # (every name and buffer holds at each fork what it held at the last)
            child.value = 0
            pidfd.value = -1
            before()
            clone(435, clone_args, clone_size)
            if child.value:
                after_child()
                return nfds
            after_parent()
            if pidfd.value >= 0:
                # the harness signals and watches the init through this descriptor only, so a
                # pid number that the kernel reused is never the one it signals
                reply_cmsg.fds[0] = pidfd.value
                sendmsg(cmsg.fds[3], reply_ref, 16384)   # MSG_NOSIGNAL: it may have given up
                close(pidfd.value)
                reply_cmsg.fds[0] = -1
        i = 0
        while i < nfds:   # an instance's descriptors never stay in the template
            close(cmsg.fds[i])
            i += 1
"""


def _fork_server(libc, ctl):
    """`serve` (compiled from _FORK_LOOP) and its arguments: every buffer and C function it
    uses, made once. clone3 runs as os.fork() does (Python's fork hooks around it, so that
    `random` is reseeded and the interpreter's locks are reset in the child), straight into
    the instance's namespaces, with a pidfd; its init is the template's child, with no
    process in between, and the kernel reaps it (SIGCHLD is ignored)."""
    api = ctypes.pythonapi   # the GIL stays held across these calls, as in os.fork()
    syscall = ctypes.PyDLL(None, use_errno=True).syscall
    syscall.restype = None
    # A clone3 with no arguments fails with EINVAL where the kernel has it (5.3 on):
    # elsewhere the template does not start, and the pool uses fresh sandboxes.
    probe = ctypes.CDLL(None, use_errno=True).syscall
    if probe(ctypes.c_long(_SYS_CLONE3), None, ctypes.c_size_t(0)) != -1 \
            or ctypes.get_errno() != errno.EINVAL:
        _die(76, "no clone3 here (" + os.strerror(ctypes.get_errno()) + ")")
    child, pidfd = ctypes.c_int(0), ctypes.c_int(-1)
    clone_args = _CloneArgs(
        flags=(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID | _CLONE_PIDFD
               | _CLONE_CHILD_SETTID),
        pidfd=ctypes.addressof(pidfd), child_tid=ctypes.addressof(child),
        exit_signal=signal.SIGCHLD)
    buf = (ctypes.c_ubyte * 16)()
    cmsg, iov = _Cmsg(), _Iovec(ctypes.addressof(buf), 16)
    request = _Msghdr(iov=ctypes.addressof(iov), iovlen=1, control=ctypes.addressof(cmsg))
    out = (ctypes.c_ubyte * 1)(ord("p"))
    reply_cmsg = _Cmsg(len=16 + 4, level=socket.SOL_SOCKET, type=socket.SCM_RIGHTS)
    out_iov = _Iovec(ctypes.addressof(out), 1)
    reply_hdr = _Msghdr(iov=ctypes.addressof(out_iov), iovlen=1,
                        control=ctypes.addressof(reply_cmsg), controllen=24)  # CMSG_SPACE(4)
    namespace = {}
    exec(compile(_FORK_LOOP, "<envduels-fork-loop>", "exec"), namespace)
    serve = namespace.pop("serve")
    args = (ctl, libc.recvmsg, ctypes.byref(request), request, ctypes.sizeof(_Cmsg), buf, cmsg,
            syscall, ctypes.byref(clone_args), ctypes.sizeof(_CloneArgs), api.PyOS_BeforeFork,
            api.PyOS_AfterFork_Parent, api.PyOS_AfterFork_Child, child, pidfd, libc.sendmsg,
            ctypes.byref(reply_hdr), reply_cmsg, os.close, ctypes.get_errno)
    keep = (iov, out, out_iov, reply_hdr, clone_args)   # what the pointers above refer to
    return serve, args, keep


REHEARSALS = 32


def _rehearse(serve, args, clone_args, fork_fds):
    """Run `serve` through REHEARSALS forks of its own (plain forks, that exit at once)
    before the first instance. The adaptive interpreter specializes the loop's
    instructions on their 1st, 3rd, 7th, 15th... run, and an attempt looks attributes up
    in the type cache, whose first use of a slot drops a reference to None: an instance
    forked before those attempts would read another reference count than one forked
    after. Rehearsed, the first instance starts where every later one does (measured: no
    change after the 8th fork, over 4,500 forks). Requests like the harness's: b"F", a
    uid, `fork_fds` descriptors (the status socket fourth)."""
    flags = clone_args.flags
    clone_args.flags = _CLONE_PIDFD | _CLONE_CHILD_SETTID
    requests, sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    status, status_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(fork_fds)]
    os.dup2(status.fileno(), fds[3])
    for _ in range(REHEARSALS):
        sender.sendmsg([b"F\0\0\0\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                           array.array("i", fds))])
    sender.close()   # serve returns at the end of the requests
    if serve(requests.detach(), *args[1:]) >= 0:
        os._exit(0)   # a rehearsal's child
    for fd in fds:
        os.close(fd)
    status.close()
    status_peer.close()   # (with the pidfds sent to it)
    clone_args.flags = flags


def _instance_plan(libc, prog, filter_buf, covers, scratch, visible, worker_args):
    """Everything an instance's init does, worked out once in the template: the mounts, in
    order, its user namespaces, and the confinement calls with their arguments (the C
    functions looked up here: a lookup per instance would cost more than the calls)."""
    mount = libc.mount
    nosuid_nodev = _MS_NOSUID | _MS_NODEV
    # (/ made private first: the template's mount namespace belongs to bubblewrap's parent
    # user namespace, so only an instance's own copy can be changed)
    # /proc read-only: its files that write shared kernel state (the session's autogroup
    # nice, the audit session id behind loginuid) stay unwritable, as under bubblewrap
    mounts = [((None, b"/", None, _MS_REC | _MS_PRIVATE, None), "private /"),
              ((b"tmpfs", b"/tmp", b"tmpfs", nosuid_nodev, b"size=%d,mode=755" % scratch),
               "tmpfs /tmp"),
              ((b"proc", b"/proc", b"proc", nosuid_nodev | _MS_NOEXEC | _MS_RDONLY, None),
               "proc")]
    ro = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | nosuid_nodev | _MS_NOEXEC
    for point in covers:
        if os.path.exists(point):   # the same kernel objects in every instance's /proc
            path = point.encode()
            mounts += [((path, path, None, _MS_BIND | _MS_REC, None), "cover " + point),
                       ((None, path, None, ro, None), "cover ro " + point)]
    # A user namespace of an instance's own gives it every capability in it, the whole
    # bounding set included: each instance drops all of them, one prctl each.
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last_cap = int(fh.read())
    prctl = libc.prctl
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    no_caps = (ctypes.c_uint32 * 6)()
    confine = [(prctl, (_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping a capability")
               for cap in range(last_cap + 1)]
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
    userns = (libc.unshare, _CLONE_NEWUSER, str(visible).encode())
    return libc, mount, mounts, confine, (dumpable, *worker_args), keep, userns


def _probe_user_namespaces(userns):
    """Exit (the pool then uses fresh sandboxes) unless a child can take two user
    namespaces of its own, as every instance does: some kernels and security modules refuse
    unprivileged user namespaces inside a sandbox."""
    child = os.fork()
    if child == 0:
        try:
            os.chdir("/proc")
            _own_user(os.getuid(), userns)
            os._exit(0)
        finally:
            os._exit(77)
    _, code = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(code) != 0:
        _die(77, "the kernel refuses an instance's user namespaces")


def _take_uid(uid, dumpable):
    """The instance's own host uid (the harness's slot for it): the kernel's per-uid counts of
    processes, pipe buffers, descriptors in flight and queued signals are then its own. Taken
    before its mounts, so that its /tmp is its own too; with the capabilities the template
    holds in its user namespace (CAP_SETUID, CAP_SETGID), which stay: that namespace maps no
    uid 0."""
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    prctl, args = dumpable
    prctl(*args)   # (a changed uid made it not dumpable, and its /proc files root's)


def _own_user(uid, userns):
    """Two user namespaces of the instance's own, in which it is the same uid as every other
    sandbox: in the first, /proc/self/uid_map would show the host uid. Called with the
    template's /proc as the working directory (writable: the instance's own is read-only)."""
    unshare, newuser, visible = userns
    for lower in (str(uid).encode(), visible):
        if unshare(newuser) != 0:
            _die(77, "a user namespace failed: " + os.strerror(ctypes.get_errno()))
        for name, text in ((b"self/setgroups", b"deny"),
                           (b"self/uid_map", visible + b" " + lower + b" 1"),
                           (b"self/gid_map", visible + b" " + lower + b" 1")):
            fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, text)
            except OSError as err:
                _die(77, name.decode() + ": " + err.strerror)
            finally:
                os.close(fd)


def _init(forked):
    """pid 1 of the instance, which becomes its worker (docs/sandbox.md, "The worker is pid
    1"): it joins the instance's cgroups, takes its own uid, gives the instance its mounts
    and user namespaces, confines itself, and serves. No second process: a fork and an exit
    of an interpreter per instance saved (1.5 ms of CPU, measured). What environment code
    sees: a signal it sends its own process with no handler is ignored (the kernel shields a
    pid namespace's init), orphans are re-parented to it and reaped when the instance ends,
    and the pids cgroup counts them as before. Its exit status reaches the harness on the
    status socket (`_become_worker`)."""
    global _STATUS_FD
    fds, uid, state = forked
    forked.clear()   # (its uid, a random slot of its own, is no name the worker can read)
    req, resp, out, status, *procs = fds
    _STATUS_FD = status
    libc, mount, mounts, confine, worker_args, _keep, userns = state
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
    _take_uid(uid, worker_args[0])
    os.chdir("/proc")   # the template's /proc, for _own_user once the instance's covers it
    for args, what in mounts:
        _check(mount(*args), libc, what)
    _own_user(uid, userns)
    del uid
    os.chdir("/tmp")
    # Confined before the worker exists: the worker inherits the empty capability sets and
    # bounding set, no_new_privs and the filter across the fork (one filter load, one JIT
    # compilation per instance instead of two), and never runs a moment unconfined:
    # every capability (bounding, ambient, then every set), no_new_privs, the filter.
    for call, args, what in confine:
        _check(call(*args), libc, what)
    _STATUS_FD = -1
    _become_worker(req, resp, out, worker_args, status)


def _report_exit(code, _write=os.write, _exit=os._exit):
    """`os._exit` in an instance: the status goes to the harness first (pid 1's own exit
    status reaches nobody: the template reaps it unseen)."""
    try:  # noqa: SIM105
        _write(5, str(int(code) & 0xFF).encode())
    except BaseException:
        pass
    _exit(code)


def _become_worker(req, resp, out, worker_args, status):
    (prctl, dumpable), obs_cap, frame_max, instance_limits = worker_args
    prctl(*dumpable)   # as a fresh sandbox's worker: its own /proc files are its own
    # Descriptors: output on 1 and 2, requests on 3, responses on 4, the exit status on 5
    # (what environment code writes there changes only the reason given for its own exit).
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in (req, resp, status)]
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.dup2(moved[0], 3)
    os.dup2(moved[1], 4)
    os.dup2(moved[2], 5, inheritable=False)
    os.closerange(6, 1 << 20)
    os._exit = _report_exit
    # a fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL) names itself there too
    faulthandler.enable(file=5, all_threads=False)
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
    try:
        _forked = _template_main()
        if _forked is None:
            os._exit(0)   # the harness is gone
        # The init of an instance: what ran per fork is gone with serve's frame, and
        # nothing here names it.
        _init(_forked)
    finally:
        os._exit(75)
