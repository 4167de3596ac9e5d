"""The degenerate-policy battery of validation (envs/_battery.py) on real sandboxes."""

from __future__ import annotations

from envduels.analysis.metrics import HINT_IS_KEY, TRIVIAL
from envduels.envs import EnvSpec, validate_env

from .conftest import FIXTURES

VAULT_HINT = (FIXTURES / "attack_vault.hint.txt").read_text().strip()


async def test_the_battery_is_deterministic_per_salt_and_stops_once_settled(pool):
    spec = EnvSpec("vault", (FIXTURES / "attack_vault.py").read_text(), max_turns=6,
                   hints={"hint": VAULT_HINT})
    seeds = [11, 22, 33, 44]
    first = await validate_env(spec, pool, seeds=seeds, require_oracle=True, probe_seed="s")
    again = await validate_env(spec, pool, seeds=seeds, require_oracle=True, probe_seed="s")
    assert first.battery == again.battery and first.flags == again.flags
    assert first.battery["flag"] in (TRIVIAL, HINT_IS_KEY)
    # a policy stops at a majority won or out of reach: never more than its seeds
    assert all(p["seeds"] <= len(seeds) and p["won"] <= p["seeds"] for p in first.battery["policies"].values())
    assert first.battery["episodes"] <= 30


async def test_a_bare_file_without_a_hint_meets_only_the_hint_free_policies(pool):
    spec = EnvSpec("vault", (FIXTURES / "attack_vault.py").read_text(), max_turns=6)
    verdict = await validate_env(spec, pool, seeds=[11, 22], require_oracle=True, probe_seed="s")
    assert verdict.valid and verdict.battery["hint_phrases"] == 0
    assert not {"hint_copy", "hint_copy+echo"} & set(verdict.battery["policies"])
