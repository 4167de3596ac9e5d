"""Training on what the duels found: the hinted rescue, self-distillation rows, the TRL adapter.

Public surface: `HintedRescue` (the hinted rescue as a pure, trainer-independent policy),
`RescueCounters`, `GroupRecord`, `GroupKey`; `Curriculum` (which (environment, seed) to train
on next, by panel learnability or by what the rescue made trainable); `solver_prompt`,
`TEACHER_PROMPT_TEMPLATE` and `first_observations` (the rows `envduels export --format jsonl|hf`
writes for TRL's self-distillation trainers). The TRL adapter lives in `envduels.rl.grpo` and needs
`pip install 'envduels[train]'` (it imports torch, transformers and trl); nothing here does.
How it fits together: docs/training.md.
"""

from envduels.rl._curriculum import Curriculum
from envduels.rl._distill import TEACHER_PROMPT_TEMPLATE, first_observations, solver_prompt
from envduels.rl._rescue import GroupKey, GroupRecord, HintedRescue, RescueCounters, is_success

__all__ = ["TEACHER_PROMPT_TEMPLATE", "Curriculum", "GroupKey", "GroupRecord", "HintedRescue",
           "RescueCounters", "first_observations", "is_success", "solver_prompt"]
