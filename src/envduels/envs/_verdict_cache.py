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

A cache file that cannot be read, is too large or does not hold a verdict is ignored (the
environment is validated again); nothing here ever fails a validation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from envduels.envs._spec import EnvSpec, Verdict

_MAX_BYTES = 1 << 20
_FORMAT = "envduels-verdict/v1"


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


def load(key: str) -> Verdict | None:
    """The cached verdict under `key`, or None (absent, unreadable, not a verdict)."""
    path = cache_dir() / f"{key}.json"
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > _MAX_BYTES:
                return None
            data = json.loads(fh.read(_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return _verdict(data, key)


def _verdict(data: object, key: str) -> Verdict | None:
    if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("key") != key:
        return None
    v = data.get("verdict")
    if not isinstance(v, dict):
        return None
    try:
        verdict = Verdict(valid=v["valid"], reasons=list(v["reasons"]), oracle=v["oracle"],
                          class_name=v["class_name"], seeds=list(v["seeds"]),
                          warnings=list(v.get("warnings", [])), flags=list(v.get("flags", [])),
                          battery=v["battery"] if isinstance(v.get("battery"), dict) else None)
    except (KeyError, TypeError):
        return None
    ok = (type(verdict.valid) is bool and all(isinstance(r, str) for r in verdict.reasons)
          and all(isinstance(w, str) for w in verdict.warnings + verdict.flags)
          and all(type(s) is int for s in verdict.seeds)
          and (verdict.class_name is None or isinstance(verdict.class_name, str)))
    return verdict if ok else None


def store(key: str, verdict: Verdict) -> None:
    """Keep `verdict` under `key` (written whole or not at all); a cache that cannot be
    written is skipped silently: it only saves time."""
    folder = cache_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = json.dumps({"format": _FORMAT, "key": key, "verdict": verdict.to_json()})
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".verdict-")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, folder / f"{key}.json")
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
