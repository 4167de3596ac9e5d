"""Run by tests/cluster/test_ray_executor.py inside a network namespace of its own (`unshare -n`,
loopback up), so that every address Ray advertises is 127.0.0.1. Starts a two-node Ray cluster on
this machine and the scripted model server, plays the scripted tournament of
tests/engine/duel_script.py on the local and on the Ray executor, kills a worker node in the middle
of a third run and resumes it. Prints one JSON object with what the test checks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))

import yaml  # noqa: E402
from duel_script import config, respond  # noqa: E402

KEY = "sk-test-secret-ray"


def report(run_dir: Path) -> dict:
    from envduels.report.commands import report_command
    out = run_dir.parent / f"{run_dir.name}.report.json"
    assert report_command([run_dir], json_path=out, html_path=None, bootstrap=200) == 0
    return json.loads(out.read_text())


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Where two reports differ (floats compared to 9 significant digits: BLAS sums may round
    the last bits differently between runs; every metric that differs more is listed)."""
    if isinstance(a, float) and isinstance(b, float):
        return [] if f"{a:.9g}" == f"{b:.9g}" else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:80]} != {str(b)[:80]}"]


def run(cfg: dict, path: Path) -> int:
    from envduels.engine.commands import run_command
    path.write_text(yaml.safe_dump(cfg))
    return run_command(path, unsafe_no_sandbox=False, quiet=True)


def outcomes(run_dir: Path) -> list:
    from envduels.store.writer import RunWriter
    with RunWriter(run_dir, create=False) as store:
        return sorted((e.env_id, e.solver, e.seed, e.hinted, e.outcome, e.reason.split(":")[0])
                      for e in store.reader.episodes())


def vector_rollout() -> dict:
    """Four sandboxes of the library's nim on the cluster, stepped together with oracle-free
    moves, against the same moves through the local adapter."""
    import numpy as np

    import envduels.gym

    vec = envduels.gym.make_vec("nim", 4)
    obs, infos = vec.reset(seed=11)
    nodes = {env._instance._instance.node for env in vec.envs}   # where each sandbox runs
    moves = ["I take one. \\boxed{1 1}", "no box here", "\\boxed{2 1}"]
    trace = [list(obs)]
    steps = []
    for move in moves:
        obs, rewards, terminated, truncated, infos = vec.step([move] * 4)
        trace.append(list(obs))
        steps.append([rewards.tolist(), terminated.tolist(), truncated.tolist()])
    vec.close()
    local = []
    for i in range(4):
        env = envduels.gym.make("nim")
        first, _ = env.reset(seed=11 + i)
        row = [first] + [env.step(m)[0] for m in moves]
        env.close()
        local.append(row)
    same = all(trace[t][i] == local[i][t] for i in range(4) for t in range(len(moves) + 1))
    return {"nodes": len(nodes), "same_as_local": same, "steps": steps,
            "obs_type": type(obs).__name__, "rewards_dtype": str(np.asarray(rewards).dtype)}


def main(work: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from envduels.testing import ScriptedServer

    os.environ["ENVDUELS_TEST_KEY"] = KEY
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    result: dict = {"address": cluster.address,
                    "node_ips": sorted({n["NodeManagerAddress"] for n in ray.nodes()})}
    executor = {"kind": "ray", "address": cluster.address}
    with ScriptedServer(respond, api_key=KEY) as server:
        local = run(config(server.base_url, str(work / "local")), work / "local.yaml")
        on_ray = run(config(server.base_url, str(work / "ray"), extra={"executor": executor}),
                     work / "ray.yaml")
        result.update(exit_local=local, exit_ray=on_ray,
                      outcomes_equal=outcomes(work / "local") == outcomes(work / "ray"))
        before = len(server.requests)   # the local run resumed on Ray: nothing left to do
        result["resume_other_executor_exit"] = run(
            config(server.base_url, str(work / "local"), extra={"executor": executor}),
            work / "local-on-ray.yaml")
        result["resume_other_executor_requests"] = len(server.requests) - before
        rep_local, rep_ray = report(work / "local"), report(work / "ray")
        result["report_keys"] = sorted(rep_local)
        result["same"] = {k: not differences(rep_local[k], rep_ray[k]) for k in rep_local
                          if k not in ("costs", "run")}
        result["differences"] = [d for k in result["same"]
                                 for d in differences(rep_local[k], rep_ray[k], k)][:20]

    # a worker node lost in the middle of a run: its episodes end `error`, a resume completes
    with ScriptedServer(respond, api_key=KEY, latency_s=0.3) as server:
        cfg = config(server.base_url, str(work / "killed"), seeds=4, extra={"executor": executor})
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(code=run(cfg, work / "killed.yaml")))
        thread.start()
        from envduels.store.writer import RunWriter
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if (work / "killed" / "run.db").exists():
                with RunWriter(work / "killed", create=False) as store:
                    if sum(store.reader.episode_counts().values()) >= 4:
                        break
        cluster.remove_node(worker)
        thread.join(300)
        first = outcomes(work / "killed")
        result["killed_exit"] = box.get("code")
        result["killed_outcomes"] = sorted({o[4] for o in first})
        result["killed_error_reasons"] = sorted({o[5] for o in first if o[4] == "error"})
        result["killed_wrong_blame"] = [o for o in first if o[4] == "incomplete"
                                        and o[1] != "carol"]
        result["requests_before_resume"] = len(server.requests)
        result["resume_exit"] = run(cfg, work / "killed.yaml")
        result["resume_requests"] = len(server.requests) - result["requests_before_resume"]
        final = outcomes(work / "killed")
        result["resumed_outcomes"] = sorted({o[4] for o in final})
        killed_requests = list(server.requests)
        # the same tournament on one machine, for comparison
        cfg_local = config(server.base_url, str(work / "killed_local"), seeds=4)
        run(cfg_local, work / "killed_local.yaml")
        result["resumed_equals_local"] = final == outcomes(work / "killed_local")
        asked = [json.dumps([r["model"], r["messages"]]) for r in killed_requests]
        result["killed_requests_repeated"] = len(asked) - len(set(asked))
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")   # replaces the node killed above
    cluster.wait_for_nodes()
    result["vector"] = vector_rollout()
    ray.shutdown()
    cluster.shutdown()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
