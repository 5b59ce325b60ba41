"""SentEval transfer tasks: logistic regression on frozen sentence embeddings.

Two classifiers, chosen by ``protocol``:

- ``senteval`` (the default; what SimCSE, DiffCSE and InfoCSE report): SentEval's PyTorch logistic
  regression as SimCSE's ``evaluation.py`` configures it: one linear layer, Adam (lr 1e-3), batch 64,
  the L2 strength (Adam weight decay) picked from {1e-5, 1e-4, 1e-3, 1e-2}, ``epoch_size`` 4 passes
  between validation checks, at most 200 epochs, early stopping after ``tenacity`` 5 checks without
  a new best validation accuracy, keeping the best model. With ``fasttest`` it uses SimCSE's fast
  settings: RMSprop, batch 128, tenacity 3, epoch_size 2 (and 5 folds).
- ``fast``: scikit-learn's L-BFGS logistic regression with SentEval's grids for its scikit-learn path:
  C in {0.25 .. 8} for the inner k-fold (MR, CR, SUBJ, MPQA) and dev-split (SST-2) tasks, C in
  {0.5 .. 32} for the k-fold tasks (TREC, MRPC). Several times faster on a CPU.

The splits follow SentEval:

- MR, CR, SUBJ, MPQA: k-fold cross-validation (k = 10; 5 with ``fasttest``). Inside every outer
  training fold an inner k-fold picks the regularisation; the model refit with it is scored on the
  outer test fold; the score is the mean test accuracy.
- TREC, MRPC: k-fold cross-validation on the training set picks the regularisation; refit on all of
  it; test accuracy.
- SST-2: regularisation picked on the dev split, refit on train; test accuracy.
- MRPC features are ``[|a - b|, a * b]`` of the two sentence embeddings.

Folds are stratified and shuffled with a fixed seed. TREC (six classes) uses multinomial regression.
The PyTorch classifier validates on the held-out fold while picking the regularisation and, when
refit on a whole training set, on a random 5% of it (SST-2: on dev), as SentEval does.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np

from sparsecse.data.transfer import read_binary_task, read_mrpc, read_sst2, read_trec
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.embedding import EmbeddingTable
from sparsecse.evaluation.tasks import TRANSFER_TASKS
from sparsecse.evaluation.transfer_classifiers import SklearnLogReg, accuracy, make_classifier, single_threaded_blas
from sparsecse.evaluation.transfer_intervals import accuracy_interval, fold_spread

FOLDS, FASTTEST_FOLDS = 10, 5


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
    """Every sentence of a transfer task's splits (both sides of a pair task)."""
    out: list[str] = []
    for texts, _labels in data.values():
        if isinstance(texts, tuple):
            out += texts[0] + texts[1]
        else:
            out += texts
    return out


def features(texts, embed: Callable[[Sequence[str]], np.ndarray]) -> np.ndarray:
    """Sentence embeddings, or ``[|a - b|, a * b]`` for sentence pairs (MRPC)."""
    if isinstance(texts, tuple):
        a, b = embed(texts[0]), embed(texts[1])
        return np.concatenate([np.abs(a - b), a * b], axis=1)
    return embed(texts)


# ------------------------------------------------------------------------------------ splits
def stratified_folds(labels: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of k stratified, shuffled folds; the same seed gives the same folds."""
    from sklearn.model_selection import StratifiedKFold

    counts = np.bincount(np.asarray(labels))
    if counts[counts > 0].min() < k:
        raise SparseCSEError(f"{k}-fold cross-validation needs at least {k} examples of every class.")
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels))


def _pick(scores) -> int:
    """Index of the best score, scores rounded to 0.01 as SentEval does; ties go to the first."""
    return int(np.argmax(np.round(scores, 2)))


def cv_best_c(x: np.ndarray, y: np.ndarray, k: int, seed: int, grid: Sequence[float] | None = None,
              classifier=None, scheme: str = "inner_kfold", rows: np.ndarray | None = None) -> tuple[float, float]:
    """(regularisation with the best mean k-fold validation accuracy, that accuracy) over ``rows`` of x
    (default all); ties go to the first."""
    classifier = classifier or SklearnLogReg(seed)
    grid = grid or classifier.grid(scheme)
    rows = np.arange(len(y)) if rows is None else rows
    splits = [(rows[tr], rows[te]) for tr, te in stratified_folds(y[rows], k, seed)]
    means = classifier.dev_scores(grid, x, y, splits).mean(0)
    best = _pick(means)
    return grid[best], float(means[best])


@single_threaded_blas
def nested_cv_accuracy(x: np.ndarray, y: np.ndarray, k: int, seed: int, grid: Sequence[float] | None = None,
                       progress=None, classifier=None) -> dict:
    """Outer k-fold test accuracy with the regularisation chosen by an inner k-fold on each training fold."""
    classifier = classifier or SklearnLogReg(seed)
    outer = stratified_folds(y, k, seed)
    devs, chosen = [], []
    for tr, _te in outer:
        c, dev = cv_best_c(x, y, k, seed, grid, classifier, "inner_kfold", rows=tr)
        devs.append(dev)
        chosen.append(c)
        if progress is not None:
            progress.update(1)
    models = classifier.fit(x, y, [(c, tr, None) for c, (tr, _te) in zip(chosen, outer)])
    tests = [accuracy(model, x[te], y[te]) for model, (_tr, te) in zip(models, outer)]
    return {**fold_spread(tests), "dev_acc": float(np.mean(devs)), "fold_acc": tests, "C": chosen,
            "n": int(len(y)), "protocol": classifier.name}


@single_threaded_blas
def cv_then_test(x_train, y_train, x_test, y_test, k: int, seed: int, grid: Sequence[float] | None = None,
                 classifier=None) -> dict:
    """C chosen by k-fold cross-validation on the training split, then fitted on all of it and scored on test;
    ``acc``, ``dev_acc``, ``C``, the split sizes, the predictions and which were right.
    """
    classifier = classifier or SklearnLogReg(seed)
    c, dev = cv_best_c(x_train, y_train, k, seed, grid, classifier, "kfold")
    clf = classifier.fit(x_train, y_train, [(c, np.arange(len(y_train)), None)])[0]
    predictions = clf.predict(x_test)
    return {"acc": accuracy(clf, x_test, y_test), "dev_acc": dev, "C": c, "n_train": int(len(y_train)),
            "n_test": int(len(y_test)), "predictions": predictions, "correct": _right(predictions, y_test),
            "protocol": classifier.name}


@single_threaded_blas
def dev_then_test(x_train, y_train, x_dev, y_dev, x_test, y_test, seed: int, grid: Sequence[float] | None = None,
                  classifier=None) -> dict:
    """C chosen on the dev split, then scored on the test split; ``acc``, ``dev_acc``, ``C``, the split sizes,
    the predictions and which were right.
    """
    classifier = classifier or SklearnLogReg(seed)
    grid = grid or classifier.grid("split")
    x, y = np.concatenate([x_train, x_dev]), np.concatenate([y_train, y_dev])
    train, dev = np.arange(len(y_train)), np.arange(len(y_train), len(y))
    devs = classifier.dev_scores(grid, x, y, [(train, dev)])[0]
    best = _pick(devs)
    clf = classifier.fit(x, y, [(grid[best], train, dev)])[0]
    return {"acc": accuracy(clf, x_test, y_test), "dev_acc": float(devs[best]), "C": grid[best],
            "n_train": int(len(y_train)), "n_dev": int(len(y_dev)), "n_test": int(len(y_test)),
            "correct": _right(clf.predict(x_test), y_test), "protocol": classifier.name}


def _right(predictions: np.ndarray, gold: np.ndarray) -> list[int]:
    """1 where the prediction is the gold label, else 0, per test item (for bootstrap intervals)."""
    return (np.asarray(predictions) == np.asarray(gold)).astype(int).tolist()


def f1_binary(predicted: np.ndarray, gold: np.ndarray) -> float:
    """F1 (percent) of the positive class of ``predicted`` against ``gold`` (0 where neither has one)."""
    tp = float(((predicted == 1) & (gold == 1)).sum())
    denom = float((predicted == 1).sum() + (gold == 1).sum())
    return 200 * tp / denom if denom else 0.0


# ------------------------------------------------------------------------------------ tasks
def evaluate_transfer(tasks_data: dict[str, dict], table: EmbeddingTable, fasttest: bool = False, seed: int = 0,
                      show_progress: bool = False, protocol: str = "senteval", replicates: int = 1000,
                      bootstrap_seed: int | None = None) -> tuple[dict[str, float], dict[str, dict]]:
    """({task: test accuracy x 100}, {task: details}) for loaded transfer tasks, with the classifier of
    ``protocol`` (``senteval``: SentEval's PyTorch logistic regression; ``fast``: scikit-learn's). The
    test-set tasks' intervals resample their test items ``replicates`` times with ``bootstrap_seed``
    (default: ``seed``)."""
    from tqdm.auto import tqdm

    classifier = make_classifier(protocol, fasttest, seed)
    k = FASTTEST_FOLDS if fasttest else FOLDS
    scores, details = {}, {}
    for task, data in tasks_data.items():
        if task in ("MR", "CR", "SUBJ", "MPQA"):
            texts, labels = data["all"]
            with tqdm(total=k, desc=f"{task} {k}-fold", disable=not show_progress, leave=False) as bar:
                result = nested_cv_accuracy(features(texts, table), labels, k, seed, progress=bar,
                                            classifier=classifier)
        elif task == "SST2":
            (tr, ytr), (dv, ydv), (te, yte) = data["train"], data["dev"], data["test"]
            result = dev_then_test(features(tr, table), ytr, features(dv, table), ydv, features(te, table), yte, seed,
                                   classifier=classifier)
        else:  # TREC, MRPC
            (tr, ytr), (te, yte) = data["train"], data["test"]
            result = cv_then_test(features(tr, table), ytr, features(te, table), yte, k, seed, classifier=classifier)
            predictions = result.pop("predictions")
            if task == "MRPC":
                result["f1"] = f1_binary(predictions, yte)
        if "correct" in result:
            draw = seed if bootstrap_seed is None else bootstrap_seed
            result["ci"] = accuracy_interval(result["correct"], replicates=replicates, seed=draw)["ci"]
            result["ci_replicates"], result["ci_seed"] = replicates, draw
        scores[task] = result["acc"]
        details[task] = result
    return scores, details
