"""What :func:`sparsecse.evaluation.runner.evaluate` returns: a typed, read-only result.

It reads like the dictionary it replaces (``result["scores"]``, ``result.get("bootstrap")``, ``"pairs" in
result``), so callers and result files are unchanged; :meth:`EvaluationResult.to_dict` gives the plain
dictionary (keys that were not computed are left out) for JSON.

Example::

    result = evaluate(tasks="sts")
    result.avg_sts, result.scores["STS12"], result.to_dict()["settings"]["precision"]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

# the order of the keys in a result file, as evaluate has always written them
ORDER = ("model", "mask", "pooling", "tasks", "scores", "avg_sts", "details", "data", "bootstrap", "pairs",
         "alignment", "uniformity", "avg_transfer", "eval_sets", "settings", "timing")
OPTIONAL = frozenset({"avg_sts", "details", "data", "bootstrap", "pairs", "alignment", "uniformity",
                      "avg_transfer", "eval_sets"})


@dataclass(frozen=True)
class EvaluationResult(Mapping):
    """Scores (Spearman or accuracy x 100) per task, their averages, and how they were obtained.

    ``details`` holds per-task extras (subset correlations, folds, intervals); ``data`` fingerprints the
    STS pairs scored; ``bootstrap`` the percentile intervals; ``pairs`` the per-pair similarities (kept
    when asked, for paired tests). A field that was not computed is None and absent from :meth:`to_dict`.
    """

    model: str
    mask: dict | None
    pooling: str
    tasks: list
    scores: dict
    settings: dict
    timing: dict
    avg_sts: float | None = None
    avg_transfer: float | None = None
    alignment: float | None = None
    uniformity: float | None = None
    details: dict | None = None
    data: dict | None = None
    bootstrap: dict | None = None
    pairs: dict | None = None
    eval_sets: dict | None = None  # {"dev"/"test": EvalSet.evaluate's dict} for the user's sets

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data, in the results file's key order (unset optional parts left out)."""
        return {key: getattr(self, key) for key in ORDER if key not in OPTIONAL or getattr(self, key) is not None}

    def __getitem__(self, key: str) -> Any:
        if key not in ORDER or (key in OPTIONAL and getattr(self, key) is None):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())
