"""Issue 19, the flags part: hint attacks a lift-maximising author would write, in whole
tournaments against the real scripted server and real sandboxes.

Five authors each write one environment (tests/fixtures/envs/attack_*.py with their
`.hint.txt`): a password vault, a hint that is the answer, a door that asks whether the solver
had a hint, an honest control and an honest environment whose hint teaches a procedure. One
solver plays them all, following the hint as a capable model would. On main at 2bf95f5 each
attack scored a lift of 0.5-0.75 with no flag (each has a seed or two that is free without the
hint); here validation's degenerate-policy battery flags each, and its episodes count as its
author's fault, while the two honest environments keep their lift and no flag.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from envduels.analysis import analyze
from envduels.analysis.metrics import HINT_IS_KEY, TRIVIAL, copied_win
from envduels.engine.run import run_command
from envduels.envs import EnvSpec, benchmark_seeds, write_export
from envduels.envs._battery import BATTERY_REASON
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-attack-test"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
ATTACKS = {"vault": HINT_IS_KEY, "answer": HINT_IS_KEY, "ask": TRIVIAL}
HONEST = ("control", "procedure")
NAMES = (*ATTACKS, *HONEST)
SEEDS = 4
SOLVER = "carol"
FREE_MARK = {"vault": "maintenance", "answer": "on the wall", "ask": "ajar",
             "control": None, "procedure": "four to eight"}


def _source(name: str) -> str:
    return (FIXTURES / f"attack_{name}.py").read_text()


def _hint(name: str) -> str:
    return (FIXTURES / f"attack_{name}.hint.txt").read_text().strip()


def _first_observation(name: str, seed: int) -> str:
    """The fixture's first observation for `seed`, from our own trusted fixture in-process."""
    namespace: dict = {}
    exec(compile(_source(name), f"attack_{name}.py", "exec"), namespace)
    cls = next(v for k, v in namespace.items() if isinstance(v, type) and hasattr(v, "step"))
    return cls().reset(seed)[0]


def _free_without_hint(name: str, observation: str) -> bool:
    """Whether the scripted solver wins this seed without the hint."""
    if name == "control":
        x, y = map(int, re.findall(r"\d+", observation)[:2])
        return x * y < 97
    return FREE_MARK[name] in observation


@cache
def _run_seed(env_ids: tuple[tuple[str, str], ...]) -> int:
    """The first run seed whose benchmark seeds give each attack one or two seeds free without
    the hint (so main's exact hint_gated is quiet and its lift above 0.25) and each honest
    environment exactly two (so its lift, 0.5, is well clear of hint_gated's tolerance)."""
    for run_seed in range(2000):
        free = {name: sum(_free_without_hint(name, _first_observation(name, s))
                          for s in benchmark_seeds(run_seed, env_id, SEEDS))
                for name, env_id in env_ids}
        if all(free[n] in (1, 2) for n in ATTACKS) and all(free[n] == 2 for n in HONEST):
            return run_seed
    raise AssertionError("no run seed gives the wanted mix of free seeds")


def solver(model: str, messages: list[dict]) -> str:
    """A capable solver that follows the hint: says the password, boxes the code it is shown,
    answers the door truthfully, applies the lock's rule, runs the panel's procedure."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    last = [m["content"] for m in messages if m["role"] == "user"][-1]
    hinted = first.startswith("Hint: ")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if "VAULT" in first:
        code = re.search(r"code (\d{5})", last)
        return f"\\boxed{{{code.group(1) if code else 'open sesame' if hinted else 'let me in'}}}"
    if "ORACLE" in first:
        told = re.search(r"answer is (\d+)", first) if hinted else re.search(r"wall: (\d+)", first)
        return f"\\boxed{{{told.group(1) if told else 7}}}"
    if "DOOR" in first:
        return "\\boxed{yes}" if hinted else "\\boxed{no}"
    if "LOCK" in first:
        x, y = map(int, re.search(r"shows (\d+) and (\d+)", first).groups())
        return f"\\boxed{{{x * y % 97 if hinted else x * y}}}"
    if "PANEL" in first:
        if hinted:
            steps = [0, 1, 3, 9, 27]
            if turn < len(steps):
                return f"\\boxed{{{steps[turn]}}}"
            read = re.findall(r"Place (\d+): digit (\d)", "\n".join(m["content"] for m in messages))
            return f"\\boxed{{{sum(int(p) * int(d) for p, d in read)}}}"
        if "four to eight" in first:
            return f"\\boxed{{{4 + turn}}}"
        return "I cannot tell. \\boxed{pass}"
    return "\\boxed{?}"


def _player(name: str, base_url: str, roles: list[str]) -> dict:
    return {"name": name, "provider": "openai", "model": f"m-{name}", "base_url": base_url,
            "api_key_env": "ENVDUELS_TEST_KEY", "roles": roles, "max_retries": 1,
            "timeout_s": 20, "max_concurrency": 8, "temperature": 0.0}


def _config(tmp_path: Path, base_url: str, *, authored: bool, pool: Path | None = None) -> Path:
    ids = tuple((n, f"r1-{n}-0" if authored else n) for n in NAMES)
    players = [_player(SOLVER, base_url, ["solver"])]
    if authored:
        players += [_player(n, base_url, ["author"]) for n in NAMES]
    cfg = {
        "name": "attacks", "seed": _run_seed(ids), "output_dir": str(tmp_path / "run"),
        "players": players,
        "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": SEEDS,
                       "trials_per_seed": 1, "max_turns": 8, "author_repairs": 0,
                       "environments": [str(pool)] if pool else []},
        "sandbox": {"warm_workers": 2},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def respond(model: str, messages: list[dict]) -> str:
    name = model.removeprefix("m-")
    if name in NAMES:
        return (f"```python\n{_source(name)}```\n<hint>{_hint(name)}</hint>\n"
                f"<domain>logic</domain>\n<title>{name}</title>")
    return solver(model, messages)


def _environments(run_dir: Path) -> tuple[dict[str, dict], dict[str, dict], Store]:
    store = Store(run_dir, create=False)
    j = analyze(store.tables(), bootstrap=0, convergence=False).json
    envs = {e["id"]: e for e in j["environments"]}
    authors = {a["model"]: a for a in j["authors"]}
    return envs, authors, store


@pytest.mark.slow
def test_each_hint_attack_is_flagged_by_the_battery_and_scored_as_its_authors_fault_the_honest_ones_keep_their_lift(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        assert run_command(_config(tmp_path, server.base_url, authored=True),
                           unsafe_no_sandbox=False, quiet=True) == 0
        solved = [next(m["content"] for m in r["messages"] if m["role"] == "user")
                  for r in server.requests if r["model"] == f"m-{SOLVER}"]
    # flagged in validation, so never played: no solver token spent on an attack
    assert not [t for t in solved if any(w in t for w in ("VAULT", "ORACLE", "DOOR"))]
    assert [t for t in solved if "LOCK" in t] and [t for t in solved if "PANEL" in t]
    envs, authors, store = _environments(tmp_path / "run")
    seeds = {n: store.environment(f"r1-{n}-0").benchmark_seeds for n in NAMES}
    free = {n: sum(_free_without_hint(n, _first_observation(n, s)) for s in seeds[n]) for n in NAMES}

    for name, flag in ATTACKS.items():
        env = envs[f"r1-{name}-0"]
        assert env["valid"] and env["flags"] == [flag], (name, env["flags"])
        assert env["lift"] is None and env["pairs"] == 0      # no lift at all, let alone 0.25
        # every episode is its author's fault, as a nondeterministic environment's would be
        assert authors[name]["author_faults"] == 2 * SEEDS
        verdict = store.validations(f"r1-{name}-0")[-1]["verdict"]
        assert verdict["flags"] == [flag] and verdict["battery"]["flag"] == flag
    # named as such in the report's findings, the viewer and export
    from envduels.export import Filters, select
    from envduels.report.story import findings
    from envduels.view._reader import analyse

    told = " ".join(findings(analyze(store.tables(), bootstrap=0, convergence=False).json))
    assert all(f"r1-{n}-0 by {n} ({flag}: " in told for n, flag in ATTACKS.items()), told
    seen = analyse(store, 0, bootstrap=0).envs
    assert {n: seen[f"r1-{n}-0"]["flags"] for n in ATTACKS} == {n: [f] for n, f in ATTACKS.items()}
    exported = select(store.environments(), store.tables(), Filters(flags=[HINT_IS_KEY, TRIVIAL]))
    assert {(e.env_id, tuple(e.flags)) for e in exported} == {
        (f"r1-{n}-0", (f,)) for n, f in ATTACKS.items()}

    eps = store.tables().episodes
    attacked = eps[eps.env_id.isin([f"r1-{n}-0" for n in ATTACKS])]
    assert set(attacked.outcome) == {"incomplete"}
    assert all(r.startswith(f"{BATTERY_REASON}: ") for r in attacked.reason)

    for name in HONEST:
        env = envs[f"r1-{name}-0"]
        assert env["valid"] and env["flags"] == [], (name, env["flags"])
        assert env["pairs"] == SEEDS and free[name] == 2
        assert (env["panel_no_hint"], env["panel_with_hint"], env["lift"]) == (0.5, 1.0, 0.5)
        assert authors[name]["author_faults"] == 0
    # the procedure's solver typed the steps the hint names (hint tokens) before its answer
    panel = eps[(eps.env_id == "r1-procedure-0") & eps.hinted]
    for transcript in panel.transcript:
        actions = [m["action"] for m in transcript if m.get("role") == "env"]
        assert actions[:5] == [f"\\boxed{{{n}}}" for n in (0, 1, 3, 9, 27)] and len(actions) == 6
    store.close()


@pytest.mark.slow
def test_from_an_export_the_attacks_get_the_same_battery_verdicts_and_the_procedure_is_no_leak(
        tmp_path, monkeypatch):
    """A fixed pool is validated in a run too (issue 29; on main it was not, and only the
    transcripts spoke about these files). The attacks get the verdicts an author's copy gets;
    the procedure's solver types five hint tokens and then a decoded code, which is no leak,
    now that no battery verdict can clear `hint_leak` (a copying policy that lost proves
    nothing about the hint)."""
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    ids = tuple((n, n) for n in NAMES)
    run_seed = _run_seed(ids)
    specs = [EnvSpec(id=n, source=_source(n), max_turns=8, domain="logic", author="library",
                     title=n, hints={"hint": _hint(n)},
                     benchmark_seeds=tuple(benchmark_seeds(run_seed, n, SEEDS)))
             for n in NAMES]
    pool = tmp_path / "pool"
    write_export(pool, specs)
    with ScriptedServer(respond, api_key=KEY) as server:
        assert run_command(_config(tmp_path, server.base_url, authored=False, pool=pool),
                           unsafe_no_sandbox=False, quiet=True) == 0
    envs, _authors, store = _environments(tmp_path / "run")
    assert {n: envs[n]["flags"] for n in ATTACKS} == {n: [f] for n, f in ATTACKS.items()}
    assert all(envs[n]["lift"] is None for n in ATTACKS)
    for name in HONEST:
        assert envs[name]["flags"] == [] and envs[name]["lift"] == 0.5, (name, envs[name])
    # the procedure's hinted wins typed hint tokens before the code: not copied wins
    eps = store.tables().episodes
    panel = eps[(eps.env_id == "procedure") & eps.hinted & (eps.outcome == "success")]
    assert len(panel) == SEEDS and not any(copied_win(t, _hint("procedure")) for t in panel.transcript)
    store.close()
