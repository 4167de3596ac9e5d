"""EnvDuels v1 export folders and single files: round trips, and refusals that name the row."""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from envduels.envs import EnvSpec, load_env_file, load_export, write_export
from envduels.errors import UserError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
SOURCE = (FIXTURES / "good_env.py").read_text()


def two_specs():
    return [
        EnvSpec("lock", SOURCE, class_name="ParityLock", max_turns=10, domain="logic",
                author="model-a", title="Parity lock", hints={"hint": "Flip one bit at a time."},
                benchmark_seeds=(5, 6), metadata={"split": "train", "solver_results": {"m": 0.5}}),
        EnvSpec("round 1/slot:2", SOURCE, max_turns=10, hints={"hint_1": "h1", "hint_2": "h2"},
                metadata={"split": "test"}),
    ]


def export(tmp_path):
    folder = tmp_path / "export"
    write_export(folder, two_specs())
    return folder


def edit_manifest(folder, change):
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest["environments"])
    path.write_text(json.dumps(manifest))


def refusal(folder):
    with pytest.raises(UserError) as caught:
        load_export(folder)
    return caught.value.message


def test_write_then_load_gives_back_equal_specs(tmp_path):
    manifest_path = write_export(tmp_path / "out", two_specs())
    assert manifest_path == tmp_path / "out" / "manifest.json"
    assert load_export(tmp_path / "out") == two_specs()


def test_written_manifest_has_the_spec_9_row_fields(tmp_path):
    row = json.loads((export(tmp_path) / "manifest.json").read_text())["environments"][0]
    assert row == {
        "id": "lock", "source": "envs/lock.py", "source_sha256": two_specs()[0].source_sha256,
        "class_name": "ParityLock", "max_turns": 10, "domain": "logic", "author": "model-a",
        "split": "train", "privileged": "privileged/lock.json",
        "metadata": {"solver_results": {"m": 0.5}, "benchmark_seeds": [5, 6], "title": "Parity lock"},
    }
    privileged = json.loads((tmp_path / "export" / "privileged" / "lock.json").read_text())
    assert privileged == {"environment_id": "lock", "hints": {"hint": "Flip one bit at a time."}}


def test_unsafe_ids_get_distinct_safe_file_names(tmp_path):
    row = json.loads((export(tmp_path) / "manifest.json").read_text())["environments"][1]
    assert row["source"].startswith("envs/round_1_slot_2-") and row["source"].endswith(".py")


def test_graded_hints_are_accepted_on_import(tmp_path):
    spec = load_export(export(tmp_path))[1]
    assert spec.hints == {"hint_1": "h1", "hint_2": "h2"} and spec.hint == "h1"


@pytest.mark.parametrize("bad_path", ["/etc/passwd", "../outside.py", "envs/../../outside.py"])
def test_a_source_path_escaping_the_folder_is_refused_naming_the_row(tmp_path, bad_path):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[1].update(source=bad_path))
    assert refusal(folder) == (
        f"manifest row 1 (id 'round 1/slot:2'): source {bad_path!r} escapes the export folder: "
        "use a path relative to the folder, without '..'")


def test_a_symlink_pointing_outside_the_folder_is_refused_naming_the_row(tmp_path):
    folder = export(tmp_path)
    (tmp_path / "secret.py").write_text(SOURCE)
    os.symlink(tmp_path / "secret.py", folder / "envs" / "link.py")
    edit_manifest(folder, lambda rows: rows[0].update(source="envs/link.py"))
    assert refusal(folder) == (
        "manifest row 0 (id 'lock'): source 'envs/link.py' is a symlink pointing outside the "
        "export folder: copy the file into the folder")


def test_a_privileged_path_escaping_the_folder_is_refused(tmp_path):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[0].update(privileged="../hints.json"))
    assert refusal(folder).startswith("manifest row 0 (id 'lock'): privileged '../hints.json' escapes")


def test_a_missing_source_file_is_refused_naming_the_row(tmp_path):
    folder = export(tmp_path)
    (folder / "envs" / "lock.py").unlink()
    assert refusal(folder) == (
        "manifest row 0 (id 'lock'): source file 'envs/lock.py' is missing: restore it or remove the row")


def test_a_source_changed_after_export_is_a_hash_mismatch_naming_the_row(tmp_path):
    folder = export(tmp_path)
    with open(folder / "envs" / "lock.py", "a") as f:
        f.write("# edited\n")
    message = refusal(folder)
    assert message.startswith("manifest row 0 (id 'lock'): source 'envs/lock.py' does not match source_sha256")
    assert message.endswith("the file changed after export; re-export or fix the hash")


def test_a_hash_covers_the_exact_bytes_including_line_endings(tmp_path):
    folder = export(tmp_path)
    path = folder / "envs" / "lock.py"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert "does not match source_sha256" in refusal(folder)


def test_an_unsupported_format_version_is_refused(tmp_path):
    folder = export(tmp_path)
    (folder / "manifest.json").write_text(json.dumps({"format_version": 2, "environments": []}))
    assert refusal(folder).endswith("format_version 2 is not supported: envduels reads format_version 1")


def test_duplicate_ids_are_refused(tmp_path):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[1].update(id="lock", privileged=None))
    assert refusal(folder) == "manifest row 1 (id 'lock'): duplicate id 'lock': every row needs its own id"


def test_a_privileged_file_without_a_hint_is_refused(tmp_path):
    folder = export(tmp_path)
    (folder / "privileged" / "lock.json").write_text(json.dumps({"environment_id": "lock", "hints": {}}))
    assert refusal(folder) == ("manifest row 0 (id 'lock'): privileged file 'privileged/lock.json' "
                               "needs a string 'hint' (or graded 'hint_1'/'hint_2')")


def test_a_folder_without_manifest_is_not_an_export(tmp_path):
    assert refusal(tmp_path) == f"{tmp_path} has no manifest.json: not an EnvDuels export folder"


def test_load_env_file_takes_id_from_the_stem_and_max_turns_from_init():
    spec = load_env_file(FIXTURES / "good_env.py")
    assert (spec.id, spec.max_turns, spec.class_name, spec.source) == ("good_env", 10, None, SOURCE)


def test_load_env_file_reads_the_sidecar_hint():
    assert load_env_file(FIXTURES / "good_env.py").hints == {
        "hint": (FIXTURES / "good_env.hint.txt").read_text().strip()}
    assert load_env_file(FIXTURES / "malicious_env.py").hints == {}


def test_load_env_file_refuses_a_missing_file(tmp_path):
    with pytest.raises(UserError) as caught:
        load_env_file(tmp_path / "nope.py")
    assert caught.value.message == f"environment file {tmp_path / 'nope.py'} does not exist: check the path"


@pytest.mark.parametrize("seed", [-1, 2**63, 99999999999999999999999999])
def test_a_benchmark_seed_outside_63_bits_is_refused_naming_the_row(tmp_path, seed):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[0]["metadata"].update(benchmark_seeds=[1, seed]))
    assert refusal(folder) == (
        f"manifest row 0 (id 'lock'): benchmark seed {seed} is outside 0 <= seed < 2**63: use "
        "non-negative 63-bit seeds (as benchmark_seeds() derives them)")


def test_the_largest_63_bit_seed_is_accepted(tmp_path):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[0]["metadata"].update(benchmark_seeds=[0, 2**63 - 1]))
    assert load_export(folder)[0].benchmark_seeds == (0, 2**63 - 1)


@pytest.mark.parametrize(("key", "bad_path", "shown"), [
    ("source", "envs/a\x00.py", "'envs/a\\x00.py'"),
    ("source", "envs/\x1b]52;c;aGk=\x07.py", "'envs/\\x1b]52;c;aGk=\\x07.py'"),
    ("privileged", "p\ud800.json", "'p\\ud800.json'"),
])
def test_a_path_with_a_control_character_is_refused_naming_the_row(tmp_path, key, bad_path, shown):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[0].update({key: bad_path}))
    assert refusal(folder) == (
        f"manifest row 0 (id 'lock'): {key} {shown} holds a control character or a lone "
        "surrogate: name the file with printable characters")


def test_a_path_too_long_for_the_file_system_is_refused_naming_the_row(tmp_path):
    folder = export(tmp_path)
    edit_manifest(folder, lambda rows: rows[0].update(source="envs/" + "a" * 5000 + ".py"))
    assert refusal(folder).startswith("manifest row 0 (id 'lock'): source 'envs/aaaa")
    assert refusal(folder).endswith(".py' is not a usable path (OSError): give a short relative "
                                    "path to a file in the folder")


@dataclass(frozen=True)
class _LaterSpec(EnvSpec):
    """EnvSpec as it would be with one more field (of a kind the manifest has no key for)."""

    language: str = "en"


def test_a_field_added_to_envspec_survives_export_and_import_with_no_change_to_the_format(
        tmp_path, monkeypatch):
    import envduels.envs._export as export_format

    monkeypatch.setattr(export_format, "EnvSpec", _LaterSpec)
    spec = _LaterSpec("lock", SOURCE, hints={"hint": "h"}, language="fr")
    write_export(tmp_path / "x", [spec, _LaterSpec("plain", SOURCE, hints={"hint": "h"})])
    rows = json.loads((tmp_path / "x" / "manifest.json").read_text())["environments"]
    assert [r["metadata"].get("language") for r in rows] == ["fr", None]   # defaults not written
    back = load_export(tmp_path / "x")
    assert [(s.language, s.metadata) for s in back] == [("fr", {"split": "test"}),
                                                        ("en", {"split": "test"})]
    edit_manifest(tmp_path / "x", lambda rows: rows[0]["metadata"].update(language=7))
    assert refusal(tmp_path / "x") == "manifest row 0 (id 'lock'): metadata.language must be a str, got 7"


def test_lone_surrogates_in_an_exports_texts_become_replacement_characters(tmp_path):
    import json as _json

    from envduels.envs import library_env, load_export, write_export
    folder = tmp_path / "export"
    write_export(folder, [library_env("nim")])
    manifest = folder / "manifest.json"
    data = _json.loads(manifest.read_text())
    rows = data["environments"]
    rows[0]["author"] = "bad\ud800author"
    manifest.write_text(_json.dumps(data))
    privileged = folder / rows[0]["privileged"]
    hints = _json.loads(privileged.read_text())
    hints["hints"]["hint"] = "take \udfff two"
    privileged.write_text(_json.dumps(hints))
    spec = load_export(folder)[0]
    assert spec.author == "bad\ufffdauthor" and spec.hint == "take \ufffd two"
