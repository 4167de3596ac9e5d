"""Test helpers that run real servers on loopback: the scripted OpenAI-compatible server."""

from envduels.testing._server import FAULTS, ScriptedServer

__all__ = ["FAULTS", "ScriptedServer"]
