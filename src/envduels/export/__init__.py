"""A run's valid environments as RL training data (`envduels export RUN_DIR OUT_DIR`).

Formats:
- `envduels`: an EnvDuels v1 export folder (SPEC §9) written by `envs.write_export`; sources are
  byte-identical to the run's, and each row's metadata carries `benchmark_seeds` plus the run's
  results (`round`, `flags`, `panel` rates, per-solver `results`).
- `jsonl`: `OUT_DIR/environments.jsonl`, one record per (environment, seed): see `ROW_FIELDS`.
  The record carries the source text, so a loader needs nothing but the file (the source hash
  lets it deduplicate), and the rows self-distillation trainers read: `prompt` (the duel's
  solver system prompt and unhinted first user turn for that seed, as a conversation: each
  environment is reset in the sandbox, with the run's limits, to read it) and
  `privileged_context` (the hint), `hint_1`/`hint_2` (a graded pair's; `hint_1` is the hint
  otherwise). A seed whose reset faults has no record; the summary and `export.json` name it.
- `hf`: a Hugging Face `datasets` folder (`Dataset.save_to_disk`) with the same records, which
  `datasets.load_from_disk` hands to TRL's SDFT/SDPO trainers as it is (docs/training.md).

Every format also writes `OUT_DIR/export.json` (what was exported, from where, with which
filters); an existing non-empty OUT_DIR is replaced only when it holds that file.

Selection (all filters combine): `authors`, `rounds`, `flags` (keep environments carrying any of
these flags), `[min_pass, max_pass]` on the panel's no-hint pass rate (environments without panel
data are dropped when a band is given), and `target`: per (environment, seed) keep only the seeds
the target model failed on every no-hint trial and passed on some hinted trial; an environment
keeps those seeds as its benchmark seeds and is dropped when none is left.

The selection is `_select` (`select`, `records`, `with_first_observations`), writing an export
folder `_write` (`write`, `export_items`), the command `commands.export_command`.
"""

from envduels.export._select import (
    ROW_FIELDS,
    Filters,
    Selected,
    Skipped,
    SolverResult,
    author_fault_flags,
    check_filters,
    records,
    rescued_seeds,
    select,
    with_first_observations,
)
from envduels.export._write import FORMATS, JSONL_NAME, MARKER, export_items, write

__all__ = ["FORMATS", "JSONL_NAME", "MARKER", "ROW_FIELDS", "Filters", "Selected", "Skipped",
           "SolverResult", "author_fault_flags", "check_filters", "export_items", "records",
           "rescued_seeds", "select", "with_first_observations", "write"]
