"""SentEval-layout readers, training corpora and data-directory resolution."""

from sparsecse.data.paths import resolve_data_dir, task_path

__all__ = ["resolve_data_dir", "task_path"]
