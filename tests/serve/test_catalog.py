"""What `envduels serve` serves from an export folder: never an environment flagged as its
author's fault (a run folder's flagged environments are left out the same way)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envduels.envs import library_env, write_export
from envduels.errors import UserError

pytest.importorskip("openenv.core", reason="envduels serve needs the serve extra")

from envduels.serve._catalog import catalog  # noqa: E402


def flagged(name: str, flag: str):
    spec = library_env(name)
    return dataclasses.replace(spec, metadata={**spec.metadata, "flags": [flag]})


def test_an_exports_author_fault_environments_are_not_served(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    write_export(folder, [library_env("nim"), flagged("maze", "trivial"),
                          flagged("countdown", "hint_is_key"),
                          flagged("lights_out", "nondeterministic"),
                          flagged("water_jugs", "hint_gated")])   # informational: still served
    assert sorted(catalog([str(folder)])) == ["nim", "water_jugs"]


def test_an_export_with_only_author_fault_environments_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    write_export(folder, [flagged("maze", "trivial")])
    with pytest.raises(UserError, match="every one is flagged as its author's fault"):
        catalog([str(folder)])
