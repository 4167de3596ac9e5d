"""Training on what the duels found: the hinted rescue and the TRL adapter.

Public surface: `HintedRescue` (the SAGE rescue as a pure, trainer-independent policy),
`RescueCounters`, `GroupRecord`, `GroupKey`. The TRL adapter lives in `envduels.rl.grpo` and needs
`pip install 'envduels[train]'` (it imports torch, transformers and trl); nothing here does.
How it fits together: docs/training.md.
"""

from envduels.rl._rescue import GroupKey, GroupRecord, HintedRescue, RescueCounters, is_success

__all__ = ["GroupKey", "GroupRecord", "HintedRescue", "RescueCounters", "is_success"]
