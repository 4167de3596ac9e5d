"""Episodes files of many models, as another harness would record them (`report --episodes`).

An independent generator (not `analysis.simulate`), whose environments look like authored ones:
success is σ(skill − difficulty + solver×environment noise + seed noise + hinted ×
(solver's hint sensitivity × hint effect + noise)); difficulty is a mixture (25% of
environments nobody solves, 12% everybody solves, the rest around the author's level), the
hint effect the author's quality times a mixture (30% useless, 10% harmful, 20% decisive, 40%
moderate); a share of episodes is absent, `incomplete` or `error`. Used by the 100-model
memory test (tests/report/test_many_models.py) and `bench/bench_many_models.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from envduels.duel.outcomes import Outcome

_DOMAINS = ("logic", "planning", "math", "language", "search")


def many_model_episodes(models: int = 100, *, envs_per_author: int = 1, seeds: int = 1,
                        seed: int = 0) -> Iterator[dict[str, object]]:
    """Episode rows (the `report --episodes` fields) of a round-robin among `models` models:
    each writes `envs_per_author` environments and solves every other model's on `seeds` seeds,
    without and with the hint. Deterministic for a given `seed`."""
    rng = np.random.default_rng(seed)
    names = [f"model-{i:03d}" for i in range(models)]
    skill = rng.normal(0.0, 1.0, models)
    level = 0.6 * skill + rng.normal(0.0, 0.8, models)  # authors write near their own level
    quality = np.abs(rng.normal(1.0, 0.5, models))
    sensitivity = np.abs(rng.normal(1.0, 0.4, models))
    for a, author in enumerate(names):
        for k in range(envs_per_author):
            env_id = f"{author}-e{k}"
            kind = rng.random()
            difficulty = 9.0 if kind < 0.25 else -9.0 if kind < 0.37 else level[a] + rng.standard_t(3)
            mix = rng.random()
            effect = quality[a] * (0.0 if mix < 0.3 else -1.0 if mix < 0.4 else 4.0 if mix < 0.6 else 1.2)
            domain = _DOMAINS[(a + k) % len(_DOMAINS)]
            for s, solver in enumerate(names):
                if s == a:
                    continue
                inter = rng.normal(0.0, 0.7)
                for sd in range(seeds):
                    base = skill[s] - difficulty + inter + rng.normal(0.0, 0.3)
                    for hinted in (False, True):
                        gain = sensitivity[s] * effect + rng.normal(0.0, 0.3) if hinted else 0.0
                        u = rng.random()
                        if u < 0.05:
                            continue  # never recorded
                        outcome = (Outcome.ERROR if u < 0.08 else Outcome.INCOMPLETE if u < 0.10
                                   else Outcome.SUCCESS if rng.random() < expit(base + gain)
                                   else Outcome.FAILURE)
                        yield {"env_id": env_id, "author": author, "domain": domain, "round": 1,
                               "solver": solver, "seed": sd, "trial": 0, "hinted": hinted, "outcome": outcome}


def write_many_model_episodes(path: str | Path, models: int = 100, **kw: Any) -> Path:
    """Write `many_model_episodes(models, **kw)` as JSON Lines to `path`; returns the path."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for row in many_model_episodes(models, **kw):
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    return path
