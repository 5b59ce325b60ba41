"""SentEval transfer tasks: logistic regression (scikit-learn) on frozen sentence embeddings.

The protocol follows SentEval with its scikit-learn classifier:
- MR, CR, SUBJ, MPQA: k-fold cross-validation (k = 10; 5 with ``fasttest``). Inside every outer
  training fold an inner k-fold picks the L2 strength C from ``C_GRID``; the model refit with it is
  scored on the outer test fold; the score is the mean test accuracy.
- TREC, MRPC: k-fold cross-validation on the training set picks C; refit on all of it; test accuracy.
- SST-2: C picked on the dev split, refit on train; test accuracy.
- MRPC features are [|a - b|, a * b] of the two sentence embeddings.
Folds are stratified and shuffled with a fixed seed. TREC (six classes) uses multinomial regression.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Callable, Sequence

import numpy as np

from sparsecse.data.transfer import read_binary_task, read_mrpc, read_sst2, read_trec
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.embedding import EmbeddingTable
from sparsecse.evaluation.tasks import TRANSFER_TASKS

C_GRID = tuple(2.0 ** t for t in range(-2, 4))  # SentEval's grid for its scikit-learn classifier
FOLDS, FASTTEST_FOLDS = 10, 5
MAX_ITER = 1000


# ------------------------------------------------------------------------------------ data
def load_transfer_task(data_dir: str | os.PathLike | None, task: str) -> dict:
    """{split: (texts or (texts_a, texts_b), labels)} for one task; binary tasks have one split "all"."""
    if task in ("MR", "CR", "SUBJ", "MPQA"):
        examples = read_binary_task(data_dir, task)
        return {"all": ([e.text for e in examples], np.array([e.label for e in examples]))}
    if task == "SST2":
        return {split: _texts_labels(read_sst2(data_dir, split)) for split in ("train", "dev", "test")}
    if task == "TREC":
        return {split: _texts_labels(read_trec(data_dir, split)) for split in ("train", "test")}
    if task == "MRPC":
        return {split: (([e.s1 for e in ex], [e.s2 for e in ex]), np.array([e.label for e in ex]))
                for split, ex in ((s, read_mrpc(data_dir, s)) for s in ("train", "test"))}
    raise SparseCSEError(f"Unknown transfer task {task!r}; choose one of {', '.join(TRANSFER_TASKS)}.")


def _texts_labels(examples) -> tuple[list[str], np.ndarray]:
    return [e.text for e in examples], np.array([e.label for e in examples])


def transfer_sentences(data: dict) -> list[str]:
    out: list[str] = []
    for texts, _labels in data.values():
        if isinstance(texts, tuple):
            out += texts[0] + texts[1]
        else:
            out += texts
    return out


def features(texts, embed: Callable[[Sequence[str]], np.ndarray]) -> np.ndarray:
    """Sentence embeddings, or [|a - b|, a * b] for sentence pairs (MRPC)."""
    if isinstance(texts, tuple):
        a, b = embed(texts[0]), embed(texts[1])
        return np.concatenate([np.abs(a - b), a * b], axis=1)
    return embed(texts)


# ------------------------------------------------------------------------------------ classifiers
def single_threaded_blas(fn):
    """Run ``fn`` with one BLAS thread: these fits are small, and OpenBLAS threads waking up for
    every tiny product made them about ten times slower on a busy 2-core machine."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper


def stratified_folds(labels: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of k stratified, shuffled folds; the same seed gives the same folds."""
    from sklearn.model_selection import StratifiedKFold

    counts = np.bincount(np.asarray(labels))
    if counts[counts > 0].min() < k:
        raise SparseCSEError(f"{k}-fold cross-validation needs at least {k} examples of every class.")
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels))


def fit_logreg(x: np.ndarray, y: np.ndarray, c: float, seed: int):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clf.fit(x, y)


def accuracy(clf, x: np.ndarray, y: np.ndarray) -> float:
    return float((clf.predict(x) == y).mean() * 100)


def cv_best_c(x: np.ndarray, y: np.ndarray, k: int, seed: int, grid: Sequence[float] = C_GRID) -> tuple[float, float]:
    """(C with the best mean k-fold validation accuracy, that accuracy); ties go to the smaller C."""
    folds = stratified_folds(y, k, seed)
    means = [np.mean([accuracy(fit_logreg(x[tr], y[tr], c, seed), x[te], y[te]) for tr, te in folds]) for c in grid]
    best = int(np.argmax(means))
    return grid[best], float(means[best])


@single_threaded_blas
def nested_cv_accuracy(x: np.ndarray, y: np.ndarray, k: int, seed: int, grid: Sequence[float] = C_GRID,
                       progress=None) -> dict:
    """Outer k-fold test accuracy with C chosen by an inner k-fold on each outer training fold."""
    tests, devs, chosen = [], [], []
    for tr, te in stratified_folds(y, k, seed):
        c, dev = cv_best_c(x[tr], y[tr], k, seed, grid)
        tests.append(accuracy(fit_logreg(x[tr], y[tr], c, seed), x[te], y[te]))
        devs.append(dev)
        chosen.append(c)
        if progress is not None:
            progress.update(1)
    return {"acc": float(np.mean(tests)), "dev_acc": float(np.mean(devs)), "fold_acc": tests, "C": chosen,
            "n": int(len(y))}


@single_threaded_blas
def cv_then_test(x_train, y_train, x_test, y_test, k: int, seed: int, grid: Sequence[float] = C_GRID) -> dict:
    c, dev = cv_best_c(x_train, y_train, k, seed, grid)
    clf = fit_logreg(x_train, y_train, c, seed)
    return {"acc": accuracy(clf, x_test, y_test), "dev_acc": dev, "C": c, "n_train": int(len(y_train)),
            "n_test": int(len(y_test)), "predictions": clf.predict(x_test)}


@single_threaded_blas
def dev_then_test(x_train, y_train, x_dev, y_dev, x_test, y_test, seed: int, grid: Sequence[float] = C_GRID) -> dict:
    devs = [accuracy(fit_logreg(x_train, y_train, c, seed), x_dev, y_dev) for c in grid]
    best = int(np.argmax(devs))
    clf = fit_logreg(x_train, y_train, grid[best], seed)
    return {"acc": accuracy(clf, x_test, y_test), "dev_acc": devs[best], "C": grid[best],
            "n_train": int(len(y_train)), "n_dev": int(len(y_dev)), "n_test": int(len(y_test))}


def f1_binary(predicted: np.ndarray, gold: np.ndarray) -> float:
    tp = float(((predicted == 1) & (gold == 1)).sum())
    denom = float((predicted == 1).sum() + (gold == 1).sum())
    return 200 * tp / denom if denom else 0.0


# ------------------------------------------------------------------------------------ tasks
def evaluate_transfer(tasks_data: dict[str, dict], table: EmbeddingTable, fasttest: bool = False, seed: int = 0,
                      show_progress: bool = False) -> tuple[dict[str, float], dict[str, dict]]:
    """({task: test accuracy x 100}, {task: details}) for loaded transfer tasks."""
    from tqdm.auto import tqdm

    k = FASTTEST_FOLDS if fasttest else FOLDS
    scores, details = {}, {}
    for task, data in tasks_data.items():
        if task in ("MR", "CR", "SUBJ", "MPQA"):
            texts, labels = data["all"]
            with tqdm(total=k, desc=f"{task} {k}-fold", disable=not show_progress, leave=False) as bar:
                result = nested_cv_accuracy(features(texts, table), labels, k, seed, progress=bar)
        elif task == "SST2":
            (tr, ytr), (dv, ydv), (te, yte) = data["train"], data["dev"], data["test"]
            result = dev_then_test(features(tr, table), ytr, features(dv, table), ydv, features(te, table), yte, seed)
        else:  # TREC, MRPC
            (tr, ytr), (te, yte) = data["train"], data["test"]
            result = cv_then_test(features(tr, table), ytr, features(te, table), yte, k, seed)
            predictions = result.pop("predictions")
            if task == "MRPC":
                result["f1"] = f1_binary(predictions, yte)
        scores[task] = result["acc"]
        details[task] = result
    return scores, details
