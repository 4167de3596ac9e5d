"""The bundled SmolLM2, loaded once for the in-process training tests of this package (each
copies it: loading the GGUF costs 20-60 s of CPU, a copy about one)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="package")
def smollm2() -> tuple[Any, Any]:
    """(model, tokenizer): never train this one; `copy.deepcopy` the model first."""
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from envduels.rl.grpo import load_model

    return load_model(None)


def script(relative: str) -> ModuleType:
    """A script of the repository (`examples/...`, `bench/...`) imported as a module."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
