"""The transfer loop: does training on an author's environments help as much as their hint lift says?

    python examples/transfer/transfer.py RUN_DIR --heldout EXPORT --out DIR \\
        [--band 0.05 0.95 | --target MODEL | --all] [--authors A ...] \\
        [--steps N] [--group G] [--max-turns T] [--model PATH] [--max-new-tokens K]

1. Per author of the run (`--authors`, default every author with a valid environment that is
   not in the held-out export): `envduels export RUN_DIR OUT/pools/AUTHOR --author AUTHOR` with
   the learnable band (`--min-pass/--max-pass`, default 0.05-0.95), `--target MODEL`, or
   nothing (`--all`). A pool the selection leaves empty is skipped, and said so.
2. The base model, as a solver, on the held-out export: every benchmark seed once, no hint,
   greedy, through the same episode loop as training (the duel's protocol, in the sandbox).
3. Per pool: a fresh copy of the base model trained with TRL's GRPO and the hinted rescue
   (`envduels.rl.grpo.train`, `OUT/pools/AUTHOR/train/rescue.jsonl`), then evaluated as in 2.
4. `OUT/gains.csv` (`author,gain`: the trained pass rate minus the base pass rate on the
   held-out export) and `OUT/transfer.json` (every number behind it).
5. `envduels correlate RUN_DIR --gains OUT/gains.csv --out OUT/correlate`.

Sizes that make the correlation mean something, and how to run this on GPUs: docs/training.md.
Needs `pip install 'envduels[train]'`. Bad arguments: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def envduels_command() -> list[str]:
    """The `envduels` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "envduels"
    found = str(beside) if beside.is_file() else shutil.which("envduels")
    if found is None:
        raise SystemExit("error: the envduels command is not installed here; pip install -e .")
    return [found]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="transfer.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    ap.add_argument("--heldout", type=Path, required=True, metavar="EXPORT",
                    help="an EnvDuels export folder the pools are evaluated on")
    ap.add_argument("--out", type=Path, required=True)
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument("--band", type=float, nargs=2, metavar=("LOW", "HIGH"), default=(0.05, 0.95),
                      help="panel no-hint pass band kept (default 0.05 0.95)")
    pick.add_argument("--target", metavar="MODEL", help="keep the seeds MODEL fails cold and passes hinted")
    pick.add_argument("--all", action="store_true", help="keep every valid environment")
    ap.add_argument("--authors", nargs="+", metavar="A", help="the author pools (default: all)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=None)
    ap.add_argument("--model", default=None, help="a .gguf file or a Hugging Face model folder")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--learning-rate", type=float, default=1e-6)
    ap.add_argument("--label", default="", help='e.g. "smoke test": printed with every result')
    args = ap.parse_args(argv)
    for name in ("steps", "group", "max_turns", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.group < 2:
        ap.error(f"--group must be at least 2, got {args.group}")
    if args.band and not 0 <= args.band[0] <= args.band[1] <= 1:
        ap.error(f"--band {args.band[0]} {args.band[1]}: give 0 <= LOW <= HIGH <= 1")
    return args


def export_pool(run_dir: Path, author: str, out: Path, args: argparse.Namespace) -> str | None:
    """Export one author's pool with `envduels export`; the command's one-line error when the
    selection keeps nothing (or fails), else None."""
    cmd = [*envduels_command(), "export", str(run_dir), str(out), "--author", author]
    if args.target:
        cmd += ["--target", args.target]
    elif not args.all:
        cmd += ["--min-pass", str(args.band[0]), "--max-pass", str(args.band[1])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else f"envduels export exited {proc.returncode}"
    return None


def run_authors(run_dir: Path, heldout_ids: set[str]) -> list[str]:
    """Authors with a valid environment in the run, none of whose environments is held out."""
    from envduels.report.correlate import load_run_tables

    envs = load_run_tables(run_dir).environments
    valid = envs[envs["valid"].astype(bool)]
    held = set(valid[valid["env_id"].isin(heldout_ids)]["author"])
    return sorted(set(valid["author"]) - held)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from envduels.envs import load_export
    from envduels.errors import UserError

    label = f"[{args.label}] " if args.label else ""
    try:
        heldout = load_export(args.heldout)
        authors = args.authors or run_authors(args.run_dir, {s.id for s in heldout})
        if not authors:
            raise UserError(f"{args.run_dir} has no author with a valid environment outside the "
                            "held-out export; pass --authors")
        from envduels.rl.grpo import HFPolicy, TrainSettings, evaluate, load_model, train
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"error: training needs {err.name}: pip install 'envduels[train]'", file=sys.stderr)
        return 2

    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base_model, tokenizer = load_model(args.model)

    def score(model: Any) -> float:
        policy = HFPolicy(model, tokenizer, max_new_tokens=args.max_new_tokens, temperature=0.0)
        rate = evaluate(heldout, policy, max_turns=args.max_turns).success_rate
        return 0.0 if rate is None else rate

    base_rate = score(base_model)
    print(f"{label}base model on the held-out export ({len(heldout)} environments): pass rate {base_rate:.3f}")
    pools: dict[str, dict[str, Any]] = {}
    for author in authors:
        pool_dir = args.out / "pools" / author
        shutil.rmtree(pool_dir, ignore_errors=True)
        skipped = export_pool(args.run_dir, author, pool_dir / "export", args)
        if skipped is not None:
            print(f"{label}pool {author}: skipped ({skipped})")
            pools[author] = {"skipped": skipped}
            continue
        specs = load_export(pool_dir / "export")
        t0 = time.monotonic()
        trained = train(TrainSettings(
            specs=tuple(specs), out=pool_dir / "train", steps=args.steps, group=args.group,
            max_turns=args.max_turns, model=args.model, max_new_tokens=args.max_new_tokens,
            learning_rate=args.learning_rate), model=copy.deepcopy(base_model),
            tokenizer=tokenizer, save=False)
        rate = score(trained.model)
        pools[author] = {"environments": [s.id for s in specs], "trained_rate": rate,
                         "gain": rate - base_rate, "train_and_eval_s": round(time.monotonic() - t0, 1)}
        print(f"{label}pool {author}: {len(specs)} environments, held-out pass rate {rate:.3f}, "
              f"gain {rate - base_rate:+.3f}")
        del trained

    gains = {a: p["gain"] for a, p in pools.items() if "gain" in p}
    if not gains:
        print(f"error: no pool was trained (every selection was empty); see {args.out}/transfer.json",
              file=sys.stderr)
        _write_json(args, base_rate, pools, started)
        return 2
    (args.out / "gains.csv").write_text(
        "author,gain\n" + "".join(f"{a},{g!r}\n" for a, g in gains.items()), encoding="utf-8")
    _write_json(args, base_rate, pools, started)
    print(f"{label}gains of {len(gains)} pools in {args.out / 'gains.csv'}; correlating:")
    proc = subprocess.run([*envduels_command(), "correlate", str(args.run_dir), "--gains",
                           str(args.out / "gains.csv"), "--out", str(args.out / "correlate")])
    if args.label:
        print(f"{label}these numbers are a {args.label}, not a finding")
    return proc.returncode


def _write_json(args: argparse.Namespace, base_rate: float, pools: dict[str, Any],
                started: float) -> None:
    doc = {"label": args.label, "run_dir": str(args.run_dir), "heldout": str(args.heldout),
           "model": args.model or "smollm2-135m-instruct", "steps": args.steps,
           "group": args.group, "max_turns": args.max_turns, "base_rate": base_rate,
           "pools": pools, "wall_s": round(time.monotonic() - started, 1)}
    (args.out / "transfer.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
