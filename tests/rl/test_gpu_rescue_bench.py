"""bench/gpu_rescue.py --smoke: the rescue-or-not comparison's plumbing, 2 tiny GRPO steps per
arm on CPU with the bundled SmolLM2 (its figures are no finding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import script

pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")


def test_smoke_options_are_two_tiny_steps():
    bench = script("bench/gpu_rescue.py")
    opts = bench.parse_args(["--smoke", "--out", "o"])
    assert (opts.steps, opts.group, opts.groups_per_step, opts.max_turns) == (2, 2, 1, 1)
    assert opts.environments == ("number_guess", "nim") and opts.out == Path("o")
    full = bench.parse_args([])
    assert (full.steps, full.group, full.groups_per_step) == (12, 8, 8)


def test_choose_keeps_what_fails_cold_with_the_hint_s_help_first():
    bench = script("bench/gpu_rescue.py")
    rows = [{"env_id": "a", "cold": 0.0, "hinted": 0.25}, {"env_id": "b", "cold": 0.5, "hinted": 1},
            {"env_id": "c", "cold": 0.0, "hinted": 0.5}, {"env_id": "d", "cold": 0.0, "hinted": 0}]
    assert bench.choose(rows, 2) == ["c", "a"]
    assert bench.choose([{"env_id": "b", "cold": 0.5, "hinted": 1},
                         {"env_id": "e", "cold": 0.25, "hinted": 0}], 3) == ["e"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_smoke_run_trains_both_arms_on_the_same_groups_and_prints_the_table(smollm2, tmp_path):
    bench = script("bench/gpu_rescue.py")
    model, tokenizer = smollm2
    result = bench.run(bench.Options.smoke(tmp_path / "out"), model=model, tokenizer=tokenizer)
    with_rescue, without = result["steps"]["rescue"], result["steps"]["no_rescue"]
    assert [r["step"] for r in with_rescue] == [r["step"] for r in without] == [1, 2]
    for a, b in zip(with_rescue, without, strict=True):
        assert a["groups"] == b["groups"] == 1 and a["no_hint_rollouts"] == b["no_hint_rollouts"] == 2
        assert a["hinted_rollouts"] == 2 * round(a["hinted_group_fraction"])
        assert (b["hinted_group_fraction"], b["hinted_rollouts"]) == (0.0, 0)
    assert set(result["heldout"]) == {"base", "rescue", "no_rescue"}
    assert all(h["episodes"] == 2 for h in result["heldout"].values())   # 2 environments x 1 seed
    lines = bench.table(result).splitlines()
    assert lines[3].startswith("step | with rescue: no-hint  zero-grad  rescued | without")
    assert [line.split("|")[0].strip() for line in lines[4:6]] == ["1", "2"]
    assert lines[7].startswith("held-out, no hint, greedy: base ")
    assert (tmp_path / "out" / "gpu_rescue.json").is_file()
