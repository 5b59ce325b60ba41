"""Training and rewinding: the loop (Accelerate), checkpoints and resume, SimCSE's published hyperparameters."""

from sparsecse.training.api import TrainResult, train
from sparsecse.training.rewind import rewind

__all__ = ["train", "rewind", "TrainResult"]
