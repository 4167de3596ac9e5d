"""`make_vec` without a Ray cluster: the sub-environments' sandboxes in this machine's harness
worker processes (docs/workers.md), each behaving exactly as `make` does."""

from __future__ import annotations

from pathlib import Path

from envduels._gym_vector import LocalVectorEnv
from envduels.gym import make, make_vec


def test_make_vec_without_a_cluster_uses_harness_workers_and_matches_make() -> None:
    vec = make_vec("number_guess", 3, workers=2)
    try:
        assert isinstance(vec, LocalVectorEnv)
        workers = vec._pool.worker_pids
        assert len(workers) == 2
        observations, _ = vec.reset(seed=10)
        singles = []
        for i in range(3):
            env = make("number_guess")
            try:
                singles.append(env.reset(seed=10 + i)[0])
            finally:
                env.close()
        assert observations == tuple(singles)
        after, rewards, terminated, truncated, _ = vec.step(["\\boxed{50}"] * 3)
        assert len(after) == 3 and rewards.shape == (3,) and not truncated.any()
    finally:
        vec.close()
    assert [Path(f"/proc/{p}").exists() for p in workers] == [False, False]
