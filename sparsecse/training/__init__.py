"""Training and rewinding: the loop (Accelerate), checkpoints and resume, SimCSE recipes."""

from sparsecse.training.api import TrainResult, train
from sparsecse.objectives.recipe import recipe_for, resolve_hyperparameters
from sparsecse.training.rewind import resolve_init, rewind

__all__ = ["train", "rewind", "TrainResult", "resolve_init", "recipe_for", "resolve_hyperparameters"]
