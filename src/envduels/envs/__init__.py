"""The environment contract (SPEC §2), validation (§3), the EnvDuels v1 export format (§9) and
the reference library.

Public surface (docs/architecture.md): EnvSpec, Verdict, benchmark_seeds, load_env_file,
load_export, write_export, validate_env, check_hint, library_names, library_env, library_dir,
resolve (which environments a string names: a path, `FOLDER/ENV_ID`, a library name),
turn_cap (how many solver turns an episode gets).
How validation decides and how to write a library environment: docs/environments.md.
"""

from ._export import load_env_file, load_export, write_export
from ._library import library_dir, library_env, library_names
from ._resolve import Resolved, resolve
from ._spec import EnvSpec, Verdict, benchmark_seeds
from ._static import check_hint
from ._turns import turn_cap
from ._validate import validate_env

__all__ = [
    "EnvSpec",
    "Resolved",
    "Verdict",
    "benchmark_seeds",
    "check_hint",
    "library_dir",
    "library_env",
    "library_names",
    "load_env_file",
    "load_export",
    "resolve",
    "turn_cap",
    "validate_env",
    "write_export",
]
