"""A provider's content filter refusing an environment's text is that environment's fault: it can
neither stop a run (by tripping the filter on a solver's first request) nor drop a pair it would
lose (by tripping it on a win). The episode is `incomplete`, and a resume has nothing to redo."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from envduels.engine.run import run_command
from envduels.envs import EnvSpec, write_export
from envduels.store import Store
from envduels.testing import ScriptedServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "envs"
KEY = "sk-test-filter"


def _solver(model: str, messages: list[dict]) -> str:
    number = re.search(r"(?:FLAGGED-CONTENT|DODGE) (\d+)", messages[1]["content"])
    return f"I know it. \\boxed{{open-{int(number.group(1)) % 10}}}"


def _pool(folder: Path) -> Path:
    specs = [EnvSpec(id=name, source=(FIXTURES / f"{name}.py").read_text(), max_turns=4,
                     domain="language", author="library", title=name,
                     hints={"hint": "The word is open, a hyphen and the number's last digit."},
                     benchmark_seeds=(5, 6))
             for name in ("filter_first", "filter_dodge")]
    write_export(folder, specs)
    return folder


def test_an_environment_whose_text_a_provider_refuses_is_its_authors_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(_solver, api_key=KEY, refuse_content=["FLAGGED-CONTENT"]) as server:
        cfg = {"name": "filter", "seed": 1, "output_dir": str(tmp_path / "run"),
               "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                            "base_url": server.base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                            "roles": ["solver"], "max_concurrency": 1, "max_retries": 1}],
               "tournament": {"seeds_per_env": 2, "max_turns": 4,
                              "environments": [str(_pool(tmp_path / "pool"))]},
               "sandbox": {"warm_workers": 1}}
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
        asked = len(server.requests)
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0   # nothing to redo
        assert len(server.requests) == asked

    with Store(tmp_path / "run", create=False) as store:
        episodes = store.episodes()
    assert len(episodes) == 8
    assert {(e.env_id, e.outcome) for e in episodes} == {
        ("filter_first", "incomplete"), ("filter_dodge", "incomplete")}
    assert all(e.reason.startswith("content refused: player 'carol' ") and
               "the provider refused the conversation's content (400)" in e.reason
               for e in episodes)
