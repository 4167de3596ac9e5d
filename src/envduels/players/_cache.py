"""The response cache: a resumed or repeated run never pays twice for the same request.

A request key is the sha256 of the canonical JSON of the full request a provider would send:
provider, endpoint identity, model, messages, every sampling parameter and the seed. Keys and
records never contain credentials. What the cache keeps of a call is a `CallRecord`, made here
by the players and stored as it is by the run database (`store.RunWriter` implements
`ResponseCache` over SQLite); `MemoryCache` serves tests and cache-less tools.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from envduels.duel.usage import Usage

Request: TypeAlias = dict[str, Any]
"""The full request a provider would send, as JSON (its model, messages, every sampling
parameter and the seed; never a credential): its canonical JSON is the cache key."""

RECORDED_TOKENS = ("input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens",
                   "cache_write_tokens")
"""The token counts a call record keeps under `usage` (the first two always; the others 0 when
absent, in records written before they were counted)."""


@dataclass(frozen=True)
class CallRecord:
    """One finished model call, as the response cache keeps it: made once, by the player that
    paid for it, and read back (`from_json`) when the same request is asked again.

    `request` is the full secret-free request (its canonical JSON is the key); `text` and
    `finish_reason` the answer; `usage` what the call took when it was paid (`calls` 1, the
    tokens, `cost_usd`, `saved_usd`, `retries`, `call_s` its seconds end to end). A field it
    does not have is refused where the record is made (TypeError): the run database stores
    exactly these.
    """

    request: Request
    text: str
    finish_reason: str
    usage: Usage
    player: str
    role: str
    call_id: str

    def to_json(self) -> dict[str, object]:
        """The record as the run database's `calls.record` holds it (and has since the first
        release): `request`, `reply` {`text`, `finish_reason`}, `usage` {the token counts},
        `cost_usd`, `saved_usd`, `latency_s`, `retries`, `player`, `role`, `call_id`."""
        u = self.usage
        return {"request": dict(self.request),
                "reply": {"text": self.text, "finish_reason": self.finish_reason},
                "usage": {name: int(getattr(u, name)) for name in RECORDED_TOKENS},
                "cost_usd": u.cost_usd, "saved_usd": u.saved_usd, "latency_s": u.call_s,
                "retries": int(u.retries), "player": self.player, "role": self.role,
                "call_id": self.call_id}

    @classmethod
    def from_json(cls, record: Mapping[str, object]) -> CallRecord:
        """The record `to_json` wrote (by this or an earlier envduels: a count it lacks reads
        as 0, as does one that is not a finite number). ValueError when it is no mapping or holds
        no answer."""
        if not isinstance(record, Mapping):
            raise ValueError("the call record is not a JSON object")
        reply, tokens = record.get("reply"), record.get("usage")
        if not isinstance(reply, Mapping) or not isinstance(reply.get("text"), str):
            raise ValueError("the call record holds no answer")
        tokens = tokens if isinstance(tokens, Mapping) else {}
        request = record.get("request")
        usage = Usage(calls=1, cost_usd=_number(record.get("cost_usd")),
                      saved_usd=_number(record.get("saved_usd")),
                      retries=int(_number(record.get("retries"))),
                      call_s=_number(record.get("latency_s")),
                      **{name: int(_number(tokens.get(name))) for name in RECORDED_TOKENS})
        return cls(request=dict(request) if isinstance(request, Mapping) else {},
                   text=reply["text"], finish_reason=str(reply.get("finish_reason", "")),
                   usage=usage, player=str(record.get("player") or ""),
                   role=str(record.get("role") or ""), call_id=str(record.get("call_id") or ""))


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        number = float(value)
    except OverflowError:   # an integer too large for a float
        return 0.0
    return number if math.isfinite(number) else 0.0


@runtime_checkable
class ResponseCache(Protocol):
    """Maps a request key to the `CallRecord` of its answer."""

    def get(self, key: str) -> CallRecord | None: ...

    def put(self, key: str, record: CallRecord) -> None: ...


class MemoryCache:
    """An in-process `ResponseCache`. Records are kept as JSON text, like the run database keeps
    them: a record that is not JSON-serialisable fails here too, and callers get fresh copies."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}

    def get(self, key: str) -> CallRecord | None:
        record = self._records.get(key)
        return CallRecord.from_json(json.loads(record)) if record is not None else None

    def put(self, key: str, record: CallRecord) -> None:
        self._records[key] = json.dumps(record.to_json(), ensure_ascii=False)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records


def canonical_json(obj: object) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the same request always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: Request) -> str:
    """The hex sha256 of the canonical request; the request must hold no secrets.

    Defined for any str: a lone surrogate (which strict UTF-8 refuses) is encoded with
    "surrogatepass", so the key stays deterministic; text without one gives the same bytes, and
    so the same key, as plain UTF-8 always did."""
    return hashlib.sha256(canonical_json(request).encode("utf-8", "surrogatepass")).hexdigest()
