"""The environment as a value: `EnvSpec`, the `Verdict` of validation, benchmark seeds.

Everything here is pure: no sandbox, no files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from envduels._text import valid_text
from envduels.envs._battery import BatteryFindings

OracleStatus = Literal["passed", "failed", "absent", "skipped"]

DEFAULT_MAX_TURNS = 20
"""The contract's `__init__(self, max_turns: int = 20)` default, used when nothing says otherwise."""


@dataclass(frozen=True)
class EnvSpec:
    """One environment: its source and everything a run needs to play it.

    `hints` holds at least `{"hint": ...}` for authored environments; exports may carry graded
    `hint_1`/`hint_2` instead. An empty `hints` means no hint was supplied (a bare `.py` file).
    `benchmark_seeds` empty means: derive them from the run seed with `benchmark_seeds()`.
    """

    id: str
    source: str
    class_name: str | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    domain: str = "other"
    author: str = ""
    title: str = ""
    hints: dict[str, str] = field(default_factory=dict)
    benchmark_seeds: tuple[int, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def hint(self) -> str:
        """The hint shown in the hinted condition: `hints["hint"]`, else `hints["hint_1"]`, else ""."""
        return self.hints.get("hint") or self.hints.get("hint_1") or ""

    @property
    def source_sha256(self) -> str:
        """Hex sha256 of the UTF-8 source, as written in an export manifest. A lone surrogate
        (which UTF-8 cannot encode; environment code can hold one) counts as U+FFFD, the
        character the run database stores for it."""
        return hashlib.sha256(valid_text(self.source).encode("utf-8")).hexdigest()


@dataclass
class Verdict:
    """The outcome of `validate_env`.

    `reasons` holds one actionable line per failure and is empty exactly when `valid` is true.
    `oracle` is "passed" (won on every seed, replay identical), "failed", "absent" (the class has
    no `oracle_action`) or "skipped" (an earlier check failed, so the oracle never ran).
    """

    valid: bool
    reasons: list[str]
    oracle: OracleStatus
    class_name: str | None
    seeds: list[int]
    warnings: list[str] = field(default_factory=list)
    """Findings that do not make the environment invalid (one line each)."""
    flags: list[str] = field(default_factory=list)
    """Short names of those findings, e.g. `seed_ignored` (a fixed-pool environment that ignores
    its seed), `trivial` or `hint_is_key` (the degenerate-policy battery won it), `fixed_answer`
    (the oracle's winning answer is the same on every seed)."""
    battery: BatteryFindings | None = None
    """What the degenerate-policy battery found (`envs._battery.BatteryResult.to_json`) on a
    valid environment; None when it did not run."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with exactly the fields above; `warnings`, `flags` and `battery`
        only when there are any."""
        out: dict[str, Any] = {
            "valid": self.valid,
            "reasons": list(self.reasons),
            "oracle": self.oracle,
            "class_name": self.class_name,
            "seeds": list(self.seeds),
        }
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.flags:
            out["flags"] = list(self.flags)
        if self.battery is not None:
            out["battery"] = self.battery
        return out


def benchmark_seeds(run_seed: int, env_id: str, n: int) -> list[int]:
    """The `n` benchmark seeds of environment `env_id` in a run seeded `run_seed`.

    Seed i is the first 8 bytes of sha256("envduels-benchmark-seed/v1|{run_seed}|{env_id}|{i}"),
    big-endian, shifted right by one bit: a non-negative 63-bit integer. The derivation is part of
    the published contract and never changes, so the same run seed and environment id give the
    same seeds on every machine and every version; seed i does not depend on `n`.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    seeds = []
    for i in range(n):
        text = f"envduels-benchmark-seed/v1|{run_seed}|{env_id}|{i}"
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        seeds.append(int.from_bytes(digest[:8], "big") >> 1)
    return seeds
