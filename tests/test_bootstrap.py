"""The bootstrap statistics on synthetic scores: exact ranks, paired vs unpaired, determinism, p-values."""

import numpy as np
import pytest
from scipy.stats import rankdata, spearmanr

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import bootstrap as bs
from sparsecse.evaluation.bootstrap import TaskPairs, paired_comparison, replicate_scores, score_intervals


def synthetic(n=600, seed=0, shift=0.8):
    """Gold scores with ties (0..5 in steps of 0.5); A and B share most of their error, B has less of it."""
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, 11, n) / 2
    shared = rng.normal(0, 1.5, n)
    a = gold + shared + rng.normal(0, 0.4, n)
    b = gold + shift * shared + rng.normal(0, 0.4, n)
    return gold, a, b


def spearman(x, y):
    return float(spearmanr(x, y)[0] * 100)


def test_ranks_of_a_resample_equal_scipys_average_ranks():
    gold, a, _ = synthetic(300)
    idx = np.random.default_rng(1).integers(0, 300, (7, 300))
    for values in (gold, a):  # gold: many ties, and the resample repeats values
        assert np.array_equal(bs._ranks(values, idx), rankdata(values[idx], axis=1))


def test_replicates_are_spearman_on_the_drawn_pairs():
    gold, a, b = synthetic(200)
    reps = replicate_scores([a, b], TaskPairs.of(gold), 5, seed=3, key="T")
    (_, idx), = next(bs._draws((200,), 5, bs._generator(3, "T")))
    for r in range(5):
        assert reps[0, r] == pytest.approx(spearman(a[idx[r]], gold[idx[r]]), abs=1e-9)
        assert reps[1, r] == pytest.approx(spearman(b[idx[r]], gold[idx[r]]), abs=1e-9)


def test_a_model_against_itself_is_exactly_zero_with_p_one():
    gold, a, _ = synthetic()
    pairs = {"X": TaskPairs.of(gold), "Y": TaskPairs.of(gold[:300])}
    sims = {"X": a, "Y": a[:300]}
    observed = {t: spearman(sims[t], pairs[t].gold) for t in pairs}
    result = paired_comparison(sims, sims, pairs, observed, observed, replicates=200)
    for row in [*result["tasks"].values(), result["avg"]]:
        assert row["diff"] == 0.0 and row["ci"] == [0.0, 0.0] and row["p"] == 1.0


def test_paired_test_finds_a_known_shift_and_the_unpaired_interval_is_wider():
    gold, a, b = synthetic()
    pairs = {"X": TaskPairs.of(gold)}
    obs_a, obs_b = {"X": spearman(a, gold)}, {"X": spearman(b, gold)}
    assert obs_b["X"] - obs_a["X"] > 3  # the shift built into the data
    row = paired_comparison({"X": a}, {"X": b}, pairs, obs_a, obs_b, replicates=1000)["tasks"]["X"]
    lo, hi = row["ci"]
    assert 0 < lo < row["diff"] < hi
    assert row["p"] < 0.01
    unpaired = row["ci_unpaired"][1] - row["ci_unpaired"][0]
    assert unpaired > 2 * (hi - lo)
    # no shift: A against a second draw of A's own noise level is not significant
    _, _, a2 = synthetic(seed=0, shift=1.0)
    same = paired_comparison({"X": a}, {"X": a2}, pairs, obs_a, {"X": spearman(a2, gold)}, replicates=1000)
    assert same["tasks"]["X"]["ci"][0] < 0 < same["tasks"]["X"]["ci"][1] and same["tasks"]["X"]["p"] > 0.1


def test_bootstrap_is_deterministic_for_a_seed_and_per_task():
    gold, a, _ = synthetic()
    pairs = {"X": TaskPairs.of(gold), "Y": TaskPairs.of(gold[:250])}
    sims = {"X": a, "Y": a[:250]}
    first = score_intervals(sims, pairs, 300, seed=7)
    assert first == score_intervals(sims, pairs, 300, seed=7)
    assert first["tasks"]["X"] != score_intervals(sims, pairs, 300, seed=8)["tasks"]["X"]
    # a task's resamples do not depend on which other tasks are evaluated
    assert score_intervals({"X": a}, {"X": pairs["X"]}, 300, seed=7)["tasks"]["X"] == first["tasks"]["X"]
    lo, hi = first["tasks"]["X"]
    assert lo < spearman(a, gold) < hi


def test_subset_aggregations_resample_within_subsets():
    gold, a, _ = synthetic(400)
    one = TaskPairs.of(gold)
    same = [replicate_scores([a], one, 50, 0, "T", agg) for agg in ("all", "mean", "wmean")]
    assert np.array_equal(same[0], same[1]) and np.array_equal(same[0], same[2])  # one subset: all alike
    # two subsets where 'all' mixes their scales: the per-subset mean is what 'mean' resamples
    two = TaskPairs.of(np.concatenate([gold[:200], gold[200:] + 10]), [200, 200])
    sims = np.concatenate([a[:200], a[200:] + 100])
    lo, hi = bs.interval(replicate_scores([sims], two, 500, 0, "T", "mean")[0])
    observed = (spearman(sims[:200], two.gold[:200]) + spearman(sims[200:], two.gold[200:])) / 2
    assert lo < observed < hi
    assert hi < spearman(sims, two.gold)  # 'all' is inflated by the offset between the subsets; 'mean' is not


def test_p_value_counts_replicates_as_extreme_as_observed():
    # d = 1; shifted replicates d* - d = [-1.5, -0.5, 0.5, 1.5] -> two are at least 1 away: (1 + 2) / 5
    assert bs.p_value(np.array([-0.5, 0.5, 1.5, 2.5]), 1.0) == pytest.approx(3 / 5)
    assert bs.interval(np.arange(1001), 0.9) == pytest.approx([50.0, 950.0])


def test_bad_input_is_refused():
    gold, a, _ = synthetic(50)
    with pytest.raises(SparseCSEError, match="do not match the 50 gold scores"):
        replicate_scores([a[:40]], TaskPairs.of(gold), 10, 0, "T")
    with pytest.raises(SparseCSEError, match="at least 1"):
        replicate_scores([a], TaskPairs.of(gold), 0, 0, "T")
    with pytest.raises(SparseCSEError, match="aggregation"):
        replicate_scores([a], TaskPairs.of(gold), 10, 0, "T", "median")
    with pytest.raises(SparseCSEError, match="add up to 60"):
        TaskPairs.of(gold, [30, 30])
    with pytest.raises(SparseCSEError, match="level"):
        bs.interval(np.zeros(3), 1.5)
