"""Issue 29, the lift part: an answer handed over in any disguise earns nothing. Whole
tournaments against the real scripted server and real sandboxes.

Authors each write one environment (tests/fixtures/envs/lift_*.py with their `.hint.txt`): a
password behind a knock every solver passes, a reversed password, a spelled-out code, a door
that asks twice ("were you given a hint?", then the answer in capitals), and an honest control
whose hint teaches bisection. One solver plays them all, following the hint as a capable model
would. On main at 236244b each attack scored what the control does (no-hint 0.5, hinted 1.0,
lift 0.5) with no flag at all; here each is `fixed_answer` (its winning answer is the same on
every seed), its author's fault, while the control keeps its lift and no flag. The same files
from an export get the same verdicts (main did not validate a fixed pool in a run), and so does
a door asking "were you given a hint?" replayed from a hand-written export (main: lift 0.75,
only `hint_gated`). A knock whose oracle hides the password behind a code that changes with the
seed passes validation; play shows it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from envduels.analysis import analyze
from envduels.duel.protocol import Episode
from envduels.engine.run import run_command
from envduels.envs import EnvSpec, benchmark_seeds, write_export
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-lift-test"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
ATTACKS = ("knock", "reversed", "spelled", "twice")
CONTROL = "bisection"
NAMES = (*ATTACKS, CONTROL)
SEEDS = 4
SOLVER = "carol"
NUMBERS = {w: n for n, w in enumerate(("one", "two", "three", "four", "five", "six", "seven",
                                       "eight", "nine"), start=1)}


def _source(name: str) -> str:
    return (FIXTURES / f"lift_{name}.py").read_text()


def _hint(name: str) -> str:
    return (FIXTURES / f"lift_{name}.hint.txt").read_text().strip()


def _env_class(name: str) -> type:
    """The fixture's class, from our own trusted fixture, in-process."""
    namespace: dict = {}
    exec(compile(_source(name), f"lift_{name}.py", "exec"), namespace)
    return next(v for k, v in namespace.items() if isinstance(v, type) and hasattr(v, "step"))


_QUOTED = re.compile(r"'(\w+)'")
_SUM = re.compile(r"sum of (\w+) and (\w+)")
_GUESS = re.compile(r"\{(\d+)\}")


def _box(text: object) -> str:
    return "\\boxed{" + str(text) + "}"


def _bisect(first: str, messages: list[dict]) -> int:
    """The middle of what is still possible after the answers so far."""
    low, high = 1, int(re.search(r"from 1 to (\d+)", first).group(1))
    guesses = [int(_GUESS.search(m["content"]).group(1)) for m in messages if m["role"] == "assistant"]
    answers = [m["content"] for m in messages if m["role"] == "user"][1:]
    for guess, answer in zip(guesses, answers, strict=False):
        if "Higher" in answer:
            low = guess + 1
        elif "Lower" in answer:
            high = guess - 1
    return (low + high) // 2


def solver(model: str, messages: list[dict]) -> str:
    """A capable solver that follows the hint: knocks (any solver can add two small numbers),
    says the password it is given, reads it backwards when told, turns a spelled-out code into
    digits, answers the keeper truthfully, and bisects when taught to. Without the hint it
    reads what the environment shows and otherwise guesses."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    last = [m["content"] for m in messages if m["role"] == "user"][-1]
    hint = first.split("\n\n")[0].removeprefix("Hint: ") if first.startswith("Hint: ") else None
    turn = sum(1 for m in messages if m["role"] == "assistant")
    seen = "\n".join(m["content"] for m in messages if m["role"] == "user")
    if "KNOCK" in first:
        if turn == 0 or "Knock again" in last:
            a, b = _SUM.search(first).groups()
            return _box(NUMBERS[a] + NUMBERS[b])
        if hint is not None:
            return _box(_QUOTED.search(hint).group(1))
        chalk = re.search(r"chalked '(\w+)'", seen)
        return _box(chalk.group(1) if chalk else "let me in")
    if "REVERSED" in first:
        if hint is not None:
            return _box(_QUOTED.search(hint).group(1)[::-1])
        wall = re.search(r"wall: '(\w+)'", first)
        return _box(wall.group(1) if wall else "open")
    if "KEYPAD" in first:
        if hint is not None:
            spelled = re.search(r"is ([a-z-]+)", hint).group(1).split("-")
            return _box("".join(str(NUMBERS.get(w, 0)) for w in spelled))
        note = re.search(r"reads (\d+)", first)
        return _box(note.group(1) if note else "1234")
    if "TWICE" in first:
        if hint is None:
            return _box("no")
        return _box("yes" if turn == 0 else "YES")
    if "BISECTION" in first:
        return _box(_bisect(first, messages) if hint is not None else turn + 1)
    return _box("?")


def _wins(name: str, seed: int, *, hinted: bool) -> bool:
    """Whether `solver` wins `name` on `seed`: one episode in-process, by the duel's protocol."""
    env = _env_class(name)()
    episode = Episode(8, hint=_hint(name) if hinted else None)
    episode.start(env.reset(seed)[0])
    while not episode.done:
        action = episode.act(solver(f"m-{SOLVER}", episode.messages()))
        if action is None:
            continue
        observation, reward, terminated, truncated, _ = env.step(action)
        episode.observe(observation, reward, terminated, truncated)
    return episode.success


@cache
def _run_seed(ids: tuple[tuple[str, str], ...]) -> int:
    """The first run seed whose benchmark seeds leave exactly two of four seeds of every
    environment free without the hint (no-hint 0.5: main's battery and hint_gated stay quiet
    about the attacks, and the control's lift is 0.5)."""
    for run_seed in range(2000):
        if all(sum(_wins(name, s, hinted=False) for s in benchmark_seeds(run_seed, env_id, SEEDS))
               == 2 for name, env_id in ids):
            return run_seed
    raise AssertionError("no run seed gives two free seeds of four everywhere")


def _player(name: str, base_url: str, roles: list[str]) -> dict:
    return {"name": name, "provider": "openai", "model": f"m-{name}", "base_url": base_url,
            "api_key_env": "ENVDUELS_TEST_KEY", "roles": roles, "max_retries": 1,
            "timeout_s": 20, "max_concurrency": 8, "temperature": 0.0}


def _config(tmp_path: Path, base_url: str, *, seed: int, authors: tuple[str, ...] = (),
            pool: Path | None = None) -> Path:
    cfg = {
        "name": "lift", "seed": seed, "output_dir": str(tmp_path / "run"),
        "players": [_player(SOLVER, base_url, ["solver"]),
                    *(_player(n, base_url, ["author"]) for n in authors)],
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
    if name != SOLVER and (FIXTURES / f"lift_{name}.py").exists():
        return (f"```python\n{_source(name)}```\n<hint>{_hint(name)}</hint>\n"
                f"<domain>logic</domain>\n<title>{name}</title>")
    return solver(model, messages)


def _environments(run_dir: Path) -> dict[str, dict]:
    with Store(run_dir, create=False) as store:
        j = analyze(store.tables(), bootstrap=0, convergence=False).json
    return {e["id"]: e for e in j["environments"]}


def test_the_scripted_solver_needs_the_hint_on_every_attack_and_follows_it():
    """The fixtures behave as the module says: with the hint the solver wins every seed, and
    the attacks' winning answers do not change with the seed (what the rule looks at)."""
    for name in NAMES:
        assert all(_wins(name, seed, hinted=True) for seed in range(12)), name
    assert not any(_wins("knock_lying", seed, hinted=False) for seed in range(12))
    assert all(_wins("knock_lying", seed, hinted=True) for seed in range(12))


@pytest.mark.slow
def test_each_lift_attack_is_its_authors_fault_and_the_teaching_control_keeps_its_lift(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    seed = _run_seed(tuple((n, f"r1-{n}-0") for n in NAMES))
    with ScriptedServer(respond, api_key=KEY) as server:
        assert run_command(_config(tmp_path, server.base_url, seed=seed, authors=NAMES),
                           unsafe_no_sandbox=False, quiet=True) == 0
        asked = " ".join(str(r["messages"]) for r in server.requests if r["model"] == f"m-{SOLVER}")
    envs = _environments(tmp_path / "run")
    for name in ATTACKS:
        env = envs[f"r1-{name}-0"]
        # flagged in validation (the oracle's answer on 16 seeds), so never played: no lift
        assert env["valid"] and env["flags"] == ["fixed_answer"], (name, env)
        assert env["lift"] is None and env["pairs"] == 0, (name, env)
    assert not any(word in asked for word in ("KNOCK", "REVERSED", "KEYPAD", "TWICE"))
    control = envs[f"r1-{CONTROL}-0"]
    assert (control["flags"], control["panel_no_hint"], control["panel_with_hint"],
            control["lift"]) == ([], 0.5, 1.0, 0.5)
    with Store(tmp_path / "run", create=False) as store:
        tables = store.tables()
        verdict = store.validations("r1-knock-0")[-1]["verdict"]
    assert verdict["battery"]["flag"] == "fixed_answer" and verdict["battery"]["answer_seeds"] == 16
    authors = {a["model"]: a for a in analyze(tables, bootstrap=0, convergence=False).json["authors"]}
    assert all(authors[n]["author_faults"] == 2 * SEEDS for n in ATTACKS)
    assert authors[CONTROL]["author_faults"] == 0


@pytest.mark.slow
def test_the_same_attacks_from_an_export_get_the_same_verdicts_and_so_does_a_replayed_door(
        tmp_path, monkeypatch):
    """Main did not validate a fixed pool in a run: the four attacks scored lift 0.5 with no
    flag, and issue 19's door asking "were you given a hint?" replayed from a hand-written
    export scored 0.75 with only `hint_gated`."""
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    seed = _run_seed(tuple((n, n) for n in NAMES))
    door = (FIXTURES / "attack_ask.py").read_text()
    specs = [EnvSpec(id=n, source=_source(n), max_turns=8, domain="logic", author="mallory",
                     title=n, hints={"hint": _hint(n)},
                     benchmark_seeds=tuple(benchmark_seeds(seed, n, SEEDS))) for n in NAMES]
    specs.append(EnvSpec(id="door", source=door, max_turns=3, domain="logic", author="mallory",
                         hints={"hint": (FIXTURES / "attack_ask.hint.txt").read_text().strip()},
                         benchmark_seeds=tuple(range(SEEDS))))
    write_export(tmp_path / "pool", specs)

    def answer_the_door(model: str, messages: list[dict]) -> str:
        first = messages[1]["content"]
        if "DOOR" in first:
            return "\\boxed{yes}" if first.startswith("Hint: ") else "\\boxed{no}"
        return solver(model, messages)

    with ScriptedServer(answer_the_door, api_key=KEY) as server:
        assert run_command(_config(tmp_path, server.base_url, seed=seed, pool=tmp_path / "pool"),
                           unsafe_no_sandbox=False, quiet=True) == 0
    envs = _environments(tmp_path / "run")
    assert {n: (envs[n]["flags"], envs[n]["lift"]) for n in (*ATTACKS, "door")} == {
        **{n: (["fixed_answer"], None) for n in ATTACKS}, "door": (["trivial"], None)}
    assert (envs[CONTROL]["flags"], envs[CONTROL]["lift"]) == ([], 0.5)


@pytest.mark.slow
def test_a_password_whose_oracle_hides_it_passes_validation_and_play_shows_it(
        tmp_path, monkeypatch):
    """The lying knock: validation sees a different oracle answer per seed and a battery that
    lost at the knock; the four rescues all say "sesame" after the knock, on seeds where the
    oracle said something else. On main: lift 1.0 with only informational flags."""
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(respond, api_key=KEY) as server:
        assert run_command(_config(tmp_path, server.base_url, seed=1, authors=("knock_lying",)),
                           unsafe_no_sandbox=False, quiet=True) == 0
    with Store(tmp_path / "run", create=False) as store:
        verdict = store.validations("r1-knock_lying-0")[-1]["verdict"]
        eps = store.tables().episodes
        raw = {(e.seed, e.hinted): e.outcome for e in store.episodes()}
    assert verdict["valid"] and "flags" not in verdict            # validation saw nothing
    assert verdict["battery"]["policies"]["hint_copy"]["won"] == 0
    assert sorted(raw.values()) == ["failure"] * SEEDS + ["success"] * SEEDS   # as played
    env = _environments(tmp_path / "run")["r1-knock_lying-0"]
    assert env["flags"] == ["fixed_answer"] and env["lift"] is None
    assert set(eps.outcome) == {"incomplete"}
    assert all(r.startswith("hinted wins in play: fixed_answer: what the hint changed ")
               for r in eps.reason)


def _library_play(spec: EnvSpec, seed: int, actions: list[str]) -> tuple[list[str], str]:
    """The observations `actions` get from `seed` and the oracle's next action after them: the
    library's own code, trusted, in-process."""
    namespace: dict = {}
    exec(compile(spec.source, spec.id, "exec"), namespace)
    env = namespace[spec.class_name](max_turns=spec.max_turns)
    env.reset(seed)
    seen = [env.step(action)[0] for action in actions]
    return seen, env.oracle_action()


def _openings(spec: EnvSpec) -> dict[str, list[int]]:
    """First observation -> the benchmark seeds that open with it (two seeds can give one
    instance, or one opening and different secrets)."""
    namespace: dict = {}
    exec(compile(spec.source, spec.id, "exec"), namespace)
    out: dict[str, list[int]] = {}
    for seed in spec.benchmark_seeds:
        out.setdefault(namespace[spec.class_name](max_turns=spec.max_turns).reset(seed)[0], []).append(seed)
    return out


def _two_free(openings: dict[str, list[int]]) -> set[str]:
    """Openings holding exactly two of the seeds: what a solver without the hint wins (it
    cannot tell seeds with one opening apart, so they are free together)."""
    for opening, seeds in openings.items():
        if len(seeds) == 2:
            return {opening}
    singles = [o for o, seeds in openings.items() if len(seeds) == 1]
    assert len(singles) >= 2, openings
    return set(singles[:2])


@pytest.mark.slow
def test_a_tournament_of_the_library_played_by_a_solver_that_follows_hints_flags_none(
        tmp_path, monkeypatch):
    """The 13 library environments in a run (validated there: battery and answer check) and
    played by a solver that, with the hint, plays as the oracle does; without it, on two seeds
    of four, too (no-hint 0.5, lift 0.5: hint_gated stays quiet by design, not by luck). No
    environment gets any flag: not the author's-fault ones, not `hint_leak`, whose battery
    exception is gone."""
    from envduels.duel.protocol import last_boxed
    from envduels.envs import library_env, library_names

    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    specs = [library_env(n) for n in library_names()]
    openings = {spec.id: _openings(spec) for spec in specs}
    free = {opening for spec in specs for opening in _two_free(openings[spec.id])}

    def follow(model: str, messages: list[dict]) -> str:
        first = messages[1]["content"]
        spec, opening = next((s, o) for s in specs for o in openings[s.id]
                             if f"Observation: {o}\n\n" in first)
        if not first.startswith("Hint: ") and opening not in free:
            return "I cannot tell. \\boxed{pass}"
        played = [last_boxed(m["content"]) for m in messages if m["role"] == "assistant"]
        seen = [m["content"] for m in messages if m["role"] == "user"][1:]
        for seed in openings[spec.id][opening]:   # the seed whose replay shows what was seen
            observations, action = _library_play(spec, seed, [a for a in played if a])
            if all(f"Observation: {o}\n\n" in text for o, text in zip(observations, seen, strict=False)):
                return action
        raise AssertionError(f"no seed of {spec.id} plays as this transcript")

    with ScriptedServer(follow, api_key=KEY) as server:
        path = _config(tmp_path, server.base_url, seed=0)
        cfg = yaml.safe_load(path.read_text())
        cfg["tournament"].update(environments=[s.id for s in specs], max_turns=32)
        path.write_text(yaml.safe_dump(cfg))
        assert run_command(path, unsafe_no_sandbox=False, quiet=True) == 0
    envs = _environments(tmp_path / "run")
    assert {e: (v["valid"], v["flags"]) for e, v in envs.items()} == {
        s.id: (True, []) for s in specs}
    assert {e: v["lift"] for e, v in envs.items()} == {s.id: 0.5 for s in specs}
