"""File names inside a sweep directory, shared by the sweep (which writes them) and the report (which
reads them) so that neither module imports the other."""

SWEEP_FILE = "sweep.json"
SCORES_FILE = "scores.safetensors"
