"""Run by tests/cluster/test_ray_serve.py inside a network namespace of its own (`unshare -n`,
loopback up), so that every address Ray advertises is 127.0.0.1. Starts a two-node Ray cluster
on this machine and `envduels serve --ray` on it (the documented command); plays sessions
through one client configuration (the URLs the command printed), finds the node each session
runs on, kills one node's server process, and plays one scripted run through one server
process, two, and the two nodes. Prints one JSON object with what the test checks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import httpx  # noqa: E402

HERE = Path(__file__).resolve().parent
MARKER = str(HERE.parent / "serve" / "fixtures" / "marker.py")
SCRIPT = Path(sys.executable).parent / "envduels"
LOST = ("the server closed the session: the connection ended without a word from the server "
        "(the server process that held the session stopped, or the network failed: not the "
        "environment's fault); reset to start another")


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`envduels serve ARGS`; its first stdout line's URLs (one string)."""
    proc = subprocess.Popen([str(SCRIPT), "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    if not first.startswith("envduels serve: http://"):
        proc.kill()
        raise SystemExit(f"serve {args} did not start: {first!r} {proc.stderr.read()[-3000:]}")
    return proc, first.split(": ", 1)[1].strip()


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    assert proc.stderr is not None
    return code, proc.stderr.read()


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as fh:
        return fh.read().strip()


def ancestry(pid: int) -> list[tuple[int, str]]:
    out = []
    while pid > 1:
        try:
            out.append((pid, comm(pid)))
            pid = parent(pid)
        except OSError:
            break
    return out


def where(marker: str) -> tuple[int, int]:
    """(the raylet, the server process) above the sandbox holding /tmp/`marker`: the node and
    the process of that node that holds the session."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.path.exists(f"/proc/{entry}/root/tmp/{marker}"):
                continue
        except OSError:
            continue
        chain = ancestry(int(entry))
        server = next((p for p, c in chain if c.startswith("envduels-srv")), None)
        raylet = next((p for p, c in chain if c == "raylet"), None)
        if server is not None and raylet is not None:
            return raylet, server
    raise AssertionError(f"no sandbox on any node holds /tmp/{marker}")


def play(urls: str, env_id: str, seed: int) -> dict:
    """One scripted episode: number_guess by bisection, marker by looking then winning."""
    from envduels.serve.client import DuelClient

    with DuelClient(urls) as client:
        text = client.reset(env_id=env_id, seed=seed)
        seen = [text]
        if env_id == "number_guess":
            low, high = map(int, re.search(r"from (\d+) to (\d+)", text).groups())
            while not client.done:
                guess = (low + high) // 2
                text = client.play(f"I guess \\boxed{{{guess}}}")
                seen.append(text)
                if "higher" in text:
                    low = guess + 1
                elif "lower" in text:
                    high = guess - 1
        else:
            seen.append(client.play("\\boxed{look}"))
            seen.append(client.play("\\boxed{win}"))
        return {"env": env_id, "seed": seed, "seen": seen, "reward": client.get_reward(),
                "transcript": client.transcript()}


def scripted_run(urls: str) -> list[dict]:
    return [play(urls, env_id, seed) for env_id in ("number_guess", "marker")
            for seed in range(6)]


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    result: dict = {}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    result["nodes"] = len([n for n in ray.nodes() if n["Alive"]])
    ray.shutdown()   # the command joins the cluster itself

    proc, urls = start(MARKER, "number_guess", "--ray", cluster.address, "--workers", "1")
    result["urls"] = urls.split()
    from envduels.serve.client import DuelClient

    # eight clients made from the one line: four on each node
    clients = []
    for seed in range(8):
        client = DuelClient(urls)
        client.reset(env_id="marker", seed=seed)
        raylet, server = where(f"marker-{seed}")
        clients.append((client, seed, raylet, server))
    result["client_urls"] = [c.url for c, *_ in clients]
    result["raylets"] = len({raylet for *_, raylet, _ in clients})
    by_url: dict[str, set[int]] = {}
    for client, _, raylet, _ in clients:
        by_url.setdefault(client.url, set()).add(raylet)
    result["one_node_per_url"] = all(len(r) == 1 for r in by_url.values()) and \
        len({next(iter(r)) for r in by_url.values()}) == 2

    # one node's server process killed: its sessions end, the other node's go on
    victim_url = clients[1][0].url
    victim = clients[1][3]
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.5)
    outcomes = {}
    for client, seed, _, server in clients:
        try:
            outcomes[seed] = ("ok", client.play("\\boxed{look}"), server == victim)
        except RuntimeError as err:
            outcomes[seed] = ("error", str(err), server == victim)
    result["victim_sessions_told"] = sorted({text for kind, text, hit in outcomes.values()
                                             if hit})
    result["victim_outcomes"] = sorted({kind for kind, _, hit in outcomes.values() if hit})
    result["others_outcomes"] = sorted({kind for kind, _, hit in outcomes.values() if not hit})
    result["others_saw_their_own_marker"] = all(
        text.startswith(f"Observation: markers: ['marker-{seed}']")
        for seed, (kind, text, hit) in outcomes.items() if not hit)
    for client, *_ in clients:
        client.close()
    deadline = time.monotonic() + 120   # the node's supervisor puts another process in place
    while True:
        try:
            with DuelClient(victim_url) as again:
                result["replaced_serves"] = again.reset(env_id="marker", seed=50).startswith(
                    "Observation: seed 50;")
            break
        except (RuntimeError, ConnectionError, OSError) as err:
            if time.monotonic() > deadline:
                result["replaced_serves"] = str(err)
                break
            time.sleep(1)

    # one scripted run: the same results through one process, two, and two nodes
    result["on_two_nodes"] = scripted_run(urls)
    result["health"] = [httpx.get(f"{u.rstrip('/')}/health").json()["status"]
                        for u in urls.split()]
    ours = _servers_under(os.getpid())   # every node's server processes (the raylets are ours)
    result["servers_seen"] = len(ours)
    result["ray_exit"], log = stop(proc)
    result["ray_log_tracebacks"] = log.count("Traceback")
    for workers in ("1", "2"):
        local, url = start(MARKER, "number_guess", "--workers", workers)
        ours |= _servers_under(local.pid)
        result[f"on_{workers}_process"] = scripted_run(url)
        stop(local)
    time.sleep(2)
    result["left_running"] = sorted(pid for pid in ours if _is_server(pid))
    cluster.shutdown()
    print("RESULT " + json.dumps(result))


def _is_server(pid: int) -> bool:
    """Whether `pid` is a server process still running (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            running = fh.read().rsplit(")", 1)[1].split()[0] != "Z"
        return running and comm(pid).startswith("envduels-srv")
    except OSError:
        return False


def _servers_under(root: int) -> set[int]:
    """The server processes below `root` now."""
    return {pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if _is_server(pid) and any(p == root for p, _ in ancestry(pid))}


if __name__ == "__main__":
    main()
