"""`envduels models check` makes one short call per player and reports each failure in one line."""

from __future__ import annotations

import yaml

from envduels.players import check_models
from envduels.players.commands import check_command
from envduels.testing import ScriptedServer


def _write(tmp_path, players):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"name": "check", "players": players}))
    return path


def test_all_players_answering_exits_zero(tmp_path, capsys) -> None:
    with ScriptedServer() as srv:
        path = _write(tmp_path, [{"name": "a", "provider": "openai", "model": "m", "base_url": srv.base_url}])
        assert check_command(path) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "openai" in out
    assert srv.requests[0]["messages"] == [{"role": "user", "content": "Reply with OK"}]
    assert srv.requests[0]["params"]["max_tokens"] == 8


def test_a_failing_player_is_reported_and_exits_one(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    dead = ScriptedServer()
    dead_url = dead.start()
    dead.stop()
    with ScriptedServer(models=["good"]) as srv:
        path = _write(tmp_path, [
            {"name": "good", "provider": "openai", "model": "good", "base_url": srv.base_url},
            {"name": "typo", "provider": "openai", "model": "gpt-typo", "base_url": srv.base_url},
            {"name": "nokey", "provider": "openai", "model": "m", "base_url": srv.base_url,
             "api_key_env": "NO_SUCH_KEY_VAR"},
            {"name": "down", "provider": "openai", "model": "m", "base_url": dead_url,
             "timeout_s": 2},
        ])
        assert check_command(path) == 1
    out = capsys.readouterr().out
    assert "set NO_SUCH_KEY_VAR" in out
    assert "unknown model" in out
    assert "failed" in out


async def test_check_rows_carry_latency_tokens_and_errors() -> None:
    from envduels.config import parse_config

    with ScriptedServer(latency_s=0.05) as srv:
        cfg = parse_config({"name": "c", "players": [
            {"name": "a", "provider": "openai", "model": "m", "base_url": srv.base_url},
            {"name": "b", "provider": "openai", "model": "m", "base_url": srv.base_url,
             "api_key_env": "NO_SUCH_KEY_VAR"}]})
        rows = await check_models(cfg)
    a, b = rows
    assert (a.player, a.ok, a.input_tokens, a.output_tokens, a.reply) == ("a", True, 3, 1, "OK")
    assert a.latency_s >= 0.05
    assert (b.ok, b.latency_s) == (False, None)
    assert b.error.startswith("player 'b': set NO_SUCH_KEY_VAR")
