"""The transfer tasks' classifiers: logistic regression on frozen sentence embeddings, one class per protocol.

- :class:`SentEvalLogReg` (``senteval``): SentEval's PyTorch logistic regression as SimCSE's ``evaluation.py``
  configures it (Adam, batch 64, the L2 strength from SentEval's grid, early stopping; RMSprop and fewer passes
  with ``fasttest``), the models of a grid trained side by side in one tensor.
- :class:`SklearnLogReg` (``fast``): scikit-learn's L-BFGS logistic regression with SentEval's C grids.

:func:`make_classifier` picks one by protocol; :mod:`sparsecse.evaluation.transfer` splits each task and scores
it with the classifier.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np

from sparsecse.errors import SparseCSEError

# SentEval's grids (senteval/tools/validation.py): scikit-learn C by split scheme, PyTorch L2 for all
C_GRID = tuple(2.0 ** t for t in range(-2, 4))  # inner k-fold and dev split: 0.25 .. 8
KFOLD_C_GRID = tuple(2.0 ** t for t in range(-1, 6))  # k-fold on train then test (TREC, MRPC): 0.5 .. 32
L2_GRID = tuple(10.0 ** t for t in range(-5, -1))  # 1e-5 .. 1e-2
MAX_ITER = 1000
PROTOCOLS = ("senteval", "fast")
VALIDATION_SPLIT = 0.05  # SentEval's held-out share when refitting on a whole training set


def single_threaded_blas(fn):
    """Run ``fn`` with one BLAS thread: these fits are small, and OpenBLAS threads waking up for
    every tiny product made them about ten times slower on a busy 2-core machine."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper


def fit_logreg(x: np.ndarray, y: np.ndarray, c: float, seed: int):
    """scikit-learn's logistic regression (inverse strength ``c``, random state ``seed``) fitted on ``x``, ``y``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clf.fit(x, y)


def accuracy(clf, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy (percent) of the fitted classifier ``clf`` on ``x``, ``y``."""
    return float((clf.predict(x) == y).mean() * 100)


class SklearnLogReg:
    """The ``fast`` protocol: scikit-learn logistic regression, C from SentEval's scikit-learn grids."""

    name = "fast"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def grid(self, scheme: str) -> tuple[float, ...]:
        """The C values tried: the k-fold grid or the train/dev grid (``scheme``)."""
        return KFOLD_C_GRID if scheme == "kfold" else C_GRID

    def dev_scores(self, grid, x, y, splits) -> np.ndarray:
        """[split, grid value] validation accuracy x 100, trained on each split's (train, validation) indices."""
        return np.array([[accuracy(fit_logreg(x[tr], y[tr], c, self.seed), x[va], y[va]) for c in grid]
                         for tr, va in splits])

    def fit(self, x, y, fits) -> list:
        """A fitted model (``.predict``) per (regularisation, train indices, validation indices or None)."""
        return [fit_logreg(x[tr], y[tr], reg, self.seed) for reg, tr, _va in fits]


@dataclass(frozen=True)
class TorchLogRegSettings:
    """SentEval's ``classifier`` settings (``nhid`` 0: logistic regression)."""

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200


SENTEVAL_FULL = TorchLogRegSettings()  # SimCSE evaluation.py, --mode test
SENTEVAL_FASTTEST = TorchLogRegSettings("rmsprop", 128, 3, 2)  # SimCSE evaluation.py, --mode fasttest
ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}  # torch.optim.Adam's defaults
RMSPROP = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8}  # torch.optim.RMSprop's defaults


class LinearModel:
    """A trained logistic regression: ``predict`` = argmax of x @ weight + bias."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray):
        self.weight, self.bias = weight, bias

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The predicted class of each row of ``x``."""
        return (np.asarray(x, dtype=np.float32) @ self.weight + self.bias).argmax(-1)


class SentEvalLogReg:
    """The ``senteval`` protocol: SentEval's PyTorch logistic regression (see the module docstring).

    SentEval reseeds NumPy and PyTorch before building each classifier, so every model of a grid or of
    a set of folds starts from the same weights and draws its batches from the same random stream.
    Models are therefore trained side by side here (one weight tensor [jobs, grid, d, classes], the
    gradient and the optimizer written out), which gives what training them one after another gives.
    """

    name = "senteval"

    def __init__(self, seed: int = 0, settings: TorchLogRegSettings = SENTEVAL_FULL):
        self.seed, self.settings = seed, settings

    def grid(self, scheme: str) -> tuple[float, ...]:
        """The L2 penalties tried (SentEval's grid, whatever the scheme)."""
        return L2_GRID

    def dev_scores(self, grid, x, y, splits) -> np.ndarray:
        """Dev accuracy (percent) of every ``grid`` value on every (train, dev) split, [splits, grid]."""
        _w, _b, best = self.train(x, y, [(tr, va) for tr, va in splits], [list(grid)] * len(splits))
        return 100 * best

    def fit(self, x, y, fits) -> list[LinearModel]:
        """Trained on each fit's train indices, early-stopped on its validation indices, else (None) on a
        random 5% of the train indices, as SentEval's ``validation_split=0.05``."""
        w, b, _best = self.train(x, y, [(tr, va) for _reg, tr, va in fits], [[reg] for reg, _tr, _va in fits])
        return [LinearModel(w[j, 0], b[j, 0]) for j in range(len(fits))]

    def train(self, x, y, jobs, l2s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """SentEval's ``MLP.fit`` for every job (train indices, validation indices or None) and each of
        its L2 strengths: (best weights [J, R, d, C], biases [J, R, C], best validation accuracy [J, R])."""
        import torch

        s = self.settings
        x_all = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        y_all = torch.as_tensor(np.asarray(y), dtype=torch.long)
        n_classes, d = int(y_all.max()) + 1, x_all.shape[1]
        rngs, trains, vals = [], [], []
        for tr, va in jobs:
            rng = np.random.RandomState(self.seed)
            tr = np.asarray(tr)
            if va is None:  # the split is drawn first from the freshly seeded stream
                order = rng.permutation(len(tr))
                held = int(VALIDATION_SPLIT * len(tr))
                tr, va = tr[order[held:]], tr[order[:held]]
            rngs.append(rng)
            trains.append(torch.as_tensor(tr, dtype=torch.long))
            vals.append(torch.as_tensor(np.asarray(va), dtype=torch.long))
        n_jobs, r = len(jobs), len(l2s[0])
        decay = torch.tensor(l2s, dtype=torch.float32)  # [J, R]
        w0, b0 = initial_weights(d, n_classes, self.seed)
        weight = w0[None, :, None, :].expand(n_jobs, d, r, n_classes).contiguous()  # [J, d, R, C]
        bias = b0.expand(n_jobs, r, n_classes).contiguous()  # [J, R, C]
        moments = [torch.zeros_like(weight), torch.zeros_like(bias), torch.zeros_like(weight), torch.zeros_like(bias)]
        steps = torch.zeros(n_jobs)
        best = torch.full((n_jobs, r), -1.0)
        best_w, best_b = weight.clone(), bias.clone()
        misses = torch.zeros(n_jobs, r, dtype=torch.long)
        stopped = torch.zeros(n_jobs, r, dtype=torch.bool)
        lengths = [len(t) for t in trains]
        epoch = 0
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny products: threads only add overhead
        try:
            while not bool(stopped.all()) and epoch <= s.max_epoch:
                for _ in range(s.epoch_size):
                    orders = [trains[j][torch.from_numpy(rngs[j].permutation(lengths[j]))] for j in range(n_jobs)]
                    for start in range(0, max(lengths), s.batch_size):
                        parts = [o[start:start + s.batch_size] for o in orders]
                        counts = torch.tensor([len(p) for p in parts], dtype=torch.float32)
                        idx = torch.zeros(n_jobs, s.batch_size, dtype=torch.long)
                        real = torch.zeros(n_jobs, s.batch_size)
                        for j, p in enumerate(parts):
                            idx[j, :len(p)], real[j, :len(p)] = p, 1.0
                        active = counts > 0  # a job with fewer examples may have run out of batches
                        self._step(x_all[idx], y_all[idx], real / counts.clamp(min=1)[:, None], active, weight, bias,
                                   moments, steps, decay)
                epoch += s.epoch_size
                for j in range(n_jobs):
                    logits = x_all[vals[j]] @ weight[j].view(d, -1) + bias[j].view(-1)
                    acc = (logits.view(-1, r, n_classes).argmax(-1) == y_all[vals[j]][:, None]).float().mean(0)
                    better, live = acc > best[j], ~stopped[j]
                    take = better & live
                    best[j] = torch.where(take, acc, best[j])
                    best_w[j][:, take], best_b[j][take] = weight[j][:, take], bias[j][take]
                    # SentEval counts every check without a new best, not only consecutive ones
                    miss = ~better & live
                    stopped[j] |= miss & (misses[j] >= s.tenacity)
                    misses[j] += miss.long()
        finally:
            torch.set_num_threads(threads)
        return best_w.permute(0, 2, 1, 3).numpy(), best_b.numpy(), best.numpy()

    def _step(self, xb, yb, row_weight, active, weight, bias, moments, steps, decay) -> None:
        """One optimizer step of every active job's models on its batch: mean cross-entropy, plus the
        optimizer's weight decay (grad += l2 * param, on the bias too, as SentEval sets it for all)."""
        import torch

        n_jobs, d, r, n_classes = weight.shape
        logits = torch.baddbmm(bias.view(n_jobs, 1, -1), xb, weight.view(n_jobs, d, -1)).view(n_jobs, -1, r, n_classes)
        grad_logits = torch.softmax(logits, -1)
        grad_logits -= torch.nn.functional.one_hot(yb, n_classes).to(logits.dtype)[:, :, None]
        grad_logits *= row_weight[:, :, None, None]
        grads = (torch.bmm(xb.transpose(1, 2), grad_logits.view(n_jobs, -1, r * n_classes)).view_as(weight)
                 + decay[:, None, :, None] * weight,
                 grad_logits.sum(1) + decay[:, :, None] * bias)
        steps += active.float()
        t = steps.clamp(min=1)
        for param, grad, first, second in ((weight, grads[0], moments[0], moments[2]),
                                           (bias, grads[1], moments[1], moments[3])):
            keep = active.view(-1, *[1] * (param.dim() - 1))
            tt = t.view_as(keep)
            if self.settings.optim == "adam":
                a = ADAM
                first.copy_(torch.where(keep, a["beta1"] * first + (1 - a["beta1"]) * grad, first))
                second.copy_(torch.where(keep, a["beta2"] * second + (1 - a["beta2"]) * grad * grad, second))
                denom = second.sqrt() / (1 - a["beta2"] ** tt).sqrt() + a["eps"]
                update = a["lr"] / (1 - a["beta1"] ** tt) * first / denom
            else:
                a = RMSPROP
                second.copy_(torch.where(keep, a["alpha"] * second + (1 - a["alpha"]) * grad * grad, second))
                update = a["lr"] * grad / (second.sqrt() + a["eps"])
            param -= torch.where(keep, update, torch.zeros(()))


def initial_weights(d: int, n_classes: int, seed: int):
    """(weight [d, C], bias [C]) drawn as ``nn.Linear`` initialises them (uniform, bound 1/sqrt(d))."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    bound = 1 / d ** 0.5
    return (torch.empty(d, n_classes).uniform_(-bound, bound, generator=generator),
            torch.empty(n_classes).uniform_(-bound, bound, generator=generator))


def make_classifier(protocol: str = "senteval", fasttest: bool = False, seed: int = 0):
    """The classifier of a transfer ``protocol`` (``senteval`` or ``fast``)."""
    if protocol == "senteval":
        return SentEvalLogReg(seed, SENTEVAL_FASTTEST if fasttest else SENTEVAL_FULL)
    if protocol == "fast":
        return SklearnLogReg(seed)
    raise SparseCSEError(f"Unknown transfer protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}.")
