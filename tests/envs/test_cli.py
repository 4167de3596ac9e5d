"""`envduels validate` and `envduels library` through the installed console script."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from envduels.envs import EnvSpec, benchmark_seeds, library_env, load_env_file, write_export

from .conftest import FIXTURES

ENVDUELS = str(Path(sys.executable).parent / "envduels")
GOOD = str(FIXTURES / "good_env.py")
MALICIOUS = str(FIXTURES / "malicious_env.py")
NO_ORACLE = str(FIXTURES / "good" / "no_oracle.py")


def envduels(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ENVDUELS, *args], capture_output=True, text=True, timeout=120)


def test_a_good_file_exits_0_with_a_short_verdict():
    run = envduels("validate", GOOD, "--seeds", "2")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == (
        "valid  good_env  (class ParityLock, oracle passed, 2 seeds, hint checked)")


def test_json_for_a_file_is_one_object_with_the_verdict_and_derived_seeds():
    run = envduels("validate", GOOD, "--seeds", "3", "--json")
    assert run.returncode == 0
    verdict = json.loads(run.stdout)
    assert verdict.pop("battery")["flag"] is None   # the degenerate-policy battery's findings
    assert verdict == {
        "id": "good_env", "valid": True, "reasons": [], "oracle": "passed",
        "class_name": "ParityLock", "seeds": benchmark_seeds(0, "good_env", 3), "path": GOOD}


def test_a_malicious_file_exits_1_with_a_clear_reason():
    run = envduels("validate", MALICIOUS, "--json")
    assert run.returncode == 1
    verdict = json.loads(run.stdout)
    assert (verdict["valid"], verdict["oracle"]) == (False, "skipped")
    [reason] = verdict["reasons"]
    assert reason.endswith("in reset: reset raised FileNotFoundError: [Errno 2] No such file or "
                           "directory: '/etc/shadow' (env line 17 in reset)")


def test_the_human_verdict_lists_each_reason():
    run = envduels("validate", str(FIXTURES / "bad" / "ignores_seed.py"))
    assert run.returncode == 1
    assert run.stdout.startswith("INVALID  ignores_seed")
    assert run.stdout.splitlines()[1].startswith("  - every one of the 4 benchmark seeds gives the same initial")


def test_require_oracle_turns_an_oracle_free_environment_invalid():
    assert envduels("validate", NO_ORACLE, "--seeds", "1").returncode == 0
    run = envduels("validate", NO_ORACLE, "--seeds", "1", "--require-oracle", "--json")
    assert run.returncode == 1
    verdict = json.loads(run.stdout)
    assert (verdict["oracle"], verdict["reasons"]) == ("absent", [
        "Coin has no oracle_action: add oracle_action() returning a winning action for the "
        "current state (required here)"])


def test_a_sidecar_hint_is_checked_with_hint_max_chars(tmp_path):
    shutil.copy(GOOD, tmp_path / "lock.py")
    (tmp_path / "lock.hint.txt").write_text("Flip one bit at a time and watch the count change.\n")
    assert envduels("validate", str(tmp_path / "lock.py"), "--seeds", "1").returncode == 0
    run = envduels("validate", str(tmp_path / "lock.py"), "--seeds", "1", "--hint-max-chars", "10", "--json")
    assert json.loads(run.stdout)["reasons"] == [
        "the hint is 50 characters, over the limit of 10: shorten it to the key insight"]


def test_a_folder_reports_each_environment_and_is_valid_only_if_all_are(tmp_path):
    # (not ignores_seed.py: an export may ignore its seed, see test_validate_probes.py)
    good, bad = load_env_file(GOOD), load_env_file(FIXTURES / "bad" / "nondeterministic.py")
    write_export(tmp_path / "out", [good, EnvSpec(**{**bad.__dict__, "hints": {"hint": "guess"}})])
    run = envduels("validate", str(tmp_path / "out"), "--seeds", "2", "--json")
    assert run.returncode == 1
    verdict = json.loads(run.stdout)
    assert set(verdict) == {"valid", "reasons", "oracle", "path", "environments"}
    assert [(e["id"], e["valid"], e["oracle"]) for e in verdict["environments"]] == [
        ("good_env", True, "passed"), ("nondeterministic", False, "skipped")]
    assert verdict["valid"] is False
    assert verdict["reasons"] == ["nondeterministic: " + verdict["environments"][1]["reasons"][0]]
    assert set(verdict["environments"][0]) == {"id", "valid", "reasons", "oracle", "class_name", "seeds",
                                               "battery"}


def test_a_folder_uses_the_first_n_manifest_seeds(tmp_path):
    write_export(tmp_path / "out", [EnvSpec(**{**load_env_file(GOOD).__dict__, "benchmark_seeds": (7, 8, 9)})])
    run = envduels("validate", str(tmp_path / "out"), "--seeds", "2", "--json")
    assert json.loads(run.stdout)["environments"][0]["seeds"] == [7, 8]


def test_a_folder_with_an_escaping_path_exits_2_naming_the_row(tmp_path):
    write_export(tmp_path / "out", [load_env_file(GOOD)])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    manifest["environments"][0]["source"] = "../../etc/passwd"
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    run = envduels("validate", str(tmp_path / "out"))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("error: manifest row 0 (id 'good_env'): source '../../etc/passwd' escapes "
                          "the export folder: use a path relative to the folder, without '..'\n")


def test_a_library_name_validates_on_its_manifest_seeds():
    run = envduels("validate", "nim", "--seeds", "2", "--json", "--require-oracle")
    assert run.returncode == 0
    assert json.loads(run.stdout)["seeds"] == list(library_env("nim").benchmark_seeds[:2])


def test_an_unknown_path_exits_2_with_one_line():
    run = envduels("validate", "no/such/env.py")
    assert run.returncode == 2
    assert run.stderr == ("error: 'no/such/env.py' is not an environment file, an EnvDuels export "
                          "folder or a library name: check the path, or see `envduels library list`\n")


def test_zero_seeds_is_a_user_error():
    run = envduels("validate", GOOD, "--seeds", "0")
    assert (run.returncode, run.stderr) == (2, "error: --seeds must be at least 1, got 0\n")


def test_unsafe_no_sandbox_warns_loudly_on_stderr():
    run = envduels("validate", GOOD, "--seeds", "1", "--unsafe-no-sandbox", "--json")
    assert run.returncode == 0 and json.loads(run.stdout)["valid"] is True
    assert "WARNING: --unsafe-no-sandbox: environment code runs WITHOUT the bubblewrap sandbox" in run.stderr


def test_library_list_shows_every_environment():
    run = envduels("library", "list")
    assert run.returncode == 0
    for name in ("subtraction_game", "nim", "lights_out", "word_transform"):
        assert name in run.stdout


def test_library_show_prints_hint_and_source():
    run = envduels("library", "show", "nim")
    assert run.returncode == 0
    assert "XOR" in run.stdout and "class Nim" in run.stdout
    assert envduels("library", "show", "chess").returncode == 2


def test_library_show_source_prints_the_file_byte_for_byte_even_when_piped():
    run = envduels("library", "show", "nim", "--source")
    assert run.returncode == 0
    assert run.stdout == library_env("nim").source


def test_a_source_too_deeply_nested_to_parse_exits_1_with_one_reason_and_no_traceback(tmp_path):
    deep = tmp_path / "deep.py"
    deep.write_text("x = " + "-" * 3000 + "1\n")
    run = envduels("validate", str(deep))
    assert (run.returncode, run.stderr) == (1, "")
    assert run.stdout == (
        "INVALID  deep  (class None, oracle skipped, 4 seeds, no hint supplied)\n"
        "  - the source is too deeply nested to parse: flatten the deeply nested expression\n")


def test_an_environment_declaring_a_billion_turns_validates_in_seconds(tmp_path):
    endless = tmp_path / "endless.py"
    endless.write_text(
        "class LongEnv:\n"
        "    def __init__(self, max_turns: int = 1000000000):\n"
        "        self.max_turns = max_turns\n"
        "    def reset(self, seed=None):\n"
        "        self.seed = seed\n"
        "        return f'seed {seed}', {}\n"
        "    def step(self, action):\n"
        "        return 'again', 0.0, False, False, {}\n")
    run = subprocess.run([ENVDUELS, "validate", str(endless), "--json"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["valid"] is True


def test_json_mode_prints_one_object_for_a_user_error_too(tmp_path):
    run = envduels("validate", "no/such/env.py", "--json")
    assert (run.returncode, run.stderr) == (2, "")
    assert json.loads(run.stdout) == {"valid": False, "path": "no/such/env.py", "reasons": [
        "'no/such/env.py' is not an environment file, an EnvDuels export folder or a library "
        "name: check the path, or see `envduels library list`"]}
    zero = envduels("validate", GOOD, "--seeds", "0", "--json")
    assert zero.returncode == 2
    assert json.loads(zero.stdout)["reasons"] == ["--seeds must be at least 1, got 0"]


def test_json_mode_prints_one_object_for_a_manifest_naming_the_row(tmp_path):
    write_export(tmp_path / "out", [load_env_file(GOOD)])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    manifest["environments"][0]["metadata"]["benchmark_seeds"] = [-3]
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    run = envduels("validate", str(tmp_path / "out"), "--json")
    assert run.returncode == 2
    assert json.loads(run.stdout)["reasons"] == [
        "manifest row 0 (id 'good_env'): benchmark seed -3 is outside 0 <= seed < 2**63: use "
        "non-negative 63-bit seeds (as benchmark_seeds() derives them)"]
