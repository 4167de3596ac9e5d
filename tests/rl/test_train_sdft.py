"""examples/train_sdft.py: TRL's SDFTTrainer trains SmolLM2 for real on CPU from an
`envduels export --format hf` folder, its teacher shown the hint."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envduels.envs import library_env
from envduels.export import export_command

from .conftest import ROOT, script

pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
sys.path.insert(0, str(ROOT / "tests" / "transfer"))
from transfer_tables import env_row, pair_rows, write_run  # noqa: E402

SCRIPT = ROOT / "examples" / "train_sdft.py"


@pytest.fixture(scope="module")
def hf_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("sdft")
    envs = []
    for name in ("number_guess", "nim"):
        spec = library_env(name)
        envs.append(env_row(name, "alice", source=spec.source, class_name=spec.class_name,
                            max_turns=spec.max_turns, hint=spec.hint, benchmark_seeds=(1, 2)))
    eps = [r for e in envs for s in e.benchmark_seeds
           for r in pair_rows(e.env_id, e.author, "bob", s, 0, 1)]
    write_run(base / "run", envs, eps, players=["alice", "bob"])
    assert export_command(base / "run", base / "hf", fmt="hf", authors=[], rounds=[], flags=[],
                          min_pass=None, max_pass=None, target=None) == 0
    return base / "hf"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_real_sdft_steps_from_an_hf_export_move_the_weights(smollm2, hf_export, tmp_path):
    import torch

    model, tokenizer = smollm2
    student = copy.deepcopy(model)
    sdft = script("examples/train_sdft.py")
    args = sdft.parse_args([str(hf_export), "--steps", "2", "--group", "2", "--batch", "2",
                            "--max-new-tokens", "12", "--out", str(tmp_path / "out")])
    summary = sdft.train_sdft(args, model=student, tokenizer=tokenizer)
    assert summary["rows"] == 4 and summary["steps"] == 2
    assert [row["step"] for row in summary["losses"]] == [1, 2]
    # at step 1 the student is the teacher's weights: only the hint in the teacher's prompt can
    # make their next-token distributions differ, so a loss above 0 is the hint at work
    assert summary["losses"][0]["loss"] > 0
    moved = any(not torch.equal(a, b) for a, b in zip(model.parameters(), student.parameters(),
                                                        strict=True))
    assert moved
    assert json.loads((tmp_path / "out" / "sdft.json").read_text()) == summary
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--steps", "1", "--group", "4", "--batch", "6"], "--batch 6 is not a multiple of --group 4"),
    (["--steps", "1", "--data-is-not-a-folder"], "unrecognized arguments"),
])
def test_bad_arguments_are_one_line_errors_with_exit_2(tmp_path, args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *args, "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1]


def test_a_folder_without_self_distillation_rows_is_a_one_line_error(tmp_path):
    from envduels.errors import UserError

    sdft = script("examples/train_sdft.py")
    with pytest.raises(UserError) as err:
        sdft.load_rows(tmp_path)
    assert err.value.message.startswith(
        f"{tmp_path} is no `envduels export --format hf` or jsonl folder")
    old = tmp_path / "old"   # a jsonl export from before these columns
    old.mkdir()
    (old / "environments.jsonl").write_text(json.dumps({"id": "a", "seed": 1, "hint": "h"}) + "\n")
    with pytest.raises(UserError) as err:
        sdft.load_rows(old)
    assert "has no prompt or privileged_context column" in err.value.message
    assert "\n" not in err.value.message
