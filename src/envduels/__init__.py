"""envduels: language models author interactive environments with privileged hints and solve
each other's. See the README and SPEC for the contract."""

from envduels.errors import UserError

__version__ = "0.1.0"
__all__ = ["UserError", "__version__"]
