"""TRL GRPO on EnvDuels environments (needs `pip install 'envduels[train]'`): `train`,
`TrainSettings`, and the pieces for wiring your own `GRPOTrainer`: `EpisodeRollouts` (the
`rollout_func`), `env_reward` (the reward function), `RescueLog` (the callback writing
`rescue.jsonl`), `load_model`, `HFPolicy`; `evaluate` (a model as a solver on environments, the duel's
protocol, no hint). Design: docs/training.md."""

from envduels.rl._evaluate import Evaluation, evaluate
from envduels.rl._model import HFPolicy, load_model
from envduels.rl._trl import (
    RESCUE_LOG,
    EpisodeRollouts,
    RescueLog,
    Task,
    Trained,
    TrainSettings,
    env_reward,
    tasks_of,
    train,
)

__all__ = ["RESCUE_LOG", "EpisodeRollouts", "Evaluation", "evaluate", "HFPolicy", "RescueLog", "Task", "Trained", "TrainSettings",
           "env_reward", "load_model", "tasks_of", "train"]
