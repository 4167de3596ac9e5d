"""`envduels serve --ray` on a two-node Ray cluster started on this machine, inside a network
namespace the test makes (`unshare -n`, loopback up): every address is 127.0.0.1 and nothing
leaves the machine. One scenario (tests/cluster/serve_scenario.py) runs the documented command,
plays sessions through the one line of URLs it prints, kills one node's server process, and
plays one scripted run through one server process, two, and the two nodes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "players"))
from players_helpers import requires  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"

pytestmark = [
    pytest.mark.slow,
    requires(importlib.util.find_spec("ray") is not None,
             "ray is not installed (pip install -e .[ray])"),
    requires(importlib.util.find_spec("openenv") is not None,
             "the serve extra is not installed: pip install 'envduels[serve]'"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="platform: a network namespace needs root and unshare"),
]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
         sys.executable, str(HERE / "serve_scenario.py")],
        capture_output=True, text=True, timeout=900, env=env,
        cwd=tmp_path_factory.mktemp("ray-serve"))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_one_line_of_urls_spreads_the_sessions_over_both_nodes(scenario):
    assert scenario["nodes"] == 2
    assert len(scenario["urls"]) == 2 and all(u.startswith("http://127.0.0.1:")
                                              for u in scenario["urls"])
    first, second = scenario["urls"]
    assert scenario["client_urls"] == [first, second] * 4   # the clients take them in turn
    assert scenario["raylets"] == 2                          # sessions on both nodes
    assert scenario["one_node_per_url"]


def test_a_killed_server_process_on_one_node_ends_only_its_sessions(scenario):
    assert scenario["victim_outcomes"] == ["error"]
    assert scenario["victim_sessions_told"] == [
        "the server closed the session: the connection ended without a word from the server "
        "(the server process that held the session stopped, or the network failed: not the "
        "environment's fault); reset to start another"]
    assert scenario["others_outcomes"] == ["ok"]
    assert scenario["others_saw_their_own_marker"]
    assert scenario["replaced_serves"] is True              # its node serves again
    assert scenario["health"] == ["healthy", "healthy"]


def test_a_run_gives_the_same_results_on_one_process_two_and_two_nodes(scenario):
    one, two, nodes = (scenario["on_1_process"], scenario["on_2_process"],
                       scenario["on_two_nodes"])
    assert len(one) == 12 and one == two == nodes
    assert {(e["env"], e["reward"]) for e in one} == {("number_guess", 1.0), ("marker", 1.0)}
    assert all(e["transcript"][-1]["outcome"] == "success" for e in one)


def test_the_command_stops_every_nodes_server(scenario):
    assert scenario["ray_exit"] == 0
    assert scenario["ray_log_tracebacks"] == 0
    assert scenario["servers_seen"] == 2                    # one per node (--workers 1)
    assert scenario["left_running"] == []
