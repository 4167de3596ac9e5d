"""Train a model with TRL's GRPO on EnvDuels environments, rolled out in the sandbox.

    python examples/train_trl.py --environments number_guess nim --steps 2 --group 4 \\
        --max-turns 3 --out runs/train-smoke [--model PATH]

NAME is anything `envduels validate` accepts: a library name, a `.py` file, an export folder
from `envduels export` (all its environments), `FOLDER/ENV_ID`. The default model is the bundled
SmolLM2-135M-Instruct, loaded through transformers from its GGUF file; `--model` takes a `.gguf`
file or a Hugging Face model folder. Every group starts without the hint; an all-failing group is
re-rolled once with the hint (the hinted rescue, docs/training.md; `--no-rescue` turns it off),
and `--curriculum` draws the groups (docs/training.md, "A curriculum"). Writes OUT/rescue.jsonl (the
rescue's counters, one row per step), OUT/model (the trained checkpoint) and OUT/train.json.
Needs `pip install 'envduels[train]'` (torch first, as the README says).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="train_trl.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--environments", nargs="+", required=True, metavar="NAME")
    ap.add_argument("--steps", type=int, required=True, help="GRPO optimiser steps")
    ap.add_argument("--group", type=int, required=True, help="rollouts per (environment, seed) group")
    ap.add_argument("--max-turns", type=int, default=None, help="lower each environment's turn cap")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--model", default=None, help="a .gguf file or a Hugging Face model folder")
    ap.add_argument("--groups-per-step", type=int, default=None,
                    help="groups per step (default: one per environment)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per reply")
    ap.add_argument("--learning-rate", type=float, default=1e-6)
    ap.add_argument("--escalate", action="store_true",
                    help="re-roll a still-failing hinted group once more with hint_2")
    ap.add_argument("--no-rescue", action="store_true",
                    help="never re-roll with the hint (GRPO alone: a baseline)")
    ap.add_argument("--curriculum", choices=("learnability", "trainable"), default=None,
                    help="draw each group's environment by the export's panel learnability, or "
                    "by the share of its groups that were trainable so far (default: every "
                    "environment and seed once per epoch)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name in ("steps", "group", "max_turns", "groups_per_step", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.group < 2:
        ap.error(f"--group must be at least 2 (GRPO compares rollouts within a group), got {args.group}")
    if not args.learning_rate > 0:
        ap.error(f"--learning-rate must be positive, got {args.learning_rate}")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} is a file; give a folder")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        ap.error(f"cannot create --out {args.out} ({err.strerror}); give a writable folder")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from envduels.envs import resolve
    from envduels.errors import UserError

    try:
        from envduels.export import author_fault_flags

        # an export's environments flagged as their author's fault are never trained on
        specs = [spec for name in args.environments for spec in resolve(name).specs
                 if not author_fault_flags(spec)]
        if not specs:
            raise UserError("no environment to train on: every one given is flagged as its "
                            "author's fault (nondeterministic, trivial or hint_is_key)")
        ids = [s.id for s in specs]
        if len(set(ids)) != len(ids):
            raise UserError(f"environment ids repeat ({', '.join(sorted({i for i in ids if ids.count(i) > 1}))}); "
                            "name each environment once")
        try:
            from envduels.rl.grpo import TrainSettings, train
        except ImportError as err:
            raise UserError(f"training needs {err.name}: pip install 'envduels[train]'") from None
        settings = TrainSettings(
            specs=tuple(specs), out=args.out, steps=args.steps, group=args.group,
            max_turns=args.max_turns, model=args.model, groups_per_step=args.groups_per_step,
            max_new_tokens=args.max_new_tokens, learning_rate=args.learning_rate,
            escalate=args.escalate, seed=args.seed, rescue=not args.no_rescue,
            curriculum=args.curriculum)
        started = time.monotonic()
        model_dir = train(settings).model_dir
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = {"environments": ids, "steps": args.steps, "group": args.group,
               "max_turns": args.max_turns, "model": args.model or "smollm2-135m-instruct",
               "rescue": not args.no_rescue, "curriculum": args.curriculum,
               "checkpoint": str(model_dir), "wall_s": round(time.monotonic() - started, 1)}
    (args.out / "train.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"trained {args.steps} steps in {summary['wall_s']} s; checkpoint {model_dir}; "
          f"rescue counters {args.out / 'rescue.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
