"""A real `envduels serve` on 127.0.0.1, started through the console script, for the serve tests.

Two servers are shared by the whole session (each start costs seconds of CPU): `server` serves
the library's `number_guess`, the `marker` fixture, a run folder's valid, unflagged
environments (`maze`, `r1-bob-0`: listed, their sources are placeholders) and an export of
`graded` (a graded hint pair), with room for 32 concurrent sessions;
`short_server` serves `marker` alone with 3 sessions and a 2 s idle timeout (the fuzzer, idle
reaping). Both run two server processes, whatever the machine's cores, so that every test
also goes through the routing and the counts the processes share. Every server started is stopped at the end, and its log must hold no traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import envduels

SCRIPT = Path(sys.executable).parent / "envduels"
SRC = str(Path(envduels.__file__).resolve().parents[1])
FIXTURES = Path(__file__).parent / "fixtures"
MARKER = str(FIXTURES / "marker.py")
# a real run folder (written by an older envduels): valid, flagged and invalid environments
RUN = str(Path(__file__).parents[1] / "data" / "main_6b44c60" / "run")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def descendants(self) -> list[int]:
        """Host pids of every process under the server (its sandboxes)."""
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                out.append(child)
                todo.append(child)
        return out


    def holder(self, marker: str) -> str:
        """The name of the server process (`envduels-srvK`) whose sandbox holds /tmp/`marker`
        (a session of the `marker` fixture: its reset wrote it)."""
        for pid in self.descendants():
            try:
                if not os.path.exists(f"/proc/{pid}/root/tmp/{marker}"):
                    continue
                while pid > 1:   # up from the sandbox to the server process that started it
                    with open(f"/proc/{pid}/comm") as fh:
                        comm = fh.read().strip()
                    if comm.startswith("envduels-srv"):
                        return comm
                    with open(f"/proc/{pid}/stat") as fh:
                        pid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
        raise AssertionError(f"no sandbox under the server holds /tmp/{marker}")

    def processes(self) -> dict[str, int]:
        """The server's processes by name (`envduels-srvK`): their host pids."""
        found = {}
        for pid in self.descendants():
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    comm = fh.read().strip()
            except OSError:
                continue
            if comm.startswith("envduels-srv"):
                found[comm] = pid
        return found


def start_server(*args: str, timeout_s: float = 90.0) -> Server:
    env = {**os.environ, "PYTHONPATH": SRC}
    log = Path(tempfile.mkstemp(prefix="envduels-serve-", suffix=".log")[1])
    proc = subprocess.Popen([str(SCRIPT), "serve", *args, "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=log.open("wb"), text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("envduels serve: http://127.0.0.1:"), (first, log.read_text())
    url = first.split(": ", 1)[1].strip().rstrip("/")
    deadline = time.monotonic() + timeout_s
    while True:   # the first line is printed before uvicorn listens: wait until it answers
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.1)
    return Server(url, proc, log)


def stop_server(server: Server) -> str:
    """Stop it as Ctrl-C does; returns its log."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGINT)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    log = server.log()
    server.log_path.unlink(missing_ok=True)
    return log


@pytest.fixture(scope="session")
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*args: str) -> Server:
        server = start_server(*args)
        started.append(server)
        return server

    yield start
    logs = [stop_server(s) for s in started]
    for log in logs:
        assert "Traceback" not in log, log


PANEL = {"no_hint_rate": 0.25, "hinted_rate": 0.75, "learnability": 0.5}


@pytest.fixture(scope="session")
def graded_export(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An EnvDuels export holding `graded`: the marker environment with a graded hint pair
    and panel results in its metadata, as `envduels export` writes them."""
    from envduels.envs import EnvSpec, write_export

    folder = tmp_path_factory.mktemp("export")
    write_export(folder, [EnvSpec(
        id="graded", source=Path(MARKER).read_text(), class_name="MarkerEnv", max_turns=4,
        hints={"hint_1": "walls", "hint_2": "exit east"}, benchmark_seeds=(11, 22),
        metadata={"panel": PANEL, "round": 1, "flags": []})])
    return str(folder)


@pytest.fixture(scope="session")
def server(serve: Callable[..., Server], graded_export: str) -> Server:
    return serve("number_guess", MARKER, RUN, graded_export, "--max-sessions", "40",
                 "--workers", "2")


@pytest.fixture(scope="session")
def short_server(serve: Callable[..., Server]) -> Server:
    return serve(MARKER, "--max-sessions", "3", "--idle-timeout", "2", "--workers", "2")
