"""Deterministic identities of a run's work: the config fingerprint, environment ids, episode keys.

A key depends only on what decides the result, so running the same config again finds every
finished unit of work under the same key (docs/engine.md, "Keys and resume").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from envduels.config import RunConfig

# Settings that never change a result: how fast, how often retried, how much it may cost, where
# the results go, and metadata used only by reports. Everything else is fingerprinted.
_PLAYER_FREE = {"base_url", "api_key_env", "timeout_s", "max_retries", "max_concurrency",
                "requests_per_minute", "tokens_per_minute", "params_b", "price",
                "cache"}
_TOURNAMENT_FREE = {"rounds"}  # more (or fewer) rounds extend a run; earlier rounds are unchanged
_SANDBOX_KEPT = {"observation_max_chars"}


def result_settings(cfg: RunConfig) -> dict[str, Any]:
    """The result-affecting settings of a config, flattened to dotted keys (`players.gpt.model`)."""
    flat: dict[str, Any] = {"seed": cfg.seed, "players": [p.name for p in cfg.players]}
    for p in cfg.players:
        for k, v in p.model_dump(mode="json").items():
            if k not in _PLAYER_FREE and k != "name":
                flat[f"players.{p.name}.{k}"] = v
    for k, v in cfg.tournament.model_dump(mode="json").items():
        if k not in _TOURNAMENT_FREE:
            flat[f"tournament.{k}"] = v
    for k, v in cfg.sandbox.model_dump(mode="json").items():
        if k in _SANDBOX_KEPT:
            flat[f"sandbox.{k}"] = v
    return flat


def fingerprint(settings: dict[str, Any]) -> str:
    """sha256 of the result-affecting settings (canonical JSON)."""
    return _sha(json.dumps(settings, sort_keys=True))


def changed_setting(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first dotted key whose value differs between two `result_settings`, or None."""
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            return k
    return None


def authored_env_id(author: str, round_: int, slot: int) -> str:
    """Id of the environment `author` writes in `round_`, `slot` (unique within a run)."""
    return f"r{round_}-{author}-{slot}"


def episode_key(run_fingerprint: str, env_id: str, source_sha256: str, solver: str, seed: int,
                trial: int, hinted: bool) -> str:
    """sha256 identity of one episode: same inputs, same key, in every session of a run."""
    return _sha(json.dumps([run_fingerprint, env_id, source_sha256, solver, seed, trial, hinted]))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
