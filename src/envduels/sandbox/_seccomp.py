"""A seccomp deny-list for sandboxed workers, compiled once with libseccomp (through ctypes).

Namespaces leave the host kernel's whole syscall surface open; this filter closes the parts an
environment never needs and exploits love: io_uring, bpf, userfaultfd, perf events, keyrings,
ptrace and cross-process memory access, the mount API, new namespaces (also through clone
flags), kernel modules and kexec, terminal injection, and every socket family but AF_UNIX.
bwrap installs it (`--seccomp FD`) right before it executes the worker. Denied calls fail
with EPERM (clone3 with ENOSYS, so that libc falls back to the filterable clone).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import tempfile

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
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
]
_CLONE_NEW = [0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
              0x02000000]   # NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP
_SOCKET_FAMILIES = [2, 10, 16, 17, 40, 3, 4, 5, 9, 38, 44]  # INET, INET6, NETLINK, PACKET,
#                                        VSOCK, AX25, IPX, APPLETALK, X25, ALG, XDP
_IOCTL_DENY = [0x5412, 0x541C]   # TIOCSTI, TIOCLINUX


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


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
        for family in _SOCKET_FAMILIES:
            rule(_ERRNO | errno.EAFNOSUPPORT, "socket", (0, _CMP_EQ, family, 0))
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
