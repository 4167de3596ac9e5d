"""Fixtures for the environment tests: a real bubblewrap pool with a short call deadline."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from envduels.sandbox import EnvPool, SandboxLimits

FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
SHORT = SandboxLimits(step_timeout_s=2.0)


@pytest.fixture
async def pool() -> AsyncIterator[EnvPool]:
    async with EnvPool(SHORT, warm=2) as p:
        yield p
