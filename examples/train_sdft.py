"""Self-distillation on EnvDuels environments with TRL's SDFT: the model, shown the author's hint,
teaches its unhinted self.

    envduels export runs/x out/sdft --format hf
    python examples/train_sdft.py out/sdft --steps 2 --group 2 --batch 2 \\
        --max-new-tokens 16 --out runs/sdft-smoke [--model PATH]

DATA is an `envduels export --format hf` folder (or a `--format jsonl` one): one row per
(environment, seed), `prompt` the duel's solver system prompt and unhinted first turn,
`privileged_context` the hint. TRL's `SDFTTrainer` reads them as they are. Its teacher prompt is
`envduels.rl.TEACHER_PROMPT_TEMPLATE`, so the teacher sees exactly the duel's hinted first turn.
SDFT trains the first reply only (the prompt is the first turn); whole episodes are GRPO's
(examples/train_trl.py). Writes OUT/model (the checkpoint) and OUT/sdft.json (the losses per
step). The default model is the bundled SmolLM2-135M-Instruct; `--model` takes a `.gguf` file
or a Hugging Face model folder. Needs `pip install 'envduels[train]'` (torch first, as the
README says). docs/training.md, "Self-distillation".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SUMMARY = "sdft.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="train_sdft.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, metavar="DATA",
                    help="an `envduels export --format hf` (or jsonl) folder")
    ap.add_argument("--steps", type=int, required=True, help="optimiser steps")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--group", type=int, default=4, help="completions sampled per prompt")
    ap.add_argument("--batch", type=int, default=8,
                    help="completions per optimiser step (a multiple of --group)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="tokens per completion")
    ap.add_argument("--learning-rate", type=float, default=1e-6)
    ap.add_argument("--model", default=None, help="a .gguf file or a Hugging Face model folder")
    ap.add_argument("--teacher", choices=("base", "live", "ema"), default="base",
                    help="the hinted teacher: the starting model (TRL's default), the model as "
                    "it trains, or an average of it")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name in ("steps", "group", "batch", "max_new_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.batch % args.group:
        ap.error(f"--batch {args.batch} is not a multiple of --group {args.group}; "
                 "each prompt's completions share a step")
    if not args.learning_rate > 0:
        ap.error(f"--learning-rate must be positive, got {args.learning_rate}")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} is a file; give a folder")
    return args


def load_rows(folder: Path) -> Dataset:
    """The export's rows that carry a hint (SDFT needs a privileged context on every row).
    UserError (one line) for a folder that is no record export."""
    from datasets import Dataset, load_from_disk

    from envduels.errors import UserError
    from envduels.export import JSONL_NAME

    if (folder / JSONL_NAME).is_file():
        rows = Dataset.from_json(str(folder / JSONL_NAME))
    elif (folder / "dataset_info.json").is_file():
        rows = load_from_disk(str(folder))
    else:
        raise UserError(f"{folder} is no `envduels export --format hf` or jsonl folder; "
                        "export one: envduels export RUN_DIR OUT --format hf")
    missing = [c for c in ("prompt", "privileged_context") if c not in rows.column_names]
    if missing:
        raise UserError(f"{folder} has no {' or '.join(missing)} column: it was exported by an "
                        "envduels without self-distillation rows; export it again")
    hinted = rows.filter(lambda row: bool(row["privileged_context"]))
    if len(hinted) == 0:
        raise UserError(f"{folder} has no row with a hint: nothing to distil")
    return hinted


def train_sdft(args: argparse.Namespace, *, model: PreTrainedModel | None = None,
               tokenizer: PreTrainedTokenizerBase | None = None) -> dict[str, Any]:
    """Train with TRL's SDFTTrainer on `args.data` for `args.steps` steps; returns the summary
    written to OUT/sdft.json. `model`/`tokenizer` default to `load_model(args.model)`; a model
    passed in is trained in place."""
    from trl.experimental.sdft import SDFTConfig, SDFTTrainer

    from envduels.rl import TEACHER_PROMPT_TEMPLATE
    from envduels.rl.grpo import load_model

    rows = load_rows(args.data)
    if model is None or tokenizer is None:
        model, tokenizer = load_model(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.teacher != "live":
        _loadable_by_path(model, tokenizer, args.out / "base")
    config = SDFTConfig(
        output_dir=str(args.out / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        teacher_prompt_template=TEACHER_PROMPT_TEMPLATE,
        teacher_model_kind=args.teacher,
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not _has_cuda(),
        bf16=False,
        seed=args.seed,
        disable_tqdm=True,
    )
    started = time.monotonic()
    trainer = SDFTTrainer(model=model, args=config, train_dataset=rows,
                          processing_class=tokenizer)
    trainer.train()
    model_dir = args.out / "model"
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    losses = [{"step": int(log["step"]), "loss": float(log["loss"])}
              for log in trainer.state.log_history if "loss" in log]
    summary = {"data": str(args.data), "rows": len(rows), "steps": trainer.state.global_step,
               "group": args.group, "batch": args.batch, "losses": losses,
               "model": args.model or "smollm2-135m-instruct", "checkpoint": str(model_dir),
               "wall_s": round(time.monotonic() - started, 1)}
    (args.out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _loadable_by_path(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                      folder: Path) -> None:
    """TRL builds a `base` or `ema` teacher from the student's `name_or_path`; a model loaded
    from a GGUF file has none it can read, so save the starting weights to `folder` and point
    the model there."""
    if (Path(model.config.name_or_path) / "config.json").is_file():
        return
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    model.config.name_or_path = str(folder)


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from envduels.errors import UserError

    try:
        try:
            import trl.experimental.sdft  # noqa: F401
        except ImportError as err:
            raise UserError(f"self-distillation needs {err.name} (TRL 1.16 or later): "
                            "pip install 'envduels[train]'") from None
        summary = train_sdft(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"trained {summary['steps']} SDFT steps on {summary['rows']} rows in "
          f"{summary['wall_s']} s; checkpoint {summary['checkpoint']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
