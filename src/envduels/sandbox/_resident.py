"""A RAM-resident copy of the part of /usr that the sandbox sees.

Why: a sandbox that reads a host file learns whether its page was in the host's page cache,
with no denied syscall and no clock: `/proc/self/io` `read_bytes` and `getrusage().ru_inblock`
grow only when a read went to the disk, and an mmap fault-around maps a neighbouring page
(visible as `Rss` in `/proc/self/smaps`) only when that page is cached. A read also *sets* the
bit. So fresh sandboxes of one seed could count up through host files, and an environment
could log its play and make its replay agree (docs/sandbox.md, threat table).

The fix is residency: every file the sandbox can read is a copy in a tmpfs (`/dev/shm`)
that this harness wrote once. A tmpfs page is always "in the page cache": reads never go to a
disk, fault-around always maps the neighbours, so those counters carry no information.

What is copied: the interpreter, its stdlib without the parts an environment never needs
(tests, IDLE, Tk, 2to3, ensurepip, the static-build `config-*` folder, site/dist-packages),
the C.UTF-8 locale, and only the shared libraries the interpreter and its extension modules
link (found with `ldd`, plus libgcc_s, which glibc loads on thread cancellation). About
40-50 MiB, once per harness process, removed at exit (and, if a harness was killed, by the
next one that starts).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

_PREFIX = "envduels-usr-"
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "site-packages", "dist-packages", "__phello__"}
_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


@dataclass(frozen=True)
class ResidentView:
    """A copy of the sandbox's /usr in RAM: bind `usr` read-only at /usr."""

    root: str
    usr: str
    size_bytes: int
    copy_s: float


def _tmpfs_folder() -> str | None:
    """/dev/shm when it is a tmpfs (RAM, no disk behind it), else None."""
    try:
        with open("/proc/self/mounts") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return None
    for fields in mounts:
        if len(fields) >= 3 and fields[1] == "/dev/shm" and fields[2] == "tmpfs":
            return "/dev/shm"
    return None


def _remove_stale(folder: str) -> None:
    """Remove copies left by harnesses of ours that were killed (their pid is gone)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if not entry.name.startswith(_PREFIX):
                continue
            pid = entry.name[len(_PREFIX):].split("-", 1)[0]
            try:
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not pid.isdigit():
                    continue
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue


def _linked_libraries(python: str, stdlib: str) -> list[str] | None:
    """Paths (as the loader finds them) of the shared libraries that `python` and its extension
    modules link, the loader included. None when ldd cannot say."""
    dynload = os.path.join(stdlib, "lib-dynload")
    modules = sorted(os.path.join(dynload, name) for name in os.listdir(dynload)
                     if name.endswith(".so")) if os.path.isdir(dynload) else []
    try:
        done = subprocess.run(["ldd", python, *modules], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 and not done.stdout:
        return None
    found = {m.group(1) for line in done.stdout.splitlines() if (m := _LDD_LINE.match(line))}
    return sorted(found) or None


def _copy_file(source: str, target_path: str, root: str) -> None:
    """Copy `source` (following links) to `root + target_path`, keeping its mode and mtime."""
    destination = root + target_path
    os.makedirs(os.path.dirname(destination), mode=0o755, exist_ok=True)
    shutil.copy2(os.path.realpath(source), destination)


def build(python: str, stdlib: str, multiarch: str) -> ResidentView | None:
    """Copy what the sandbox needs of /usr into a fresh folder in /dev/shm. None (the caller
    binds the host files and says so) when there is no tmpfs, no ldd, or a copy fails."""
    folder = _tmpfs_folder()
    if folder is None or not python.startswith("/usr/") or not stdlib.startswith("/usr/"):
        return None
    _remove_stale(folder)
    start = time.monotonic()
    root = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=folder)
    try:
        # 0711: the sandbox (another uid when we are root) must pass through; nobody but us
        # lists or writes it. The content is public /usr files, so reading is no leak.
        os.chmod(root, 0o711)
        libraries = _linked_libraries(python, stdlib)
        if libraries is None:
            raise OSError("ldd found no libraries")
        _copy_file(python, python, root)
        shutil.copytree(stdlib, root + stdlib, symlinks=True, ignore=_ignore_stdlib(stdlib))
        lib_dir = f"/usr/lib/{multiarch}" if multiarch else "/usr/lib"
        extra = [os.path.join(lib_dir, "libgcc_s.so.1")]
        for path in [*libraries, *(p for p in extra if os.path.exists(p))]:
            # Keep the name the loader looks for (libz.so.1), in the folder it searches, with
            # the real file's bytes; /lib and /lib64 are links into /usr on merged systems.
            target = os.path.join(os.path.realpath(os.path.dirname(path)),
                                  os.path.basename(path))
            if not target.startswith("/usr/"):
                raise OSError(f"library outside /usr: {path}")
            _copy_file(path, target, root)
        locale = "/usr/lib/locale/C.utf8"
        if os.path.isdir(locale):
            shutil.copytree(locale, root + locale, symlinks=True)
        for dirpath, _dirs, _files in os.walk(root + "/usr"):
            os.chmod(dirpath, 0o755)
        size = sum(os.lstat(os.path.join(d, f)).st_size
                   for d, _dirs, files in os.walk(root) for f in files)
    except (OSError, shutil.Error):
        shutil.rmtree(root, ignore_errors=True)
        return None
    atexit.register(shutil.rmtree, root, True)
    return ResidentView(root=root, usr=root + "/usr", size_bytes=size,
                        copy_s=time.monotonic() - start)


def _ignore_stdlib(stdlib: str):  # noqa: ANN202 - the callable shutil.copytree expects
    def ignore(folder: str, names: list[str]) -> set[str]:
        if os.path.realpath(folder) != os.path.realpath(stdlib):
            return set()
        return {n for n in names if n in _SKIP_STDLIB or n.startswith("config-")}
    return ignore
