"""Each concurrency limit of a run is decided in one place (`RunConfig.concurrency`), and the
scheduler, the players and their HTTP clients take it from there."""

from __future__ import annotations

import asyncio

from envduels.config import MAX_OPEN_SANDBOXES, PlayerConcurrency, parse_config

CONFIG = {
    "name": "limits", "sandbox": {"warm_workers": 2},
    "players": [
        {"name": "both", "provider": "openai", "model": "m", "max_concurrency": 3,
         "base_url": "http://127.0.0.1:9/v1"},
        {"name": "solver", "provider": "anthropic", "model": "m", "max_concurrency": 20,
         "roles": ["solver"], "base_url": "http://127.0.0.1:9", "api_key_env": "ENVDUELS_TEST_KEY"},
        {"name": "author", "provider": "openai", "model": "m", "max_concurrency": 50,
         "roles": ["author"], "base_url": "http://127.0.0.1:9/v1"}],
}


def test_one_object_decides_every_concurrency_limit_of_a_run():
    limits = parse_config(CONFIG).concurrency
    assert limits.players == {
        "both": PlayerConcurrency(units=3, http_keepalive=8, http_connections=16),
        "solver": PlayerConcurrency(units=20, http_keepalive=20, http_connections=40),
        "author": PlayerConcurrency(units=50, http_keepalive=50, http_connections=100)}
    assert limits.open_sandboxes == MAX_OPEN_SANDBOXES == 64
    # the pool keeps ready what the solvers can use at once (3 + 20; an author plays no episode)
    assert (limits.warm_sandboxes, limits.max_warm_sandboxes) == (2, 23)
    crowd = parse_config({**CONFIG, "players": [{**p, "max_concurrency": 4000} for p in CONFIG["players"]]})
    assert crowd.concurrency.max_warm_sandboxes == MAX_OPEN_SANDBOXES


def test_the_scheduler_and_the_players_take_their_limits_from_it(tmp_path, monkeypatch):
    from envduels.engine.progress import Progress
    from envduels.engine.scheduler import Tournament
    from envduels.players import build_players
    from envduels.store.writer import RunWriter

    monkeypatch.setenv("ENVDUELS_TEST_KEY", "sk-test")
    cfg = parse_config(CONFIG)
    limits = cfg.concurrency
    tournament = Tournament(cfg, writer=RunWriter(tmp_path), players={}, sandboxes=None, fingerprint="fp",
                            fixed_envs=[], progress=Progress(rounds=1))
    # one slot count per player, shared by the environments it authors and the episodes it solves
    assert {n: s._value for n, s in tournament._player_slots.items()} == {
        n: c.units for n, c in limits.players.items()}
    assert tournament._env_slots._value == limits.open_sandboxes

    async def clients():
        players = build_players(cfg, cache=None, run_seed=0)
        try:
            seen = {}
            for name, player in players.items():
                client = player.client()
                client = await client if asyncio.iscoroutine(client) else client
                pool = client._client._transport._pool   # the httpx pool the SDK sends through
                seen[name] = (player._semaphore._value, pool._max_keepalive_connections,
                              pool._max_connections)
            return seen
        finally:
            for player in players.values():
                await player.aclose()

    assert asyncio.run(clients()) == {
        n: (c.units, c.http_keepalive, c.http_connections) for n, c in limits.players.items()}
