"""A per-user cache of validation verdicts for fixed-pool environments (library, exports).

Validating an environment runs dozens of sandboxed episodes; a library or export environment
whose source has not changed, validated by a validator that has not changed, with the same
seeds and options, gets the same verdict, so `envduels validate` reuses it. The key is a
SHA-256 of all of: the environment's source hash, class name, turn cap and hints, the seeds,
the options (require_oracle, hint_max_chars, fixed_pool) and the validator's hash, which is
that of every Python file of the installed `envduels` package and of the sandbox's
interpreter binary: any change to the code that judges (or to anything it imports from
envduels) is a new validator. `--revalidate` ignores the cache; ENVDUELS_CACHE_DIR moves it
(default `$XDG_CACHE_HOME/envduels/verdicts`, else `~/.cache/envduels/verdicts`).

Anyone can compute a key, so a verdict is only as good as the folder it came from: the cache
trusts its owner alone (docs/environments.md, "The verdict cache").
- The folder: every component of its real path is opened one below the other (`openat` with
  O_NOFOLLOW, so what is checked is what is used) and `fstat`ed: each must belong to the user
  or root, and none may be writable by group or others unless sticky (`/tmp`); the verdicts
  folder itself must be the user's and writable by no one else. A folder that fails is not
  read or written, with one warning line naming it and the fix.
- An entry: opened with O_NOFOLLOW inside that folder, a regular file of the user's that no one
  else can write, of at most 1 MiB, whose every field passes `_Entry` (exact types, no extra
  field, the oracle one of four words, flags short names, reasons empty exactly when valid,
  the seeds those asked for). Anything else is one warning line and the verdict is judged
  afresh (and the entry replaced); nothing here ever fails a validation or raises.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from envduels._text import printable
from envduels.envs._battery import BatteryFindings
from envduels.envs._spec import EnvSpec, OracleStatus, Verdict

log = logging.getLogger("envduels.envs")

_MAX_BYTES = 1 << 20
_FORMAT = "envduels-verdict/v1"
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under an entry's name must not hang the open
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Line = Annotated[str, Field(max_length=100_000)]   # the file itself is at most 1 MiB
FlagName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]


def _identifier(name: str) -> str:
    if not name.isidentifier() or len(name) > 200:
        raise ValueError("class_name must be a Python identifier")
    return name


ClassName = Annotated[str, AfterValidator(_identifier)]
Seed = Annotated[int, Field(ge=-(2**63), le=2**64 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# The battery's own record (`envs._battery.BatteryFindings`, whose owner may add fields), as a
# strict model: the cache takes exactly its fields and types, nothing added.
_BATTERY_FIELDS: dict[str, Any] = {name: (hint, None)
                                   for name, hint in get_type_hints(BatteryFindings).items()}
_BATTERY = create_model("_Battery", __config__=ConfigDict(extra="forbid", strict=True),
                        **_BATTERY_FIELDS)


class _CachedVerdict(_Strict):
    """A `Verdict` as the cache keeps it (`Verdict.to_json`), every field checked."""

    valid: bool
    reasons: list[Line] = Field(max_length=1000)
    oracle: OracleStatus
    class_name: ClassName | None
    seeds: list[Seed] = Field(max_length=10_000)
    warnings: list[Line] = Field(default_factory=list, max_length=100)
    flags: list[FlagName] = Field(default_factory=list, max_length=100)
    battery: dict[str, Any] | None = None

    @field_validator("battery")
    @classmethod
    def _battery(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return _BATTERY.model_validate(value).model_dump(exclude_unset=True)
        except ValidationError as err:
            raise ValueError(_first_error(err)) from None

    @model_validator(mode="after")
    def _consistent(self) -> _CachedVerdict:
        if self.valid == bool(self.reasons):
            raise ValueError("reasons must be empty exactly when valid is true")
        if len(self.warnings) != len(self.flags):
            raise ValueError("every warning needs its flag")
        return self

    def verdict(self) -> Verdict:
        return Verdict(valid=self.valid, reasons=list(self.reasons), oracle=self.oracle,
                       class_name=self.class_name, seeds=list(self.seeds),
                       warnings=list(self.warnings), flags=list(self.flags),
                       battery=cast(BatteryFindings, self.battery))


class _Entry(_Strict):
    """One cache file: the format, its own key and the verdict."""

    format: Literal["envduels-verdict/v1"]
    key: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    verdict: _CachedVerdict


def cache_dir() -> Path:
    """Where verdicts are kept (not created here)."""
    if os.environ.get("ENVDUELS_CACHE_DIR"):
        return Path(os.environ["ENVDUELS_CACHE_DIR"]) / "verdicts"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envduels" / "verdicts"


def validator_hash(package: Path | None = None) -> str:
    """SHA-256 of every `.py` file of the envduels package (path and content) and of the
    sandbox interpreter's identity: the validator, and all it runs on."""
    root = package or Path(__file__).resolve().parents[1]
    return _hash_tree(str(root))


@lru_cache(maxsize=4)
def _hash_tree(root: str) -> str:
    digest = hashlib.sha256(b"envduels-validator/v1\0")
    base = Path(root)
    for path in sorted(base.rglob("*.py")):
        digest.update(str(path.relative_to(base)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    from envduels.sandbox._launcher import _find_python

    python = _find_python()[0]
    with contextlib.suppress(OSError):
        info = os.stat(python)
        digest.update(f"{python}\0{info.st_size}\0{info.st_mtime_ns}".encode())
    return digest.hexdigest()


def verdict_key(spec: EnvSpec, *, seeds: list[int], options: dict[str, Any],
                validator: str | None = None) -> str:
    """The cache key of validating `spec` with `seeds` and `options` under `validator`."""
    material = {
        "format": _FORMAT, "source": spec.source_sha256, "class_name": spec.class_name,
        "max_turns": spec.max_turns, "hints": dict(sorted(spec.hints.items())),
        "seeds": list(seeds), "options": dict(sorted(options.items())),
        "validator": validator or validator_hash(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class _Untrusted(ValueError):
    """A folder or file the cache must not rely on: `problem` says why, `fix` what to do (for
    an entry, nothing: the fresh verdict replaces it)."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def _mode(info: os.stat_result) -> str:
    return f"mode {stat.S_IMODE(info.st_mode):04o}"


def _check_dir(path: str, info: os.stat_result, *, own: bool) -> None:
    """Raise `_Untrusted` unless the folder `path` (fstat `info`) is one the cache may rely on:
    the verdicts folder itself (`own`) the user's and writable by no one else; a folder above
    it the user's or root's, writable by no one else unless sticky (then no one else can
    rename or replace what the user keeps in it)."""
    me = os.geteuid()
    owners = (me,) if own else (me, 0)
    if info.st_uid not in owners:
        whose = "you" if own or me == 0 else "you or root"
        raise _Untrusted(f"{path} belongs to uid {info.st_uid}, not to {whose} (uid {me})",
                         "set ENVDUELS_CACHE_DIR to a folder of your own "
                         "(mkdir -m 700 DIR), or remove that folder")
    writable = info.st_mode & _WRITABLE_BY_OTHERS
    if writable and (own or not info.st_mode & stat.S_ISVTX):
        raise _Untrusted(f"{path} can be written by others ({_mode(info)})",
                         f"chmod go-w {path}, or remove it if you did not make it so")


def _open_dir(folder: Path) -> int:
    """A descriptor of `folder` (the verdicts folder), checked component by component from
    `/` (see the module docstring). FileNotFoundError when some component does not exist,
    `_Untrusted` when one may not be relied on."""
    real = Path(os.path.realpath(folder))
    fd = os.open("/", _DIR_FLAGS)
    try:
        _check_dir("/", os.fstat(fd), own=False)
        walked = Path("/")
        for i, part in enumerate(real.parts[1:], start=2):
            walked = walked / part
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if isinstance(err, FileNotFoundError):
                    raise
                # ELOOP/ENOTDIR: replaced by a link or a file since realpath looked
                raise _Untrusted(f"{walked} is not a plain folder ({err.strerror})",
                                 f"remove {walked}") from None
            os.close(fd)
            fd = nxt
            _check_dir(str(walked), os.fstat(fd), own=i == len(real.parts))
        return fd
    except BaseException:
        os.close(fd)
        raise


@dataclass
class VerdictCache:
    """The verdicts folder as one `envduels validate` uses it: `load` and `store` by key.

    `open()` checks the folder once; an untrusted one is reported (one warning line) and then
    neither read nor written. Every problem is a warning on the `envduels.envs` logger (the
    CLI prints it on stderr), never an exception."""

    folder: Path
    trusted: bool

    @classmethod
    def open(cls) -> VerdictCache:
        """The user's cache (`cache_dir()`), checked."""
        folder = cache_dir()
        try:
            os.close(_open_dir(folder))
        except FileNotFoundError:
            pass   # nothing cached yet: `store` makes it
        except _Untrusted as err:
            _warn(f"ignoring the verdict cache {folder}: {err.problem}; every verdict is judged "
                  f"afresh. Fix: {err.fix}")
            return cls(folder, trusted=False)
        except OSError as err:   # unreadable: a cache only saves time
            _warn(f"ignoring the verdict cache {folder}: {err.strerror}; every verdict is "
                  "judged afresh")
            return cls(folder, trusted=False)
        return cls(folder, trusted=True)

    def load(self, key: str, *, seeds: list[int]) -> Verdict | None:
        """The verdict cached under `key` for `seeds`, or None (absent, untrusted, not a
        verdict: each but the first with one warning line)."""
        if not self.trusted:
            return None
        name = self.folder / f"{key}.json"
        try:
            dfd = _open_dir(self.folder)
        except (OSError, _Untrusted):
            return None   # gone or changed since `open`: judged afresh
        try:
            data = _read_entry(dfd, f"{key}.json")
        except FileNotFoundError:
            return None
        except OSError as err:
            problem = "it is a symbolic link" if err.errno == errno.ELOOP else err.strerror
            _warn(f"ignoring the cached verdict {name}: {problem}; it is judged afresh")
            return None
        except ValueError as err:   # _Untrusted too
            _warn(f"ignoring the cached verdict {name}: {err}; it is judged afresh and the "
                  "entry replaced")
            return None
        finally:
            os.close(dfd)
        try:
            entry = _Entry.model_validate_json(data)
        except ValidationError as err:
            problem = _first_error(err)
        else:
            if entry.key == key and entry.verdict.seeds == seeds:
                return entry.verdict.verdict()
            problem = ("it is filed under another key" if entry.key != key
                       else "its seeds are not the seeds asked for")
        _warn(f"ignoring the cached verdict {name}: {problem}; it is judged afresh and the "
              "entry replaced")
        return None

    def store(self, key: str, verdict: Verdict) -> None:
        """Keep `verdict` under `key` (written whole or not at all, with mode 0600); a cache
        that is untrusted or cannot be written is skipped silently: it only saves time."""
        if not self.trusted:
            return
        text = json.dumps({"format": _FORMAT, "key": key, "verdict": verdict.to_json()})
        with contextlib.suppress(OSError, _Untrusted):
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            dfd = _open_dir(self.folder)
            try:
                _write_entry(dfd, f"{key}.json", text)
            finally:
                os.close(dfd)


def _read_entry(dfd: int, name: str) -> bytes:
    """The bytes of entry `name` in the checked folder `dfd`: `_Untrusted` unless it is a
    regular file of the user's that no one else can write, of at most `_MAX_BYTES`."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Untrusted("it is not a regular file")
        if info.st_uid != os.geteuid():
            raise _Untrusted(f"it belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})")
        if info.st_mode & _WRITABLE_BY_OTHERS:
            raise _Untrusted(f"others can write it ({_mode(info)})")
        if info.st_size > _MAX_BYTES:
            raise _Untrusted(f"it is over {_MAX_BYTES} bytes")
        return fh.read(_MAX_BYTES + 1)


def _write_entry(dfd: int, name: str, text: str) -> None:
    """Write `text` as entry `name` of folder `dfd`: a fresh private file renamed over it."""
    tmp = f".verdict-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise


def _first_error(err: ValidationError) -> str:
    """The first problem pydantic found, as `field: problem` (never the value: it is the
    file's, and hostile)."""
    first = err.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "the file"
    return f"{where[:80]}: {first['msg'].removeprefix('Value error, ')[:200]}"


def _warn(line: str) -> None:
    """One warning line: paths and field names come from the environment and files, so the
    line goes through the sanitiser every printed text does, newlines included."""
    log.warning("%s", printable(line).replace("\n", " ").replace("\t", " "))
