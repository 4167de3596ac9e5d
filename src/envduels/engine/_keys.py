"""Deterministic identities of a run's work: the config fingerprint, environment ids, episode keys.

A key depends only on what decides the result, so running the same config again finds every
finished unit of work under the same key (docs/engine.md, "Keys and resume").
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

from envduels.config import RunConfig, changes_results


def result_settings(cfg: RunConfig) -> dict[str, object]:
    """The result-affecting settings of a config, flattened to dotted keys (`players.gpt.model`).

    Which settings those are is declared on the fields in `config.py` (every field unless it is
    declared `NO_RESULT_EFFECT`), so a new field enters the fingerprint without an edit here.
    Nested sections are flattened (`tournament.max_turns`); a list of named sections (players)
    records its names in order under its own key and each item under `key.NAME.`.
    """
    return _flatten(cfg, "")


def _flatten(model: BaseModel, prefix: str, *, identity: str | None = None) -> dict[str, object]:
    flat: dict[str, object] = {}
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        if name == identity or not changes_results(field):
            continue
        value, key = getattr(model, name), prefix + name
        if isinstance(value, BaseModel):
            flat.update(_flatten(value, key + "."))
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            flat[key] = [item.name for item in value]   # named sections: the order is a setting too
            for item in value:
                flat.update(_flatten(item, f"{key}.{item.name}.", identity="name"))
        else:
            flat[key] = dumped[name]
    return flat


def fingerprint(settings: dict[str, object]) -> str:
    """sha256 of the result-affecting settings (canonical JSON)."""
    return _sha(json.dumps(settings, sort_keys=True))


def changed_setting(old: dict[str, object], new: dict[str, object]) -> str | None:
    """The first dotted key whose value differs between two `result_settings`, or None."""
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            return k
    return None


def episode_key(run_fingerprint: str, env_id: str, source_sha256: str, solver: str, seed: int,
                trial: int, hinted: bool) -> str:
    """sha256 identity of one episode: same inputs, same key, in every session of a run."""
    return _sha(json.dumps([run_fingerprint, env_id, source_sha256, solver, seed, trial, hinted]))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
