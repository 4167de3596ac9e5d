"""A seccomp deny-list for sandboxed workers, compiled once with libseccomp (through ctypes).

Namespaces leave the host kernel's whole syscall surface open; this filter closes the parts an
environment never needs and exploits love: io_uring, bpf, userfaultfd, perf events, keyrings,
ptrace and cross-process memory access, the mount API, new namespaces (also through clone
flags), kernel modules and kexec, terminal injection, and every socket that could have a
name: socket() of any family (families a kernel autoloads are covered too), bind, connect,
listen, accept, sendmsg and sendto with an address; an unnamed socketpair(AF_UNIX) stays.

It also closes the channels through which a sandbox could leave state for a later one (or
see another's) on the shared host: the page cache (probed by `mincore`, `cachestat`,
`preadv2(RWF_NOWAIT)`, dropped by `posix_fadvise(DONTNEED)` and `madvise` PAGEOUT/COLD/
REMOVE), file-system notifications (`inotify_*`, `fanotify_*`, dnotify's `fcntl(F_NOTIFY)`, leases
`F_SETLEASE`/`F_GETLEASE`) and file locks on shared
read-only files (`flock`, `fcntl` record locks). `madvise(MADV_DONTNEED)` stays allowed: on a
file mapping it drops only this process's mapping, never a page-cache page, and malloc needs
it for anonymous memory.

And it closes host-wide counters that a fresh sandbox could read its start order from (an
environment relays a verdict from its play to its replay that way): the inode numbers of the
kernel's internal shmem mount (`memfd_create`, `memfd_secret`, SysV `shmget`/`shmat`/`shmctl`,
anonymous `MAP_SHARED` mappings: one counter for the whole host), pidfs inode numbers (a
pidfd's inode is a host-wide count of pids ever made: `pidfd_open`, `clone(CLONE_PIDFD)`,
`pidfd_getfd`, `pidfd_send_signal`), `kcmp`, and `setsid` (each new session advances the
host-wide autogroup id shown in /proc/self/autogroup; the launcher starts no session either).
Pipe and socket inode numbers come from another host-wide counter that stdlib code needs
(subprocess, asyncio): those stay, see docs/sandbox.md's threat table.

bwrap installs it (`--seccomp FD`) right before it executes the worker. Denied calls fail
with EPERM (clone3 with ENOSYS, so that libc falls back to the filterable clone; sockets with
EAFNOSUPPORT; locks with ENOLCK; preadv2/pwritev2 flags with EOPNOTSUPP, as on a kernel that
lacks them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import tempfile

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_CMP_NE = 1
_CMP_EQ = 4
_CMP_MASKED_EQ = 7

_DENY = [
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "ptrace", "process_vm_readv",
    "process_vm_writev", "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr", "unshare", "setns", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "acct", "swapon",
    "swapoff", "reboot", "syslog", "quotactl", "lookup_dcookie", "name_to_handle_at",
    "open_by_handle_at", "fanotify_init", "vhangup",
    # state shared with other sandboxes through the host: page cache, notifications
    "fadvise64", "fadvise64_64", "mincore", "cachestat", "process_madvise", "fanotify_mark",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    # host-wide counters a sandbox could read its start order from (module docstring)
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "kcmp", "setsid",
]
# Linux numbers of calls that libseccomp releases older than the kernel do not know by name
# (the same number on every architecture since 5.x: the unified syscall table).
_BY_NUMBER = {"cachestat": 451, "process_madvise": 440, "memfd_secret": 447,
              "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424}
_MADV_DENY = [9, 20, 21, 100, 101]   # REMOVE, COLD, PAGEOUT, HWPOISON, SOFT_OFFLINE
_FCNTL_LOCKS = [5, 6, 7, 36, 37, 38]  # F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK/SETLK/SETLKW
# F_SETLEASE, F_GETLEASE, F_NOTIFY: a lease breaks (and dnotify fires) when *another* process
# opens or reads the file, so both signal across sandboxes through shared read-only files.
_FCNTL_WATCH = [1024, 1025, 1026]
_AF_UNIX = 1
_CLONE_NEW = [0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
              0x02000000]   # NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP
_CLONE_PIDFD = 0x00001000
# mmap's flags: MAP_SHARED (0x01, also set in MAP_SHARED_VALIDATE 0x03) with MAP_ANONYMOUS
# (0x20) is a shmem object with an inode number from the host-wide counter; private
# anonymous memory (malloc) and file mappings stay allowed.
_MAP_SHARED_ANONYMOUS = 0x21
_IOCTL_DENY = [0x5412, 0x541C]   # TIOCSTI, TIOCLINUX (also why no new session is needed)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _unified_table() -> bool:
    """Whether this architecture numbers new syscalls from the shared table (all but alpha,
    ia64 and mips, which offset them)."""
    return os.uname().machine in ("x86_64", "aarch64", "arm64", "riscv64", "s390x", "ppc64le",
                                  "loongarch64")


def build_filter() -> bytes | None:
    """The compiled BPF program, or None when libseccomp is not available."""
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        return None
    try:
        def rule(action: int, syscall: str, *cmps: tuple[int, int, int, int]) -> None:
            nr = lib.seccomp_syscall_resolve_name(syscall.encode())
            if nr < 0:
                nr = _BY_NUMBER.get(syscall, -1) if _unified_table() else -1
            if nr < 0:   # not on this architecture
                return
            array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
            if rc < 0:
                raise OSError(-rc, f"seccomp rule for {syscall}: {os.strerror(-rc)}")

        eperm = _ERRNO | errno.EPERM
        for syscall in _DENY:
            rule(eperm, syscall)
        rule(_ERRNO | errno.ENOSYS, "clone3")
        for flag in _CLONE_NEW:
            rule(eperm, "clone", (0, _CMP_MASKED_EQ, flag, flag))
        rule(eperm, "clone", (0, _CMP_MASKED_EQ, _CLONE_PIDFD, _CLONE_PIDFD))
        rule(eperm, "mmap", (3, _CMP_MASKED_EQ, _MAP_SHARED_ANONYMOUS, _MAP_SHARED_ANONYMOUS))
        for call in ("socket", "socketpair"):   # an allow-list: AF_UNIX and nothing else
            rule(_ERRNO | errno.EAFNOSUPPORT, call, (0, _CMP_NE, _AF_UNIX, 0))
        # No socket with a name, so no instance can meet another (docs/sandbox.md, "No network
        # namespace"): no socket() at all (a connected socketpair stays), nothing bound,
        # connected, listened on or sent to an address. An unbound socketpair end can still
        # be given an abstract name by the kernel (autobind, with SO_PASSCRED) but can then
        # be reached only by a send to that address, which these deny.
        rule(eperm, "socket", (0, _CMP_EQ, _AF_UNIX, 0))
        for call in ("bind", "connect", "listen", "accept", "accept4", "sendmsg", "sendmmsg"):
            rule(eperm, call)
        rule(eperm, "sendto", (4, _CMP_NE, 0, 0))   # sendto(..., dest_addr): only NULL
        for advice in _MADV_DENY:
            rule(eperm, "madvise", (2, _CMP_MASKED_EQ, 0xFFFFFFFF, advice))
        for call in ("preadv2", "pwritev2"):   # flags (RWF_NOWAIT probes the page cache)
            rule(_ERRNO | errno.EOPNOTSUPP, call, (5, _CMP_NE, 0, 0))
        rule(_ERRNO | errno.ENOLCK, "flock")
        for command in _FCNTL_LOCKS:
            rule(_ERRNO | errno.ENOLCK, "fcntl", (1, _CMP_MASKED_EQ, 0xFFFFFFFF, command))
        for command in _FCNTL_WATCH:
            rule(eperm, "fcntl", (1, _CMP_MASKED_EQ, 0xFFFFFFFF, command))
        for request in _IOCTL_DENY:
            rule(eperm, "ioctl", (1, _CMP_MASKED_EQ, 0xFFFFFFFF, request))
        with tempfile.TemporaryFile() as fh:
            rc = lib.seccomp_export_bpf(ctx, fh.fileno())
            if rc < 0:
                return None
            fh.seek(0)
            return fh.read()
    except OSError:
        return None
    finally:
        lib.seccomp_release(ctx)
