"""The report as a typed record: `envduels report --schema` prints `RunReport`'s JSON Schema,
every report `report --json` writes validates against it, and the JSON keeps the keys, key order
and number types it had before the record existed (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pydantic
import pytest
from typer.testing import CliRunner

from envduels.analysis.result import FlaggedEnvironment, RunReport
from envduels.cli import app
from envduels.duel.outcomes import Flag
from envduels.report.commands import report_command, report_episodes_command

from .runs import leak_run, quickstart_run, write

SHAPE_ON_MAIN = Path(__file__).parent / "data" / "report_shape_main_1984d2f.json"
"""`shape()` of `report --json --bootstrap 50` on the leak and quickstart runs, as main wrote it
at 1984d2f, before `RunReport` existed (made once from that code's output; never regenerate)."""


def shape(doc: object, path: str = "") -> dict[str, list[str]]:
    """Every key path of a JSON document in first-seen order (list items as `[]`), each with the
    JSON types found there: keys, their order and int-vs-float are all in it."""
    out: dict[str, list[str]] = {}

    def walk(v: object, p: str) -> None:
        kind = ("null" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                else "float" if isinstance(v, float) else "str" if isinstance(v, str)
                else "array" if isinstance(v, list) else "object")
        seen = out.setdefault(p, [])
        if kind not in seen:
            seen.append(kind)
            seen.sort()
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{p}.{k}")
        elif isinstance(v, list):
            for x in v:
                walk(x, f"{p}[]")

    walk(doc, path)
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
    """`report --json --bootstrap 50` of the leak and quickstart runs, as text."""
    base = tmp_path_factory.mktemp("reports")
    out = {}
    for name, build in (("leak", leak_run), ("quickstart", quickstart_run)):
        run_dir = write(base / name, build(), name)
        report_command([run_dir], json_path=base / f"{name}.json", html_path=None, bootstrap=50)
        out[name] = (base / f"{name}.json").read_text(encoding="utf-8")
    return out


def test_report_schema_prints_the_json_schema_of_the_run_report():
    result = CliRunner().invoke(app, ["report", "--schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert schema == RunReport.model_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == "RunReport"
    assert schema["required"] == ["run", "solvers", "authors", "ratings", "rating_methods", "transitivity",
                                  "divergence", "environments", "irt", "learning", "convergence", "scale",
                                  "costs", "learnability", "duel_flagged_lead", "rating_notes"]
    assert schema["$defs"]["EnvironmentRow"]["properties"]["flags"]["items"] == {"$ref": "#/$defs/Flag"}


def test_every_report_json_validates_against_the_schema_and_a_wrong_one_does_not(reports, capsys):
    validator = jsonschema.Draft202012Validator(RunReport.model_json_schema())
    for text in reports.values():
        validator.validate(json.loads(text))
    broken = json.loads(reports["leak"])
    broken["environments"][0]["flags"] = ["hint_leaks"]  # not a flag
    del broken["run"]["episodes"]
    errors = sorted(e.message for e in validator.iter_errors(broken))
    assert errors == ["'episodes' is a required property", "'hint_leaks' is not one of ['nondeterministic', "
                      "'trivial', 'hint_is_key', 'fixed_answer', 'unsolved_with_hint', 'hint_gated', "
                      "'hint_leak']"]


def test_an_episodes_report_validates_against_the_schema_with_its_source_and_no_costs(tmp_path, capsys):
    rows = [{"env_id": f"e{e}", "author": a, "domain": "logic", "solver": s, "seed": sd, "hinted": h,
             "outcome": "success" if h or sd == 0 else "failure"}
            for e, a in enumerate("ab") for s in "abc" if s != a for sd in range(2) for h in (False, True)]
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report_episodes_command(path, json_path=tmp_path / "r.json", html_path=None, bootstrap=10)
    doc = json.loads((tmp_path / "r.json").read_text())
    jsonschema.Draft202012Validator(RunReport.model_json_schema()).validate(doc)
    assert list(doc["run"])[-1] == "source" and doc["run"]["source"] == "episodes"
    assert doc["costs"] is None and doc["run"]["cost_usd"] is None and doc["convergence"] is None


ADDED_SINCE = {".divergence.p_value": ["float", "null"], ".divergence.claim": ["bool"],
               ".divergence.test_note": ["null", "str"], ".divergence.crossings": ["array"],
               ".divergence.clearest_crossing": ["null", "object"]}
"""Keys added to the report after 1984d2f, each last in its object, with the JSON types they may
take (issue 34: the divergence test). A crossing's own keys (`.divergence.crossings[].*`,
`.divergence.clearest_crossing.*`) appear only in runs that have one."""


def test_report_json_keeps_the_keys_key_order_and_number_types_main_wrote(reports):
    on_main = json.loads(SHAPE_ON_MAIN.read_text(encoding="utf-8"))
    for name, text in reports.items():
        now = shape(json.loads(text))
        added = {k: v for k, v in now.items() if k.split("[")[0] in ADDED_SINCE
                 or k.startswith((".divergence.crossings[]", ".divergence.clearest_crossing."))}
        for k, types in added.items():
            assert k not in on_main[name] and set(types) <= set(ADDED_SINCE.get(k, types)), (name, k, types)
        # the added keys come right after the divergence keys main had, in their declared order
        keys = list(now)
        last = keys.index(".divergence.reliability_solver")
        assert [k for k in keys[last + 1:last + 1 + len(added)] if k in ADDED_SINCE] == list(ADDED_SINCE), name
        kept = {k: v for k, v in now.items() if k not in added}
        assert list(kept) == list(on_main[name]), name  # the same key paths, in the same order
        assert kept == on_main[name], name  # and the same JSON types at each
    costs = json.loads(reports["leak"])["costs"]
    assert [(c["input_tokens"], c["output_tokens"], c["cost_usd"]) for c in costs] == [
        (1000, 200, 0.25), (2000, 200, 0.5), (3000, 200, 0.75), (4000, 200, 1.0)]  # ints stay ints


def test_a_report_read_back_into_the_record_writes_the_same_bytes(reports):
    for text in reports.values():
        again = json.dumps(RunReport.model_validate_json(text).to_json(), indent=2, allow_nan=False)
        assert again == text


def test_a_report_lists_no_flag_of_validation_s_own():
    # `seed_ignored` is a `Flag` member (validation's warning on a fixed-pool environment), but
    # no report lists it: the report refuses it where it is made, and its schema leaves it out
    with pytest.raises(pydantic.ValidationError, match="'seed_ignored' is validation's own flag"):
        FlaggedEnvironment(id="env", flags=[Flag.SEED_IGNORED])
    assert FlaggedEnvironment(id="env", flags=[Flag.HINT_LEAK]).flags == [Flag.HINT_LEAK]
    assert "seed_ignored" not in RunReport.model_json_schema()["$defs"]["Flag"]["enum"]
