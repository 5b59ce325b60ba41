"""SentEval's transfer protocols: the PyTorch logistic regression (default) and scikit-learn's grids."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.evaluation.transfer import cv_then_test, dev_then_test, nested_cv_accuracy
from sparsecse.evaluation.transfer_classifiers import (C_GRID, KFOLD_C_GRID, L2_GRID, SENTEVAL_FASTTEST, SentEvalLogReg,
                                                       SklearnLogReg, TorchLogRegSettings, initial_weights,
                                                       make_classifier)


def _data(n, seed, dim=5, classes=2, shift=1.0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x[np.arange(n), y] += shift
    return x, y


def senteval_mlp_fit(x, y, x_val, y_val, l2, seed, settings):
    """SentEval's ``MLP`` (nhid 0) + ``PyTorchClassifier.fit`` written as SentEval writes it, with
    nn.Linear and torch.optim, as the reference (the init drawn like the code under test)."""
    rng = np.random.RandomState(seed)
    w0, b0 = initial_weights(x.shape[1], int(y.max()) + 1, seed)
    model = torch.nn.Linear(x.shape[1], int(y.max()) + 1)
    with torch.no_grad():
        model.weight.copy_(w0.T)
        model.bias.copy_(b0)
    optim = torch.optim.Adam if settings.optim == "adam" else torch.optim.RMSprop
    optimizer = optim(model.parameters())
    optimizer.param_groups[0]["weight_decay"] = l2
    x, y = torch.from_numpy(x), torch.from_numpy(y).long()
    x_val, y_val = torch.from_numpy(x_val), torch.from_numpy(y_val).long()
    nepoch, best, stop, count = 0, -1, False, 0
    while not stop and nepoch <= settings.max_epoch:
        for _ in range(settings.epoch_size):
            permutation = rng.permutation(len(x))
            for i in range(0, len(x), settings.batch_size):
                idx = torch.from_numpy(permutation[i:i + settings.batch_size]).long()
                loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += settings.epoch_size
        with torch.no_grad():
            acc = float((model(x_val).argmax(1) == y_val).float().mean())
        if acc > best:
            best, best_model = acc, copy.deepcopy(model)
        else:
            if count >= settings.tenacity:
                stop = True
            count += 1
    return best_model.weight.detach().numpy().T, best_model.bias.detach().numpy(), best


@pytest.mark.parametrize("settings", [TorchLogRegSettings(max_epoch=40, tenacity=2),
                                      TorchLogRegSettings("rmsprop", 16, 1, 2, max_epoch=40)])
def test_pytorch_classifier_matches_senteval_fit(settings):
    x, y = _data(90, 0, classes=3, shift=0.7)
    xv, yv = _data(40, 1, classes=3, shift=0.7)
    x_all, y_all = np.concatenate([x, xv]), np.concatenate([y, yv])
    train, val = np.arange(90), np.arange(90, 130)
    for l2 in (1e-5, 1e-2):
        w, b, best = SentEvalLogReg(3, settings).train(x_all, y_all, [(train, val)], [[l2]])
        ref_w, ref_b, ref_best = senteval_mlp_fit(x, y, xv, yv, l2, 3, settings)
        assert best[0, 0] == pytest.approx(ref_best)
        np.testing.assert_allclose(w[0, 0], ref_w, atol=2e-5)
        np.testing.assert_allclose(b[0, 0], ref_b, atol=2e-5)


def test_side_by_side_training_equals_one_model_at_a_time():
    x, y = _data(101, 2, shift=0.5)
    jobs = [(np.arange(0, 70), np.arange(70, 101)), (np.arange(31, 101), np.arange(0, 31)),
            (np.arange(0, 60), None)]  # uneven sizes: one job runs out of batches first; None = 5% split
    l2s = [[1e-5, 1e-3, 1e-2]] * 3
    settings = TorchLogRegSettings(batch_size=16, max_epoch=24, tenacity=1)
    clf = SentEvalLogReg(0, settings)
    w, b, best = clf.train(x, y, jobs, l2s)
    for j, job in enumerate(jobs):
        for r, l2 in enumerate(l2s[j]):
            w1, b1, best1 = clf.train(x, y, [job], [[l2]])
            np.testing.assert_allclose(w[j, r], w1[0, 0], atol=1e-6)
            np.testing.assert_allclose(b[j, r], b1[0, 0], atol=1e-6)
            assert best[j, r] == best1[0, 0]


def test_senteval_protocol_grids_and_schemes():
    assert L2_GRID == pytest.approx((1e-5, 1e-4, 1e-3, 1e-2))
    # SentEval's scikit-learn grids: 2^-2..2^3 (inner k-fold, dev split), 2^-1..2^5 (k-fold: TREC, MRPC)
    assert C_GRID == tuple(2.0 ** t for t in range(-2, 4))
    assert KFOLD_C_GRID == (0.5, 1, 2, 4, 8, 16, 32)
    fast = make_classifier("fast")
    assert fast.grid("kfold") == KFOLD_C_GRID and fast.grid("inner_kfold") == fast.grid("split") == C_GRID
    assert make_classifier("senteval", fasttest=True).settings == SENTEVAL_FASTTEST
    with pytest.raises(SparseCSEError, match="transfer protocol"):
        make_classifier("sklearn")
    x, y = _data(60, 0, dim=6, shift=8.0)
    xt, yt = _data(20, 1, dim=6, shift=8.0)
    clf = SentEvalLogReg(0, SENTEVAL_FASTTEST)
    nested = nested_cv_accuracy(x, y, 5, seed=0, classifier=clf)
    assert nested["acc"] > 95 and set(nested["C"]) <= set(L2_GRID) and nested["protocol"] == "senteval"
    kfold = cv_then_test(x, y, xt, yt, 5, seed=0, classifier=clf)
    assert kfold["acc"] > 95 and kfold["C"] in L2_GRID
    assert cv_then_test(x, y, xt, yt, 5, seed=0, classifier=SklearnLogReg(0))["C"] in KFOLD_C_GRID
    assert dev_then_test(x, y, xt, yt, xt, yt, seed=0, classifier=clf)["acc"] == 100.0


def test_evaluate_transfer_protocol_option(tiny_bert_dir, fake_senteval):
    common = EvaluationConfig(tasks="MR,TREC,MRPC,SST2", data_dir=fake_senteval, pooling="mean", fasttest=True,
                              device="cpu")
    default = evaluate(tiny_bert_dir, config=common)
    assert default["settings"]["transfer_protocol"] == "senteval"
    assert all(default["details"][t]["protocol"] == "senteval" for t in ("MR", "TREC", "MRPC", "SST2"))
    assert set(default["details"]["MR"]["C"]) <= set(L2_GRID)
    fast = evaluate(tiny_bert_dir, config=replace(common, transfer_protocol="fast"))
    assert fast["details"]["TREC"]["protocol"] == "fast" and fast["details"]["TREC"]["C"] in KFOLD_C_GRID
    with pytest.raises(SparseCSEError, match="transfer protocol"):
        evaluate(tiny_bert_dir, config=replace(common, transfer_protocol="pytorch"))


def test_cli_transfer_protocol_flag(tiny_bert_dir, fake_senteval):
    import json

    from click.testing import CliRunner

    from sparsecse.cli import main

    def run(*extra):
        return CliRunner().invoke(main, ["eval", "--model", str(tiny_bert_dir), "--data-dir", str(fake_senteval),
                                         "--tasks", "MRPC", "--fasttest", "--json", "--quiet", "--device", "cpu",
                                         *extra])

    fast = run("--transfer-protocol", "fast")
    assert fast.exit_code == 0, fast.output
    payload = json.loads(fast.stdout)
    assert payload["settings"]["transfer_protocol"] == "fast" and payload["details"]["MRPC"]["C"] in KFOLD_C_GRID
    default = json.loads(run().stdout)
    assert default["settings"]["transfer_protocol"] == "senteval" and default["details"]["MRPC"]["C"] in L2_GRID
    bad = run("--transfer-protocol", "pytorch")
    assert bad.exit_code == 2 and "pytorch" in bad.output
