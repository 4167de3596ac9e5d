"""Fixtures for the sandbox tests (defined in sandbox_helpers.py)."""

from sandbox_helpers import canary, fresh_pool, pool, roomy_pool, sandbox_runtime  # noqa: F401
