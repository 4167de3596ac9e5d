"""Players are tested against real HTTP servers on 127.0.0.1 (envduels.testing.ScriptedServer)."""

from __future__ import annotations

import pytest
from players_helpers import answer

from envduels.testing import ScriptedServer


@pytest.fixture
def server():
    with ScriptedServer(answer) as srv:
        yield srv
