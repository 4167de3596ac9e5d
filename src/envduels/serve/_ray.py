"""`envduels serve NAME... --ray ADDRESS`: the same server on every node of a Ray cluster.

Each alive node with a CPU gets a `ServeNode` actor, pinned to it and asking Ray for the CPUs
its server processes will use, which starts that node's server (`serve._node`: the server
processes of `--workers`, as on one machine, listening on the node's address) and holds it: the
server stops when its actor does, whether the command stopped it or Ray lost the node. The
command's first stdout line lists every node's URL; a trainer's clients take them in turn
(`client.pick`). Why a list and not one URL: a single front would carry every session's
traffic through one process and one machine (the bottleneck `--workers` removes), and
WebSocket clients do not all follow redirects; each node is a whole server, with its own
`--max-sessions` and idle reaping (docs/training.md, "Serving on a Ray cluster").
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from envduels._signals import terminate_as_interrupt
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.serve._processes import ServeOptions

NODE_START_TIMEOUT_S = 180.0   # a node's interpreter, imports and first sandbox check
NODE_STOP_TIMEOUT_S = 70.0     # its server processes close their sandboxes (60 s each at most)
WATCH_EVERY_S = 2.0


class ServeNode:
    """A Ray actor holding one node's server (see the module docstring)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._log: deque[str] = deque(maxlen=20)

    def start(self, options: ServeOptions, port: int, workers: int) -> tuple[str, str]:
        """Start this node's server at the node's address: ("ok", URL) once it accepts, or
        ("failed", why) with the end of its log."""
        import ray

        host = ray.util.get_node_ip_address()
        request = pickle.dumps((options, host, port, workers))
        process = subprocess.Popen([sys.executable, "-m", "envduels.serve._node"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        threading.Thread(target=self._keep_log, args=(process.stderr,), daemon=True).start()
        process.stdin.write(len(request).to_bytes(8, "big") + request)
        process.stdin.flush()   # stdin stays open: the server lives as long as it does
        url = process.stdout.readline().decode("utf-8", "replace").strip()
        if not url.startswith("http://"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
            time.sleep(0.2)   # the last lines of its log
            return "failed", f"{_ended(process.poll())}: " + " | ".join(self._log)
        self._process = process
        return "ok", url

    def _keep_log(self, stream: IO[bytes]) -> None:
        for line in stream:
            self._log.append(line.decode("utf-8", "replace").rstrip())

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log(self) -> list[str]:
        return list(self._log)

    def stop(self) -> int | None:
        """Stop the node's server as Ctrl-C would (its stdin ends); its exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            return process.wait(NODE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


def _ended(status: int | None) -> str:
    if status is None:
        return "it did not answer"
    return f"it exited with status {status}" if status >= 0 else f"it was killed ({-status})"


def serve_on_ray(options: ServeOptions, *, address: str, port: int, workers: int | None,
                 on_ready: Callable[[list[str]], None]) -> int:
    """Serve `options` on every alive node of the Ray cluster at `address` ('auto': the one
    this machine belongs to), `workers` server processes a node (default: its CPUs); call
    `on_ready` with the nodes' URLs once all accept, then run until interrupted. UserError
    when the cluster cannot be joined or a node's server cannot start; 1 once no node
    serves."""
    from envduels.sandbox.ray_pool import connect

    ray = connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes()
             if n.get("Alive") and int(n.get("Resources", {}).get("CPU", 0)) >= 1]
    if not nodes:
        raise UserError(f"the Ray cluster at {address} has no alive node with a CPU to serve "
                        "from; add one with `ray start --address ...`")
    actor_class = ray.remote(ServeNode)
    started: list[tuple[dict[str, Any], Any, Any]] = []
    try:
        for node in nodes:
            cpus = int(node["Resources"]["CPU"])
            count = workers or cpus
            actor = actor_class.options(
                num_cpus=min(count, cpus), max_restarts=0, max_concurrency=4,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote()
            started.append((node, actor, actor.start.remote(options, port, count)))
        urls = _urls(ray, started)
        on_ready(urls)
        with terminate_as_interrupt():
            try:
                _watch(ray, [(node, actor, url) for (node, actor, _), url
                             in zip(started, urls, strict=True)])
            except KeyboardInterrupt:
                return 0
        return 1   # every node's server stopped
    finally:
        stops = [actor.stop.remote() for _, actor, _ in started]
        with contextlib.suppress(Exception):
            ray.get(stops, timeout=NODE_STOP_TIMEOUT_S + 10)
        for _, actor, _ in started:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def _urls(ray: Any, started: list[tuple[dict[str, Any], Any, Any]]) -> list[str]:
    """Every node's URL, in node order; UserError naming a node whose server did not start."""
    refs = [ref for _, _, ref in started]
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=NODE_START_TIMEOUT_S)
    if pending:
        raise UserError(f"the Ray cluster did not start a server on every node within "
                        f"{NODE_START_TIMEOUT_S:.0f} s (each asks for the CPUs of its --workers "
                        "server processes; another job may hold them): free the cluster or "
                        "lower --workers")
    urls = []
    for node, _, ref in started:
        where = node.get("NodeManagerAddress", node["NodeID"][:12])
        try:
            kind, value = ray.get(ref)
        except ray.exceptions.RayError as err:
            raise UserError(f"the server on node {where} could not start: the cluster lost "
                            f"its actor ({type(err).__name__})") from None
        if kind != "ok":
            raise UserError(f"the server on node {where} could not start: {value}")
        urls.append(value)
    return urls


def _watch(ray: Any, serving: list[tuple[dict[str, Any], Any, str]]) -> None:
    """Say (on stderr) when a node's server stops; return when none is left."""
    live = list(serving)
    while live:
        time.sleep(WATCH_EVERY_S)
        for entry in list(live):
            node, actor, url = entry
            try:
                alive = ray.get(actor.alive.remote(), timeout=30)
                why = "its server stopped"
            except ray.exceptions.RayError as err:   # the node or its actor is gone
                alive, why = False, f"the cluster lost it ({type(err).__name__})"
            if not alive:
                live.remove(entry)
                print(f"envduels serve: node {node.get('NodeManagerAddress', '?')} ({url}): "
                      f"{why}; the sessions it held ended, the other nodes serve on",
                      file=sys.stderr, flush=True)
    print("envduels serve: no node is serving any more; stopping", file=sys.stderr, flush=True)
