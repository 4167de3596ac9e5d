"""Issue 19's flags on small hand-made runs: the stored battery verdict scores an environment as
its author's fault, `hint_gated`'s tolerance, `hint_leak`'s copying rule and its exception for
a hint that teaches a procedure."""

from __future__ import annotations

from pathlib import Path

from envduels.analysis import analyze
from envduels.analysis.metrics import (
    FLAGS,
    HINT_GATED,
    HINT_IS_KEY,
    HINT_LEAK,
    TRIVIAL,
    copied_win,
    environment_flags,
)
from envduels.envs import EnvSpec
from envduels.envs._battery import BATTERY_REASON, hint_phrases, shown_items
from envduels.export import FLAGS as EXPORT_FLAGS
from envduels.store import EnvRecord, EpisodeRow, Store

FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
VAULT_HINT = "To get in, say the words 'open sesame' to the keypad."
PANEL_HINT = (FIXTURES / "attack_procedure.hint.txt").read_text().strip()


def _record(env_id: str, hint: str) -> EnvRecord:
    return EnvRecord(EnvSpec(env_id, "class E: ...", class_name="E", domain="logic", author="a",
                             hints={"hint": hint}, benchmark_seeds=(1, 2, 3, 4)), round=1)


def _step(action: str, shown: str) -> list[dict]:
    return [{"role": "assistant", "content": f"\\boxed{{{action}}}"},
            {"role": "env", "action": f"\\boxed{{{action}}}", "content": shown}]


def _episode(env_id: str, seed: int, hinted: bool, outcome: str, transcript: list[dict] | None = None,
             solver: str = "b") -> EpisodeRow:
    return EpisodeRow(f"{env_id}-{solver}-{seed}-{hinted}", env_id, "a", solver, 1, "logic", seed, 0,
                      hinted, outcome, "as played", 1, False, transcript or [])


def _vault_win(code: str) -> list[dict]:
    return [{"role": "user", "content": f"Hint: {VAULT_HINT}\n\nObservation: VAULT: a sealed door."},
            *_step("open sesame", f"The keypad shows code {code}. Enter the code."),
            {"role": "user", "content": f"Observation: The keypad shows code {code}."},
            *_step(code, "The vault opens.")]


def _panel_win(code: int, digits: list[int]) -> list[dict]:
    out = [{"role": "user", "content": f"Hint: {PANEL_HINT}\n\nObservation: PANEL: enter the code."},
           *_step("0", "Reading mode: enter a place value.")]
    for place, digit in zip((1, 3, 9, 27), digits, strict=True):
        out += _step(str(place), f"Place {place}: digit {digit}.")
    return out + _step(str(code), "The panel opens.")


def test_a_password_then_the_echoed_code_is_a_copied_win_a_procedure_then_a_decoded_answer_is_not():
    assert copied_win(_vault_win("48213"), VAULT_HINT)
    assert not copied_win(_panel_win(41, [2, 1, 1, 1]), PANEL_HINT)   # 41 = 2 + 3 + 9 + 27
    assert copied_win(_step("42", "Correct."), "The answer is 42.")   # two characters are enough
    assert "open sesame" in hint_phrases(VAULT_HINT)[:1]
    assert shown_items("VAULT code 48213 'Ali Baba' X7K") == ["Ali Baba", "X7K", "48213", "VAULT"]


def _store_with(tmp_path: Path, battery: dict | None) -> Store:
    store = Store(tmp_path)
    store.set_meta("config", {"name": "t", "players": [
        {"name": "a", "provider": "openai", "model": "m-a", "roles": ["author"]},
        {"name": "b", "provider": "openai", "model": "m-b", "roles": ["solver"]}]})
    store.put_environment(_record("r1-a-0", VAULT_HINT))
    verdict = {"valid": True, "reasons": [], "oracle": "passed", "class_name": "E", "seeds": [1, 2, 3, 4]}
    if battery is not None:
        verdict["battery"] = battery
    store.put_validation("r1-a-0", 0, author="a", round=1, valid=True, reasons=[], verdict=verdict,
                         reply="")
    for seed in (1, 2, 3, 4):
        store.put_episode(_episode("r1-a-0", seed, False, "success" if seed == 1 else "failure"))
        store.put_episode(_episode("r1-a-0", seed, True, "success", _vault_win(f"1000{seed}")))
    return store


def test_a_battery_flag_in_the_stored_verdict_makes_every_episode_the_authors_fault(tmp_path):
    store = _store_with(tmp_path, {"flag": HINT_IS_KEY, "detail": "the hint-copy-and-echo policy won 3 of 4"})
    tables = store.tables()
    assert set(tables.episodes.outcome) == {"incomplete"}
    assert all(r.startswith(f"{BATTERY_REASON}: {HINT_IS_KEY}: ") for r in tables.episodes.reason)
    j = analyze(tables, bootstrap=0, convergence=False).json
    (env,) = j["environments"]
    assert env["flags"] == [HINT_IS_KEY] and env["lift"] is None
    assert next(a for a in j["authors"] if a["model"] == "a")["author_faults"] == 8
    # the raw rows keep what was played
    assert {e.outcome for e in store.episodes()} == {"success", "failure"}
    store.close()


def test_a_verdict_from_before_the_battery_changes_nothing_and_copying_still_reads_as_a_leak(tmp_path):
    store = _store_with(tmp_path, None)
    tables = store.tables()
    assert tables.battery == {}
    assert set(tables.episodes.outcome) == {"success", "failure"}
    # no-hint 0.25 and hinted 1.0: within hint_gated's tolerance; the password was copied at
    # step 1 and the code echoed, on every hinted win
    assert environment_flags(tables) == {"r1-a-0": [HINT_GATED, HINT_LEAK]}
    store.close()


def test_a_battery_whose_copying_never_won_never_clears_hint_leak(tmp_path):
    """Issue 29: a copying policy can lose before it could use the hint (a knock every solver
    passes, then the password), so "copying never won" proves nothing about the hint. On main
    this verdict switched hint_leak off although every hinted win copies the password."""
    store = _store_with(tmp_path, {"flag": None, "hint_tokens_covered": True, "policies": {
        "hint_copy": {"won": 0, "seeds": 2}, "hint_copy+echo": {"won": 0, "seeds": 2}}})
    assert environment_flags(store.tables()) == {"r1-a-0": [HINT_GATED, HINT_LEAK]}
    store.close()


def test_every_flag_is_one_export_accepts_and_the_report_defines():
    from envduels.report.story import GLOSSARY

    assert EXPORT_FLAGS == FLAGS and {TRIVIAL, HINT_IS_KEY, "nondeterministic"} <= set(FLAGS)
    assert all(f in GLOSSARY for f in FLAGS)
