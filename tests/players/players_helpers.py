"""Shared helpers for the players tests (a uniquely named module: tests are not a package)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envduels.config import PlayerConfig
from envduels.players import CallRecord, RetryPolicy

FAST = RetryPolicy(base_s=0.01, max_backoff_s=0.05, max_retry_after_s=5.0)
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello"}]


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """Mark tests that need an optional dependency: skipped where it is missing, except in CI
    (CI=true, as GitHub Actions sets it), which installs every dependency: there a missing one
    fails the module at collection, loudly, instead of turning its tests into silent skips."""
    if not available and os.environ.get("CI", "").strip().lower() in ("true", "1"):
        pytest.fail(f"CI=true but {reason}: CI must run these tests, not skip them", pytrace=False)
    return pytest.mark.skipif(not available, reason=reason)


def answer(model: str, messages: list[dict]) -> str:
    """The scripted model: names the model and the last message, so answers are checkable."""
    return f"{model} heard: {messages[-1]['content']}"


def player_config(base_url: str | None, **overrides: object) -> PlayerConfig:
    values: dict = {"name": "tester", "provider": "openai", "model": "scripted-1",
                    "base_url": base_url, "timeout_s": 5.0, "max_retries": 6}
    values.update(overrides)
    return PlayerConfig(**values)


class JsonFileCache:
    """A ResponseCache persisted as one JSON file, standing in for the run database."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, key: str) -> CallRecord | None:
        record = self._load().get(key)
        return CallRecord.from_json(record) if record is not None else None

    def put(self, key: str, record: CallRecord) -> None:
        data = self._load()
        data[key] = record.to_json()
        self.path.write_text(json.dumps(data))
