"""A fixed pool (library, exports) is validated in a run like an authored environment (issue
29): its verdict is recorded as the run's attempt 0, an invalid one is never played, and the
verdict is kept in the per-user verdict cache, so the next run with the same pool reuses it.
On main a fixed pool was recorded valid without a look."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from envduels.engine.run import run_command
from envduels.envs import EnvSpec, write_export
from envduels.envs._verdict_cache import cache_dir
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-fixed-pool"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
MARK = "MARKED: this verdict came from the cache"


def _run(tmp_path: Path, base_url: str, run: str) -> Path:
    cfg = {"name": run, "seed": 5, "output_dir": str(tmp_path / run),
           "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                        "base_url": base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                        "roles": ["solver"], "max_retries": 1, "max_concurrency": 4}],
           "tournament": {"seeds_per_env": 2, "max_turns": 4,
                          "environments": [str(tmp_path / "pool")]},
           "sandbox": {"warm_workers": 1}}
    path = tmp_path / f"{run}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    return tmp_path / run


def test_a_fixed_pool_is_validated_in_the_run_and_its_verdicts_serve_the_next_run(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    write_export(tmp_path / "pool", [
        EnvSpec(id=name, source=(FIXTURES / f"{name}.py").read_text(), max_turns=4,
                domain="logic", author="someone", hints={"hint": "Guess well."},
                benchmark_seeds=(11, 22))
        for name in ("deceive_control", "deceive_probe")])
    with ScriptedServer(lambda model, messages: "\\boxed{1}", api_key=KEY) as server:
        first = _run(tmp_path, server.base_url, "first")
        with Store(first, create=False) as store:
            verdicts = {v["env_id"]: v for v in store.validations()}
            played = {e.env_id for e in store.episodes()}
            probe = store.environment("deceive_probe")
        assert {e: (v["attempt"], v["valid"]) for e, v in verdicts.items()} == {
            "deceive_control": (0, True), "deceive_probe": (0, False)}
        assert probe is not None and not probe.valid and probe.fixed_pool
        assert probe.invalid_reason.startswith("seed 11: not deterministic: ")
        assert played == {"deceive_control"}
        assert verdicts["deceive_control"]["verdict"]["battery"]["answer_seeds"] == 2
        cached = sorted(cache_dir().glob("*.json"))
        assert len(cached) == 2
        for path in cached:
            data = json.loads(path.read_text())
            # a cached warning comes with its flag (the cache refuses one without):
            # `seed_ignored`, informational, changes nothing the run does
            data["verdict"]["warnings"] = [MARK]
            data["verdict"]["flags"] = ["seed_ignored"]
            path.write_text(json.dumps(data))
        second = _run(tmp_path, server.base_url, "second")
    with Store(second, create=False) as store:
        assert all(v["verdict"].get("warnings") == [MARK] for v in store.validations())
        assert {e.env_id for e in store.episodes()} == {"deceive_control"}
