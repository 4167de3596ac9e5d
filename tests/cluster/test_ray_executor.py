"""The Ray executor on a two-node cluster started on this machine, inside a network namespace
the test makes (`unshare -n`, loopback up): every Ray address is 127.0.0.1 and nothing leaves the
machine. Usage reporting is off. One scenario (tests/cluster/ray_scenario.py) runs the scripted
tournament of tests/engine/duel_script.py locally and on Ray, then kills a worker node mid-run."""

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
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="platform: a network namespace needs root and unshare"),
]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
         sys.executable, str(HERE / "ray_scenario.py"), str(work)],
        capture_output=True, text=True, timeout=900, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_every_ray_address_is_loopback(scenario):
    assert scenario["address"].startswith("127.0.0.1:")
    assert scenario["node_ips"] == ["127.0.0.1"]


def test_the_same_tournament_gives_the_same_results_on_ray_and_locally(scenario):
    assert (scenario["exit_local"], scenario["exit_ray"]) == (0, 0)
    assert scenario["outcomes_equal"]
    compared = set(scenario["same"])
    assert {"solvers", "authors", "ratings", "transitivity", "divergence", "environments"} <= compared
    assert all(scenario["same"].values()), scenario["differences"]


def test_a_run_resumes_on_the_other_executor_without_redoing_anything(scenario):
    assert scenario["resume_other_executor_exit"] == 0
    assert scenario["resume_other_executor_requests"] == 0


def test_a_lost_worker_node_leaves_only_error_episodes_which_a_resume_completes(scenario):
    assert scenario["killed_exit"] == 4                       # errors left to retry
    assert "error" in scenario["killed_outcomes"]
    assert scenario["killed_error_reasons"] == ["sandbox error"]   # the host's fault
    assert scenario["killed_wrong_blame"] == []               # no author blamed for the loss
    assert scenario["resume_exit"] == 0
    assert "error" not in scenario["resumed_outcomes"]
    assert scenario["resumed_equals_local"]                   # as if nothing had happened
    assert scenario["killed_requests_repeated"] == 0          # nothing paid twice


def test_a_vector_environment_on_ray_steps_like_the_local_adapter(scenario):
    vector = scenario["vector"]
    assert vector["nodes"] == 2                     # a host on each node
    assert vector["same_as_local"]                  # observation by observation, seed by seed
    assert vector["obs_type"] == "tuple" and vector["rewards_dtype"] == "float64"
    assert len(vector["steps"]) == 3 and all(len(flags) == 4 for step in vector["steps"]
                                             for flags in step)
