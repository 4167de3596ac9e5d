"""A process that uses the library for hours keeps no zombie child (issue 29).

The library made its caller a child subreaper, so every process orphaned anywhere under the
caller was handed to it, and nothing collected it: the suite's own process gathered 23 zombies
(`bwrap`, a Ray worker) in 21 minutes. It is no subreaper now, and a sandbox ends child first
(its launcher collects what ran under it; gVisor's runsc runs under a reaper of ours). Each
path runs 200 episodes of the library's `number_guess`, with a scripted player, in a caller of
its own (tests/long_lived_caller.py), which then lists its zombie children. On main the serve
path leaves the server's `bwrap` launchers with the caller when the server crashes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import envduels

sys.path.insert(0, str(Path(__file__).resolve().parent / "players"))
from players_helpers import requires  # noqa: E402

HERE = Path(__file__).resolve().parent
CALLER = HERE / "long_lived_caller.py"
SRC = Path(envduels.__file__).resolve().parents[1]   # the tree under test
EPISODES = 200

pytestmark = pytest.mark.slow


def _call(path: str, tmp_path: Path, *, netns: bool = False) -> tuple[dict, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, str(CALLER), path, str(EPISODES), str(tmp_path)]
    if netns:   # every address Ray advertises is 127.0.0.1 (tests/cluster)
        argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(lines[-1]), done.stderr


@pytest.mark.parametrize("path", ["engine", "gym", "rl"])
def test_200_episodes_in_process_leave_the_caller_no_zombie_child(path: str,
                                                                 tmp_path: Path) -> None:
    found, _ = _call(path, tmp_path)
    assert found == {"episodes": EPISODES, "zombies": []}


def test_200_episodes_through_envduels_serve_and_its_crash_leave_no_zombie_child(
        tmp_path: Path) -> None:
    # The caller used the sandbox, then ran `envduels serve` as its child; the server keeps no
    # zombie while it serves, and its crash leaves none with the caller (on main: the
    # server's template launchers, `bwrap`, orphaned to the caller).
    found, stderr = _call("serve", tmp_path)
    server = json.loads(stderr.strip().splitlines()[-1])
    assert server == {"server_zombies": []}
    assert found == {"episodes": EPISODES, "zombies": []}


@requires(importlib.util.find_spec("ray") is not None,
          "ray is not installed (pip install -e .[ray])")
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="platform: a network namespace needs root and unshare")
def test_200_episodes_on_the_ray_executor_leave_the_driver_no_zombie_child(
        tmp_path: Path) -> None:
    # the run on a two-node cluster, then its worker node killed, then the cluster shut down
    found, _ = _call("ray", tmp_path, netns=True)
    assert found == {"episodes": EPISODES, "zombies": []}
