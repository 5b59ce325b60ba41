"""The reconstruction's settings and their defaults, without torch, so the CLI can show them cheaply."""

METHODS = ("scales", "full")
TARGETS = ("residual", "sublayer")
WEIGHTINGS = ("none", "layernorm")
DEFAULT_SENTENCES = 2048
DEFAULT_METHOD = "full"
DEFAULT_TARGET = "residual"
DEFAULT_WEIGHTING = "layernorm"
DEFAULT_RIDGE = 1e-3
