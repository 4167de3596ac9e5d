"""A sandbox's cgroups are removed when one of their limits cannot be set."""

from __future__ import annotations

import pytest

from envduels.sandbox._cgroup import CgroupRoot


def test_a_limit_the_kernel_refuses_leaves_no_group_behind() -> None:
    root, why = CgroupRoot.probe()
    if root is None:
        pytest.skip(f"platform: no cgroups to manage here ({why})")
    try:
        before = {folder: set(folder.iterdir()) for folder in (root.memory, root.pids)}
        with pytest.raises(OSError):
            root.create(64, -1)   # pids.max refuses a negative number (EINVAL)
        after = {folder: set(folder.iterdir()) for folder in (root.memory, root.pids)}
        assert after == before
        ok = root.create(64, 8)   # the root still works
        assert all(g.is_dir() for g in ok.groups)
        root.discard(ok)
        assert not any(g.exists() for g in ok.groups)
    finally:
        root.close()
