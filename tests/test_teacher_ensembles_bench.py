"""benchmarks/teacher_ensembles.py's pure pieces: an ensemble row scores the mean of its members' cosines
(checked against the similarities computed by hand), rows sorted by STS-B dev."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from sparsecse.data.sts import Pair
from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield from load_benchmark("teacher_ensembles")


def fake_models(n_sentences=40, seed=0):
    rng = np.random.default_rng(seed)
    sentences = [f"sentence {i}" for i in range(n_sentences)]
    vectors = {name: rng.normal(size=(n_sentences, dim)).astype(np.float32) for name, dim in (("A", 8), ("B", 5))}
    rows = {s: i for i, s in enumerate(sentences)}
    lookups = {name: (lambda batch, v=v: v[[rows[s] for s in batch]]) for name, v in vectors.items()}
    return sentences, vectors, lookups


def cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_an_ensemble_row_scores_the_mean_of_its_members_cosines(bench):
    sentences, vectors, lookups = fake_models()
    rng = np.random.default_rng(1)
    pairs = [Pair(sentences[i], sentences[j], float(rng.uniform(0, 5))) for i, j in rng.integers(0, 40, (30, 2))]
    data = {"STSBenchmark": {"dev": pairs}}
    rows = bench.score_combinations(lookups, data, data, max_members=2)
    devs = [r["dev"] for r in rows]
    assert devs == sorted(devs, reverse=True)
    by = {r["teacher"]: r for r in rows}
    assert set(by) == {"A", "B", "A+B"}
    index = {s: i for i, s in enumerate(sentences)}
    i1, i2 = [index[p.s1] for p in pairs], [index[p.s2] for p in pairs]
    gold = [p.score for p in pairs]
    mean = (cos(vectors["A"][i1], vectors["A"][i2]) + cos(vectors["B"][i1], vectors["B"][i2])) / 2
    assert by["A+B"]["dev"] == pytest.approx(spearmanr(mean, gold)[0] * 100, abs=1e-6)
    assert by["A"]["dev"] == pytest.approx(spearmanr(cos(vectors["A"][i1], vectors["A"][i2]), gold)[0] * 100, abs=1e-6)
    assert "| A+B |" in bench.table(rows, {"A": "a", "B": "b"})
