"""SentEval-layout readers, training corpora and data-directory resolution."""

from sparsecse.data.paths import resolve_data_dir, task_path
from sparsecse.data.sts import STS_YEARS, Pair, read_sick, read_sts_benchmark, read_sts_subset, read_sts_year
from sparsecse.data.transfer import (
    BINARY_TASKS,
    TREC_CLASSES,
    Example,
    PairExample,
    read_binary_task,
    read_mrpc,
    read_sst2,
    read_trec,
)

__all__ = [
    "resolve_data_dir", "task_path",
    "Pair", "STS_YEARS", "read_sts_benchmark", "read_sts_year", "read_sts_subset", "read_sick",
    "Example", "PairExample", "BINARY_TASKS", "TREC_CLASSES",
    "read_binary_task", "read_sst2", "read_trec", "read_mrpc",
]
