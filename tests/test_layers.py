"""The layers of docs/architecture.md, enforced: `lint-imports` keeps the contracts in
pyproject.toml, and breaks them when a module imports against the layers; the domain layer
(`envduels.duel`) imports only the standard library and passes `mypy --strict`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LINT_IMPORTS = BIN / "lint-imports"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """The installed console script on the sources under `root/src`, with `root`'s
    pyproject.toml (no cache: every run reads the files as they are)."""
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def _copy_of_the_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(ROOT / "src" / "envduels", root / "src" / "envduels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_lint_imports_keeps_every_contract():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    for contract in ("envduels is layered", "they never import the engine",
                     "no two modules of one package import each other"):
        assert f"{contract}" in result.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    # the analysis is below nothing that runs a tournament
    ("analysis/metrics.py", "import envduels.engine", ["envduels is layered",
                                                      "they never import the engine"]),
    # a lower layer importing a higher one
    ("store.py", "import envduels.report", ["envduels is layered"]),
    # the domain layer imports nothing of envduels
    ("duel/usage.py", "import envduels.errors", ["envduels is layered"]),
    # an output driving the engine (report sits above the engine's layer)
    ("report/plan.py", "import envduels.engine.scheduler", ["they never import the engine"]),
    # the cycle issue 21 removed
    ("engine/estimate.py", "import envduels.engine.checks",
     ["no two modules of one package import each other"]),
])
def test_an_import_against_the_layers_breaks_a_contract(tmp_path, module, line, broken):
    root = _copy_of_the_project(tmp_path)
    path = root / "src" / "envduels" / module
    path.write_text(path.read_text() + f"\n{line}  # against the layers\n")
    result = _lint_imports(root)
    assert result.returncode == 1, result.stdout + result.stderr
    for contract in broken:
        assert any(contract in row and "BROKEN" in row for row in result.stdout.splitlines()), \
            result.stdout


def test_a_new_top_level_module_must_be_placed_in_a_layer(tmp_path):
    root = _copy_of_the_project(tmp_path)
    (root / "src" / "envduels" / "newcomer.py").write_text('"""Not in any layer yet."""\n')
    result = _lint_imports(root)
    assert result.returncode == 1 and "newcomer" in result.stdout + result.stderr


def test_the_domain_layer_imports_only_the_standard_library():
    import grimp

    graph = grimp.build_graph("envduels", include_external_packages=True)
    outside = {(m, imported) for m in graph.find_descendants("envduels.duel") | {"envduels.duel"}
               for imported in graph.find_modules_directly_imported_by(m)
               if not imported.startswith("envduels.duel")
               and imported.split(".")[0] not in sys.stdlib_module_names}
    assert outside == set()


# mypy's own incremental cache, the one `mypy` run here (and .ci/run, just before the suite)
# writes: it re-checks every module whose source, options or dependencies changed, so a check
# from it is the check from scratch, without the minute and a half of reading the package again.
MYPY_CACHE = ROOT / ".mypy_cache"


def _mypy(*args: str, cache: Path = MYPY_CACHE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_the_domain_layer_passes_mypy_strict():
    # silent: the modules duel's parent package names for type checkers (envduels/__init__.py)
    # are read for their types but held to the package's own level, not to --strict
    # its own cache: other options in one cache make each run re-check the other's modules
    result = _mypy("--strict", "--follow-imports=silent", "src/envduels/duel",
                   cache=MYPY_CACHE / "strict-duel")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


@pytest.mark.slow
def test_the_whole_package_passes_mypy_at_its_configured_level():
    # pyproject.toml's [tool.mypy]: the default level, envduels.duel strict
    result = _mypy("src/envduels")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
