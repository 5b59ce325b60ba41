"""Training and rewinding: the loop (Accelerate), checkpoints and resume, SimCSE recipes."""

from sparsecse.training.api import TrainResult, resolve_init, rewind, train
from sparsecse.training.recipe import recipe_for, resolve_hyperparameters

__all__ = ["train", "rewind", "TrainResult", "resolve_init", "recipe_for", "resolve_hyperparameters"]
