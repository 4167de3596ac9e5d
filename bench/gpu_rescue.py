"""Does the hinted rescue make a model learn faster? GRPO with and without it, side by side.

    python bench/gpu_rescue.py [--out runs/gpu-rescue] [--model PATH]     # one GPU, < 10 minutes
    python bench/gpu_rescue.py --smoke                                   # CPU, CI: 2 tiny steps

1. Screen: the model plays each candidate library environment on `--screen-seeds` seeds without
   and with the hint (sampled, one episode each). The environments it fails cold (no unhinted
   success) are kept, those the hint helps most first, at most `--environments-max`.
2. Train: two copies of the same starting model, GRPO on the kept environments with the same
   training seeds, steps, batch and seed (so the same groups in the same order): one with the
   hinted rescue (an all-failing group is re-rolled once with the hint), one without.
3. Per step, side by side: the no-hint success rate of the step's groups, the fraction of
   zero-gradient groups (kept rewards all equal) and the fraction the rescue turned trainable.
4. Held-out: the starting model and both trained ones play every kept environment on
   `--heldout-seeds` seeds no training group used, without the hint, greedy.

Writes OUT/gpu_rescue.json (settings, screen, per-step counters, held-out results) and each arm's
`rescue.jsonl`. The device this workplace sometimes lends is one H200; the full defaults are
sized for it (docs/training.md, "Does the rescue help?"). Library environments are trusted code:
`--unsafe-no-sandbox` runs them without bubblewrap where the GPU machine has none.
Needs `pip install 'envduels[train]'` (torch, as the README says: a CUDA build on a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envduels.envs import EnvSpec

ARMS = ("rescue", "no_rescue")
SMOKE_ENVIRONMENTS = ("number_guess", "nim")


@dataclass(frozen=True)
class Options:
    """One run's settings (`--smoke` sets the tiny ones)."""

    out: Path
    model: str | None = None
    environments: tuple[str, ...] = ()
    environments_max: int = 6
    screen_seeds: int = 8
    train_seeds: int = 8
    heldout_seeds: int = 16
    steps: int = 12
    group: int = 8
    groups_per_step: int = 8
    max_turns: int = 3
    max_new_tokens: int = 96
    learning_rate: float = 5e-6
    seed: int = 0
    unsafe_no_sandbox: bool = False

    @classmethod
    def smoke(cls, out: Path, **overrides: Any) -> Options:
        return replace(cls(out=out, environments=SMOKE_ENVIRONMENTS, environments_max=2,
                           screen_seeds=1, train_seeds=1, heldout_seeds=1, steps=2, group=2,
                           groups_per_step=1, max_turns=1, max_new_tokens=8), **overrides)


def parse_args(argv: list[str] | None) -> Options:
    ap = argparse.ArgumentParser(prog="gpu_rescue.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="2 tiny steps on CPU (CI)")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu-rescue"))
    ap.add_argument("--model", default=None, help="a .gguf file or a Hugging Face model folder")
    ap.add_argument("--environments", nargs="+", default=None, metavar="NAME",
                    help="candidate library environments (default: the whole library)")
    defaults = Options(out=Path("."))
    for name in ("environments_max", "screen_seeds", "train_seeds", "heldout_seeds", "steps",
                 "group", "groups_per_step", "max_turns", "max_new_tokens", "seed"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                        help=f"default {getattr(defaults, name)}")
    ap.add_argument("--learning-rate", type=float, default=None,
                    help=f"default {defaults.learning_rate}")
    ap.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="run the (trusted) library environments without bubblewrap")
    args = ap.parse_args(argv)
    given = {k: v for k, v in vars(args).items()
             if v is not None and k not in ("smoke", "out", "environments")}
    if args.environments is not None:
        given["environments"] = tuple(args.environments)
    for name, value in given.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 1 and name != "seed":
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if given.get("group", 2) < 2:
        ap.error("--group must be at least 2 (GRPO compares rollouts within a group)")
    if args.learning_rate is not None and not args.learning_rate > 0:
        ap.error(f"--learning-rate must be positive, got {args.learning_rate}")
    return Options.smoke(args.out, **given) if args.smoke else replace(Options(out=args.out),
                                                                        **given)


def _with_seeds(spec: EnvSpec, run_seed: int, n: int) -> EnvSpec:
    from envduels.envs import benchmark_seeds

    return replace(spec, benchmark_seeds=tuple(benchmark_seeds(run_seed, spec.id, n)))


def screen(specs: list[EnvSpec], policy: Any, opts: Options) -> list[dict[str, Any]]:
    """Each candidate's unhinted and hinted success rate on the screen seeds (run seed 2, so
    neither the training nor the held-out seeds), sampled, one episode per seed and condition."""
    from envduels.rl._episodes import EpisodeRequest, play_episodes
    from envduels.sandbox import EnvPool

    requests = [EpisodeRequest(s, seed, level) for s in specs
                for seed in _with_seeds(s, 2, opts.screen_seeds).benchmark_seeds
                for level in (0, 1)]

    async def play() -> list[Any]:
        async with EnvPool(unsafe_no_sandbox=opts.unsafe_no_sandbox, warm=0,
                           max_warm=min(len(requests), 64)) as pool:
            return await play_episodes(requests, policy, pool, max_turns=opts.max_turns)

    rollouts = asyncio.run(play())
    rows = []
    for spec in specs:
        mine = [r for r in rollouts if r.request.spec.id == spec.id]
        cold = [r.reward for r in mine if r.request.hint_level == 0]
        hinted = [r.reward for r in mine if r.request.hint_level == 1]
        rows.append({"env_id": spec.id, "cold": sum(cold) / len(cold),
                     "hinted": sum(hinted) / len(hinted)})
    return rows


def choose(rows: list[dict[str, Any]], most: int) -> list[str]:
    """The environments failed cold, those the hint helped most first, at most `most`; if the
    model solved every one cold sometimes, the one it solved least."""
    cold = sorted((r for r in rows if r["cold"] == 0), key=lambda r: (-r["hinted"], r["env_id"]))
    if not cold:
        cold = sorted(rows, key=lambda r: (r["cold"], -r["hinted"], r["env_id"]))[:1]
    return [r["env_id"] for r in cold[:most]]


def run(opts: Options, *, model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None) -> dict[str, Any]:
    """The whole comparison; returns what OUT/gpu_rescue.json holds. A `model` passed in is
    copied for each arm, never trained itself."""
    import torch

    from envduels.envs import library_env, library_names
    from envduels.rl.grpo import HFPolicy, TrainSettings, evaluate, load_model, train

    started = time.monotonic()
    if model is None or tokenizer is None:
        model, tokenizer = load_model(opts.model)
    if torch.cuda.is_available():
        model = model.to("cuda")
    names = opts.environments or tuple(library_names())
    specs = [library_env(n) for n in names]
    sampled = HFPolicy(model, tokenizer, max_new_tokens=opts.max_new_tokens, temperature=1.0)
    torch.manual_seed(opts.seed)
    screened = screen(specs, sampled, opts)
    chosen = choose(screened, opts.environments_max)
    train_specs = tuple(_with_seeds(library_env(n), 0, opts.train_seeds) for n in chosen)
    heldout = [_with_seeds(library_env(n), 1, opts.heldout_seeds) for n in chosen]

    def held_out(m: PreTrainedModel) -> dict[str, Any]:
        ev = evaluate(heldout, HFPolicy(m, tokenizer, max_new_tokens=opts.max_new_tokens,
                                        temperature=0.0),
                      max_turns=opts.max_turns, unsafe_no_sandbox=opts.unsafe_no_sandbox)
        return {**asdict(ev), "success_rate": ev.success_rate}

    result: dict[str, Any] = {"options": {k: str(v) if isinstance(v, Path) else v
                                          for k, v in asdict(opts).items()},
                              "device": "cuda" if torch.cuda.is_available() else "cpu",
                              "screen": screened, "environments": chosen,
                              "heldout": {"base": held_out(model)}, "steps": {}}
    for arm in ARMS:
        copied = copy.deepcopy(model)
        settings = TrainSettings(
            specs=train_specs, out=opts.out / arm, steps=opts.steps, group=opts.group,
            groups_per_step=opts.groups_per_step, max_turns=opts.max_turns,
            max_new_tokens=opts.max_new_tokens, learning_rate=opts.learning_rate,
            seed=opts.seed, unsafe_no_sandbox=opts.unsafe_no_sandbox, rescue=arm == "rescue")
        arm_started = time.monotonic()
        trained = train(settings, model=copied, tokenizer=tokenizer, save=False).model
        log = (opts.out / arm / "rescue.jsonl").read_text(encoding="utf-8").splitlines()
        result["steps"][arm] = [json.loads(line) for line in log]
        result["heldout"][arm] = held_out(trained)
        result[f"{arm}_wall_s"] = round(time.monotonic() - arm_started, 1)
        del copied, trained
    result["wall_s"] = round(time.monotonic() - started, 1)
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "gpu_rescue.json").write_text(json.dumps(result, indent=2) + "\n",
                                              encoding="utf-8")
    return result


def _pct(value: float | None) -> str:
    return "  -  " if value is None else f"{100 * value:4.0f}%"


def table(result: dict[str, Any]) -> str:
    """The figures side by side, as the run prints them."""
    lines = ["screen (cold / hinted success): " + ", ".join(
        f"{r['env_id']} {_pct(r['cold']).strip()}/{_pct(r['hinted']).strip()}"
        for r in result["screen"]),
        f"trained on: {', '.join(result['environments'])} ({result['device']})", "",
        "step | with rescue: no-hint  zero-grad  rescued | without: no-hint  zero-grad"]
    with_rescue, without = result["steps"]["rescue"], result["steps"]["no_rescue"]
    for a, b in zip(with_rescue, without, strict=True):
        lines.append(f"{a['step']:4d} |       {_pct(a['no_hint_success_fraction'])}      "
                     f"{_pct(a['constant_group_fraction'])}    "
                     f"{_pct(a['rescued_trainable_group_fraction'])} |    "
                     f"{_pct(b['no_hint_success_fraction'])}      "
                     f"{_pct(b['constant_group_fraction'])}")
    lines.append("")
    lines.append("held-out, no hint, greedy: " + "; ".join(
        f"{arm} {h['successes']}/{h['episodes'] - h['incomplete']} ({_pct(h['success_rate']).strip()})"
        for arm, h in result["heldout"].items()))
    lines.append(f"wall: {result['wall_s']} s (with rescue {result['rescue_wall_s']} s, "
                 f"without {result['no_rescue_wall_s']} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    from envduels.errors import UserError

    try:
        try:
            import trl  # noqa: F401
        except ImportError as err:
            raise UserError(f"the rescue bench needs {err.name}: pip install 'envduels[train]'") \
                from None
        result = run(opts)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(result))
    if opts.steps < 10:
        print("(a smoke run: plumbing, not a finding)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
