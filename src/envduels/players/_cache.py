"""The response cache: a resumed or repeated run never pays twice for the same request.

A request key is the sha256 of the canonical JSON of the full request a provider would send:
provider, endpoint identity, model, messages, every sampling parameter and the seed. Keys and
records never contain credentials. The run database implements `ResponseCache` over SQLite;
`MemoryCache` serves tests and cache-less tools.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol, runtime_checkable


@runtime_checkable
class ResponseCache(Protocol):
    """Maps a request key to the record of its answer.

    A record is a JSON-serialisable dict: ``request`` (no secrets), ``reply`` (``text``,
    ``finish_reason``), ``usage`` (``input_tokens``, ``output_tokens``), ``cost_usd``,
    ``latency_s``, ``retries``, ``player``, ``role``, ``call_id``.
    """

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, record: dict) -> None: ...


class MemoryCache:
    """An in-process `ResponseCache`. Records are kept as JSON text, like the run database keeps
    them: a record that is not JSON-serialisable fails here too, and callers get fresh copies."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}

    def get(self, key: str) -> dict | None:
        record = self._records.get(key)
        return json.loads(record) if record is not None else None

    def put(self, key: str, record: dict) -> None:
        self._records[key] = json.dumps(record, ensure_ascii=False)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records


def canonical_json(obj: object) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the same request always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict) -> str:
    """The hex sha256 of the canonical request; the request must hold no secrets.

    Defined for any str: a lone surrogate (which strict UTF-8 refuses) is encoded with
    "surrogatepass", so the key stays deterministic; text without one gives the same bytes, and
    so the same key, as plain UTF-8 always did."""
    return hashlib.sha256(canonical_json(request).encode("utf-8", "surrogatepass")).hexdigest()
