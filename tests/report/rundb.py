"""Write a simulated tournament into a real run database (envduels.store), as the engine would."""

from __future__ import annotations

from pathlib import Path

from run_records import call

from envduels.analysis import SimulatedRun, simulate_tournament
from envduels.envs import EnvSpec
from envduels.store import EnvRecord, EpisodeRow
from envduels.store.writer import RunWriter

HOSTILE_TITLE = "<script>alert('title')</script>"
HOSTILE_HINT = "</pre><script>alert('hint')</script> press <b>red</b>"
HOSTILE_SOURCE = "class E:\n    '''<img src=x onerror=alert('code')>'''\n"
HOSTILE_REPLY = "<script>alert('reply')</script> \\boxed{press red}"


def write_run(run_dir: Path, run: SimulatedRun, *, name: str = "sim", history: str = "all",
              hostile: bool = True) -> Path:
    t = run.tables
    store = RunWriter(run_dir)
    store.set_meta("config", {
        "name": name,
        "players": [{"name": p, "provider": "openai", "model": p, "params_b": b, "roles": r}
                    for p, b, r in zip(t.players["name"], t.players["params_b"], t.players["roles"], strict=True)],
        "tournament": {"history": history},
    })
    for k, p in enumerate(t.players["name"]):
        store.put(f"call-{p}", call(p, "solver", "c", input_tokens=1000 * (k + 1), output_tokens=200,
                                    cost_usd=0.25 * (k + 1)))
    for i, e in enumerate(t.environments.to_dict("records")):
        evil = hostile and i == 0
        store.put_environment(EnvRecord(EnvSpec(
            e["env_id"], HOSTILE_SOURCE if evil else e["source"], class_name=e["class_name"], max_turns=20,
            domain=e["domain"], author=e["author"], title=HOSTILE_TITLE if evil else e["title"],
            hints={"hint": HOSTILE_HINT if evil else e["hint"]}, benchmark_seeds=tuple(e["benchmark_seeds"])),
            round=int(e["round"]), slot=i, valid=bool(e["valid"]), invalid_reason=e["invalid_reason"],
            fixed_pool=bool(e.get("fixed_pool", False))))
    first_env = t.environments["env_id"].iloc[0]
    for ep in t.episodes.to_dict("records"):
        transcript = ep["transcript"]
        if hostile and ep["env_id"] == first_env:
            transcript = [{"role": "user", "content": "Observation: <iframe src='x'>"},
                          {"role": "assistant", "content": HOSTILE_REPLY},
                          {"role": "env", "action": "\\boxed{press red}", "reward": 1.0, "terminated": True,
                           "content": "done"}]
        store.put_episode(EpisodeRow(
            episode_key=ep["episode_key"], env_id=ep["env_id"], author=ep["author"], solver=ep["solver"],
            round=int(ep["round"]), domain=ep["domain"], seed=int(ep["seed"]), trial=int(ep["trial"]),
            hinted=bool(ep["hinted"]), outcome=ep["outcome"], reason=ep["reason"] or "", turns=int(ep["turns"]),
            self_play=bool(ep["self_play"]), transcript=transcript))
    store.close()
    return run_dir


def small_run(run_dir: Path, *, seed: int = 0, name: str = "sim", history: str = "all") -> Path:
    run = simulate_tournament(players=5, envs_per_author=2, rounds=2, seeds=3, seed=seed, p_invalid=0.1,
                              p_incomplete=0.03, p_error=0.02)
    return write_run(run_dir, run, name=name, history=history)
