"""The players hand the run database a typed `CallRecord` (issue 31): made once, by the player
that paid for the call, refused where it is made when it holds a field it does not have, and
stored and read back exactly; the seam between the players and the store has no bare `dict`."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path

import pytest
from run_records import call

from envduels.duel.usage import Usage
from envduels.errors import UserError
from envduels.players import CallRecord, MemoryCache
from envduels.store.writer import RunWriter

SRC = Path(__file__).resolve().parents[2] / "src" / "envduels"


def test_a_call_record_with_a_field_it_does_not_have_is_refused_where_it_is_made():
    with pytest.raises(TypeError, match="unexpected keyword argument 'cost_usd'"):
        CallRecord(request={}, text="hi", finish_reason="stop", usage=Usage(calls=1),
                   player="p", role="solver", call_id="c", cost_usd=0.5)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'call_id'"):
        CallRecord(request={}, text="hi", finish_reason="stop", usage=Usage(calls=1),
                   player="p", role="solver")


def test_a_record_is_stored_in_the_shape_every_release_has_read_and_reads_back_whole(tmp_path):
    record = call("alice", "author", "author:r1-alice-0:attempt:0", text="```python\n```",
                  input_tokens=1200, output_tokens=300, cost_usd=0.0123, latency_s=2.5,
                  cache_read_tokens=1000, reasoning_tokens=40, saved_usd=0.002, retries=1,
                  request={"model": "m", "messages": [{"role": "user", "content": "write"}]})
    with RunWriter(tmp_path) as writer:
        writer.put("key", record)
        assert writer.get("key") == record
        totals = writer.reader.totals()
    db = sqlite3.connect(tmp_path / "run.db")
    (stored, columns), = [(json.loads(r[0]), r[1:]) for r in db.execute(
        "SELECT record, input_tokens, output_tokens, cost_usd, latency_s, cache_read_tokens,"
        " cache_write_tokens, reasoning_tokens, saved_usd FROM calls")]
    db.close()
    assert stored == {
        "request": {"model": "m", "messages": [{"role": "user", "content": "write"}]},
        "reply": {"text": "```python\n```", "finish_reason": "stop"},
        "usage": {"input_tokens": 1200, "output_tokens": 300, "reasoning_tokens": 40,
                  "cache_read_tokens": 1000, "cache_write_tokens": 0},
        "cost_usd": 0.0123, "saved_usd": 0.002, "latency_s": 2.5, "retries": 1,
        "player": "alice", "role": "author", "call_id": "author:r1-alice-0:attempt:0"}
    assert columns == (1200, 300, 0.0123, 2.5, 1000, 0, 40, 0.002)
    assert (totals.calls, totals.input_tokens, totals.cost_usd) == (1, 1200, 0.0123)


def test_a_record_written_before_the_prompt_cache_split_reads_as_all_input_uncached():
    old = {"request": {"model": "m"}, "reply": {"text": "hi", "finish_reason": "stop"},
           "usage": {"input_tokens": 7, "output_tokens": 2}, "cost_usd": 0.1, "latency_s": 1.0,
           "retries": 0, "player": "p", "role": "solver", "call_id": "c"}
    got = CallRecord.from_json(old)
    assert (got.usage.input_tokens, got.usage.cache_read_tokens, got.usage.saved_usd) == (7, 0, 0)
    with pytest.raises(ValueError, match="holds no answer"):
        CallRecord.from_json({"player": "p", "input_tokens": 1})


def test_the_memory_cache_keeps_the_record_as_json_like_the_run_database():
    cache = MemoryCache()
    record = call("p", text="x \ufffd")
    cache.put("k", record)
    assert cache.get("k") == record and cache.get("k") is not record


def _bare_dicts(path: Path) -> list[str]:
    """Every annotation in `path` that is `dict` without its key and value types."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        annotations = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations += [a.annotation for a in [*node.args.args, *node.args.kwonlyargs]
                            if a.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            for n in ast.walk(annotation):
                parent_subscripted = any(isinstance(s, ast.Subscript) and s.value is n
                                         for s in ast.walk(annotation))
                if isinstance(n, ast.Name) and n.id == "dict" and not parent_subscripted:
                    found.append(f"{path.name}:{node.lineno}")
    return found


def test_the_seam_between_the_players_and_the_run_database_has_no_bare_dict():
    seam = [SRC / "players" / "_cache.py", SRC / "players" / "_base.py",
            SRC / "store" / "writer.py", SRC / "store" / "_records.py"]
    assert [hit for path in seam for hit in _bare_dicts(path)] == []


def test_the_bare_dict_check_finds_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def put(key: str, record: dict) -> dict | None: ...\n"
                     "x: dict[str, dict] = {}\n")
    assert _bare_dicts(probe) == ["probe.py:1", "probe.py:1", "probe.py:2"]


@pytest.mark.parametrize("stored", ["null", "[]", "3", '"text"', "{not json",
                                    '{"reply": "x", "usage": {}}', "[" * 100_000, "9" * 5_000],
                         ids=["null", "array", "number", "string", "not-json", "no-answer",
                              "nested-100000-deep", "5000-digits"])
def test_an_unreadable_stored_call_is_one_line_naming_the_fix(tmp_path, stored):
    # a damaged run database: every shape is the one-line UserError (a non-object record once
    # escaped as AttributeError, which an episode recorded as a solver error on every resume)
    with RunWriter(tmp_path) as writer:
        writer.put("key", call("alice", "solver", "c1"))
    db = sqlite3.connect(tmp_path / "run.db")
    db.execute("UPDATE calls SET record = ? WHERE key = 'key'", (stored,))
    db.commit()
    db.close()
    with RunWriter(tmp_path, create=False) as writer, pytest.raises(UserError) as raised:
        writer.get("key")
    assert str(raised.value).startswith("the run database's record of call key is unreadable (")
    assert str(raised.value).endswith("); run with --no-cache to ask the provider again")
    assert "\n" not in str(raised.value)


def test_counts_that_are_no_finite_number_read_as_zero():
    # 1e400 is JSON's infinity to Python, 10**400 has no float: neither may stop a resume
    record = CallRecord.from_json({"reply": {"text": "x"}, "cost_usd": float("nan"),
                                   "usage": {"input_tokens": 1e400, "output_tokens": 10**400}})
    assert (record.usage.input_tokens, record.usage.output_tokens, record.usage.cost_usd) == (0, 0, 0.0)
