"""`envduels export` end to end: run database -> export -> validate -> a fixed-pool run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from transfer_tables import env_row, pair_rows, write_run

from envduels.envs import library_env, load_export
from envduels.errors import UserError
from envduels.export.commands import export_command
from envduels.gym import register_export
from envduels.store import EnvRecord, RunReader

ENVDUELS = Path(sys.executable).parent / "envduels"
LIBRARY = ["knights_knaves", "number_guess", "caesar_cipher"]   # the export's order: by env id
AUTHORS = {"number_guess": "alice", "knights_knaves": "alice", "caesar_cipher": "bob"}
SEEDS = {"number_guess": [11, 12], "knights_knaves": [21, 22], "caesar_cipher": [31, 32]}


def _env(name: str, env_id: str | None = None) -> EnvRecord:
    spec = library_env(name)
    return env_row(env_id or f"r1-{AUTHORS.get(name, 'alice')}-{name}", AUTHORS.get(name, "alice"),
                   source=spec.source, class_name=spec.class_name, max_turns=spec.max_turns,
                   domain=spec.domain, hint=spec.hint, title=name, benchmark_seeds=SEEDS.get(name, [1, 2]),
                   metadata={"note": "kept"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("src") / "run"
    envs = [_env(n) for n in LIBRARY]
    envs.append(env_row("r1-bob-broken", "bob", valid=False, invalid_reason="no class", source="x = 1\n"))
    eps = []
    for e in envs[:3]:
        others = [s for s in ("alice", "bob", "carol") if s != e.author]
        for i, seed in enumerate(e.benchmark_seeds):
            for s in others:
                eps += pair_rows(e.env_id, e.author, s, seed, int(s == "carol" and i == 1), 1)
    write_run(run, envs, eps, players=["alice", "bob", "carol"])
    return run


def _export(run: Path, out: Path, fmt: str = "envduels", **filters) -> None:
    """The export command in this process (fast); the CLI itself is exercised separately."""
    kw = {"authors": [], "rounds": [], "flags": [], "min_pass": None, "max_pass": None,
          "target": None, **filters}
    assert export_command(run, out, fmt=fmt, **kw) == 0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENVDUELS), *args], capture_output=True, text=True, timeout=240)


def test_export_validate_and_fixed_pool_round_trip_keeps_sources_and_hashes(run_dir, tmp_path, monkeypatch):
    out = tmp_path / "export"
    proc = _cli("export", str(run_dir), str(out), "--format", "envduels")
    assert proc.returncode == 0, proc.stderr
    assert "exported 3 of 3 valid environments" in proc.stdout

    original = {e.env_id: e for e in RunReader(run_dir).environments()}
    specs = load_export(out)
    assert [s.id for s in specs] == [f"r1-{AUTHORS[n]}-{n}" for n in LIBRARY]
    for spec in specs:
        src = original[spec.id]
        assert spec.source.encode() == src.source.encode()
        assert spec.source_sha256 == src.source_sha256
        assert list(spec.benchmark_seeds) == list(src.benchmark_seeds)
        assert spec.hints == src.hints and spec.class_name == src.class_name
        assert spec.metadata["note"] == "kept"
        assert set(spec.metadata["results"]) == {"alice", "bob", "carol"} - {src.author}
    manifest = json.loads((out / "manifest.json").read_text())
    carol = manifest["environments"][0]["metadata"]["results"]["carol"]
    assert carol == {"no_hint_rate": 0.5, "hinted_rate": 1.0, "learnability": 0.25, "pairs": 2}

    proc = _cli("validate", str(out), "--json", "--seeds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["valid"] is True
    assert [e["id"] for e in verdict["environments"]] == [s.id for s in specs]

    # the engine plays the export as a fixed pool and records the very same environments
    from envduels.engine.commands import run_command
    from envduels.testing import ScriptedServer

    monkeypatch.setenv("ENVDUELS_TEST_KEY", "sk-test")
    with ScriptedServer(lambda model, messages: "\\boxed{pass}") as server:
        run2 = tmp_path / "pool-run"
        cfg = {
            "name": "pool", "seed": 3, "output_dir": str(run2),
            "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                         "base_url": server.base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                         "roles": ["solver"]}],
            "tournament": {"rounds": 1, "seeds_per_env": 2, "max_turns": 1,
                           "environments": [str(out)]},
        }
        (tmp_path / "pool.yaml").write_text(yaml.safe_dump(cfg))
        assert run_command(tmp_path / "pool.yaml", unsafe_no_sandbox=False, quiet=True) == 0
    replayed = {e.env_id: e for e in RunReader(run2).environments()}
    assert set(replayed) == {s.id for s in specs}
    for env_id, row in replayed.items():
        assert row.fixed_pool
        assert row.source.encode() == original[env_id].source.encode()
        assert row.source_sha256 == original[env_id].source_sha256
        assert list(row.benchmark_seeds) == list(original[env_id].benchmark_seeds)
    episodes = RunReader(run2).tables().episodes
    assert len(episodes) == 3 * 2 * 2  # every environment x its 2 seeds x both conditions


def test_filters_on_the_command_line_select_by_author_and_target(run_dir, tmp_path):
    out = tmp_path / "alice"
    _export(run_dir, out, authors=["alice"], target="carol")
    specs = load_export(out)
    # carol passed seed 2 cold and seed 1 only with the hint: only seed 1 is kept
    assert [(s.id, s.benchmark_seeds) for s in specs] == [
        ("r1-alice-knights_knaves", (21,)), ("r1-alice-number_guess", (11,))]


def test_jsonl_has_one_record_per_environment_and_seed(run_dir, tmp_path):
    out = tmp_path / "jsonl"
    _export(run_dir, out, "jsonl")
    rows = [json.loads(line) for line in (out / "environments.jsonl").read_text().splitlines()]
    assert [(r["id"], r["seed"]) for r in rows] == [
        (f"r1-{AUTHORS[n]}-{n}", s) for n in LIBRARY for s in SEEDS[n]]
    first = next(r for r in rows if r["id"] == "r1-alice-number_guess")
    spec = library_env("number_guess")
    assert (first["author"], first["domain"], first["max_turns"]) == ("alice", spec.domain, spec.max_turns)
    assert first["hint"] == spec.hint and first["source"] == spec.source
    assert first["source_sha256"] == spec.source_sha256
    assert {s["solver"] for s in first["solvers"]} == {"bob", "carol"}
    assert first["panel_no_hint_rate"] == 0.25 and first["learnability"] == 0.125


def test_hf_folder_loads_back_with_the_same_records(run_dir, tmp_path):
    from datasets import load_from_disk

    jsonl, hf = tmp_path / "j", tmp_path / "hf"
    _export(run_dir, jsonl, "jsonl")
    _export(run_dir, hf, "hf")
    expected = [json.loads(line) for line in (jsonl / "environments.jsonl").read_text().splitlines()]
    assert load_from_disk(str(hf)).to_list() == expected


def test_out_dir_must_be_empty_or_an_earlier_export(run_dir, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    proc = _cli("export", str(run_dir), str(out))
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "is not empty and holds no earlier envduels export" in proc.stderr
    assert (out / "thesis.tex").read_text() == "precious"

    again = tmp_path / "again"
    _export(run_dir, again, "jsonl")
    _export(run_dir, again, authors=["bob"])
    assert [s.id for s in load_export(again)] == ["r1-bob-caesar_cipher"]
    assert not (again / "environments.jsonl").exists()
    assert not list(tmp_path.glob(".again*"))


def test_an_earlier_export_with_a_file_of_the_user_in_it_is_not_replaced(run_dir, tmp_path):
    out = tmp_path / "out"
    _export(run_dir, out)
    (out / "notes.txt").write_text("mine")
    proc = _cli("export", str(run_dir), str(out))
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "holds files the earlier export did not write, such as notes.txt" in proc.stderr
    assert (out / "notes.txt").read_text() == "mine"
    assert load_export(out)  # the earlier export is intact


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--author", "zed"], "--author 'zed' wrote no environment in this run"),
        (["--format", "csv"], "--format 'csv' is unknown"),
        (["--min-pass", "0.99", "--max-pass", "1"], "no environment passes the filters"),
    ],
)
def test_bad_export_requests_are_one_line_errors(run_dir, tmp_path, args, message):
    proc = _cli("export", str(run_dir), str(tmp_path / "o"), *args)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


def test_missing_run_folder_is_a_one_line_error(tmp_path):
    proc = _cli("export", str(tmp_path / "nope"), str(tmp_path / "o"))
    assert proc.returncode != 0 and "does not exist" in proc.stderr and proc.stderr.count("\n") == 1


def test_hostile_environment_ids_cannot_write_outside_the_export(tmp_path):
    run = tmp_path / "run"
    ids = ["../../escaped", "/abs/olute", "..", "a/../../b"]
    write_run(run, [_env("number_guess", env_id=i) for i in ids], [], players=["alice"])
    before = set(tmp_path.rglob("*"))
    out = tmp_path / "nest" / "out"
    _export(run, out)
    created = set(tmp_path.rglob("*")) - before - {out.parent}
    assert created and all(p.resolve().is_relative_to(out.resolve()) for p in created)
    assert [s.id for s in load_export(out)] == sorted(ids)
    assert not Path("/abs").exists()


@pytest.mark.parametrize("bad", ["../outside.py", "/etc/passwd", "envs/../../outside.py"])
def test_a_manifest_path_escaping_the_folder_is_refused_on_read(run_dir, tmp_path, bad):
    out = tmp_path / "export"
    _export(run_dir, out)
    (tmp_path / "outside.py").write_text(library_env("number_guess").source)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["environments"][0]["source"] = bad
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="escapes the export folder"):
        load_export(out)
    with pytest.raises(UserError, match="escapes the export folder"):
        register_export(out)
    proc = _cli("validate", str(out))
    assert proc.returncode != 0 and "escapes the export folder" in proc.stderr


def test_a_symlink_leading_out_of_the_folder_is_refused_on_read(run_dir, tmp_path):
    out = tmp_path / "export"
    _export(run_dir, out)
    (tmp_path / "outside.py").write_text(library_env("number_guess").source)
    target = out / "envs" / "r1-alice-number_guess.py"
    target.unlink()
    target.symlink_to(tmp_path / "outside.py")
    with pytest.raises(UserError, match="outside the export folder"):
        register_export(out)


def test_register_export_gives_one_gym_id_per_environment(run_dir, tmp_path):
    import gymnasium

    out = tmp_path / "export"
    _export(run_dir, out)
    ids = register_export(out)
    assert ids == [f"envduels/r1-{AUTHORS[n]}-{n}-v0" for n in LIBRARY]  # the ids keep their hyphens
    env = gymnasium.make("envduels/r1-alice-number_guess-v0", hint_in_first_observation=True)
    try:
        obs, info = env.reset(options={"benchmark_index": 0})
        assert info["envduels"]["seed"] == SEEDS["number_guess"][0]
        assert obs.startswith("Hint: " + library_env("number_guess").hint)
    finally:
        env.close()
