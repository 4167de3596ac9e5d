"""A sandbox's cgroups are removed when one of their limits cannot be set."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# In a process of its own: a harness has one cgroup root per pid, and closing a second root
# object in the test process would remove the folders its running sandboxes use.
SCRIPT = r'''
import json
from envduels.sandbox._cgroup import CgroupRoot

root, why = CgroupRoot.probe()
if root is None:
    print(json.dumps({"skip": why}))
    raise SystemExit
before = {str(f): sorted(p.name for p in f.iterdir()) for f in (root.memory, root.pids)}
try:
    root.create(64, -1)   # pids.max refuses a negative number (EINVAL)
    raised = False
except OSError:
    raised = True
after = {str(f): sorted(p.name for p in f.iterdir()) for f in (root.memory, root.pids)}
ok = root.create(64, 8)   # the root still works
made = all(g.is_dir() for g in ok.groups)
root.discard(ok)
gone = not any(g.exists() for g in ok.groups)
root.close()
print(json.dumps({"raised": raised, "before": before, "after": after, "made": made,
                  "gone": gone}))
'''


def test_a_limit_the_kernel_refuses_leaves_no_group_behind() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=60, check=True)
    result = json.loads(out.stdout)
    if "skip" in result:
        pytest.skip(f"platform: no cgroups to manage here ({result['skip']})")
    assert result["raised"]
    assert result["after"] == result["before"]
    assert result["made"] and result["gone"]
