import math

import numpy as np
import pytest
import torch

from sparsecse.data.sts import Pair
from sparsecse.modeling.encoder import SentenceEncoder, length_batches
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import ALL_TASKS, STS_TASKS, TRANSFER_TASKS, evaluate, resolve_tasks
from sparsecse.evaluation.align_uniform import alignment_uniformity
from sparsecse.evaluation.embedding import EmbeddingTable
from sparsecse.evaluation.sts import evaluate_sts, score_subsets
from sparsecse.evaluation.transfer import (
    cv_then_test,
    dev_then_test,
    nested_cv_accuracy,
    stratified_folds,
)
from sparsecse.pruning.masks import Mask
from sparsecse.evaluation.config import EvaluationConfig



def angle_embed(similarity: dict[tuple[str, str], float]):
    """An embed function whose pair cosines are exactly the given similarities (2-d vectors)."""
    vectors = {}
    for (a, b), sim in similarity.items():
        vectors[a] = np.array([1.0, 0.0])
        vectors[b] = np.array([sim, math.sqrt(1 - sim * sim)])
    return lambda sentences: np.stack([vectors[s] for s in sentences])


def pairs_with(golds, sims, prefix):
    pairs = [Pair(f"{prefix}a{i}", f"{prefix}b{i}", g) for i, g in enumerate(golds)]
    return pairs, {(p.s1, p.s2): s for p, s in zip(pairs, sims)}


# ------------------------------------------------------------------ STS scoring
def test_spearman_on_known_ranks():
    pairs, sims = pairs_with([1, 2, 3, 4, 5], [0.2, 0.1, 0.4, 0.3, 0.5], "x")
    result = score_subsets({"only": pairs}, angle_embed(sims))
    # rank differences (1, -1, 1, -1, 0): rho = 1 - 6 * 4 / (5 * 24) = 0.8
    assert result["spearman"]["all"] == pytest.approx(80.0)
    assert result["subsets"]["only"]["n"] == 5


def test_all_mean_and_wmean_aggregation_differ_as_defined():
    a, sims_a = pairs_with([1, 2, 3], [0.1, 0.2, 0.3], "a")  # perfectly ranked within
    b, sims_b = pairs_with([4, 5, 6, 7, 8, 9], [-0.6, -0.5, -0.4, -0.3, -0.1, -0.2], "b")
    embed = angle_embed({**sims_a, **sims_b})
    scores, details = evaluate_sts({"STS12": {"A": a, "B": b}}, embed, "all")
    rho_b = 1 - 6 * 2 / (6 * 35)  # one adjacent swap in six
    d = details["STS12"]["spearman"]
    assert d["mean"] == pytest.approx((100 + 100 * rho_b) / 2)
    assert d["wmean"] == pytest.approx((3 * 100 + 6 * 100 * rho_b) / 9)
    # concatenated: A's sims are the highest although its gold scores are the lowest
    gold = np.arange(1, 10)
    pred_rank = np.array([7, 8, 9, 1, 2, 3, 4, 6, 5])
    rho_all = 1 - 6 * ((gold - pred_rank) ** 2).sum() / (9 * 80)
    assert scores["STS12"] == pytest.approx(100 * rho_all) == d["all"]
    assert evaluate_sts({"STS12": {"A": a, "B": b}}, embed, "mean")[0]["STS12"] == pytest.approx(d["mean"])
    with pytest.raises(SparseCSEError, match="aggregation"):
        evaluate_sts({"STS12": {"A": a}}, embed, "median")


# ------------------------------------------------------------------ tasks
def test_resolve_tasks_groups_names_and_errors():
    assert resolve_tasks("sts") == list(STS_TASKS)
    assert resolve_tasks("transfer") == list(TRANSFER_TASKS)
    assert resolve_tasks("all") == list(ALL_TASKS)
    assert resolve_tasks("sickr, stsb,MR") == ["STSBenchmark", "SICKRelatedness", "MR"]
    with pytest.raises(SparseCSEError) as err:
        resolve_tasks("STS12,STS17")
    assert "'STS17'" in str(err.value) and "STSBenchmark" in str(err.value) and "MRPC" in str(err.value)


# ------------------------------------------------------------------ transfer classifiers
def test_fold_splitting_is_deterministic_and_stratified():
    labels = np.array([0] * 30 + [1] * 20)
    first, again, other = (stratified_folds(labels, 5, s) for s in (3, 3, 4))
    assert all((a[1] == b[1]).all() for a, b in zip(first, again))
    assert any((a[1] != b[1]).any() for a, b in zip(first, other))
    test_parts = np.concatenate([te for _, te in first])
    assert sorted(test_parts) == list(range(50))
    assert all(labels[te].sum() == 4 for _, te in first)  # 20 positives over 5 folds
    with pytest.raises(SparseCSEError, match="at least 10 examples"):
        stratified_folds(np.array([0] * 20 + [1] * 5), 10, 0)


def _separable(n, seed, dim=6):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(n, dim))
    x[:, 0] += 4 * (2 * y - 1)
    return x, y


def test_classifiers_learn_separable_data_and_chance_on_noise():
    x, y = _separable(60, 0)
    result = nested_cv_accuracy(x, y, 5, seed=0)
    assert result["acc"] == 100.0 and len(result["fold_acc"]) == 5 and len(result["C"]) == 5
    assert nested_cv_accuracy(x, y, 5, seed=0) == result  # same seed, same numbers
    xt, yt = _separable(20, 1)
    assert cv_then_test(x, y, xt, yt, 5, seed=0)["acc"] == 100.0
    assert dev_then_test(x, y, xt, yt, xt, yt, seed=0)["acc"] == 100.0
    rng = np.random.default_rng(2)
    noise = nested_cv_accuracy(rng.normal(size=(200, 6)), np.arange(200) % 2, 5, seed=0)
    assert 30 < noise["acc"] < 70


# ------------------------------------------------------------------ alignment / uniformity
def test_alignment_uniformity_on_known_embeddings():
    pairs = [Pair("a", "b", 4.5), Pair("a", "c", 1.0), Pair("c", "d", 4.2)]
    vec = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [-1.0, 0.0], "d": [-1.0, 0.0]}
    result = alignment_uniformity(pairs, lambda ss: np.array([vec[s] for s in ss]))
    assert result["positive_pairs"] == 2 and result["sentences"] == 4
    assert result["alignment"] == pytest.approx((2.0 + 0.0) / 2)
    sq = [2, 4, 4, 2, 2, 0]  # a-b, a-c, a-d, b-c, b-d, c-d
    assert result["uniformity"] == pytest.approx(math.log(np.mean(np.exp(-2 * np.array(sq)))))
    with pytest.raises(SparseCSEError, match="above 4"):
        alignment_uniformity([Pair("a", "b", 3.0)], lambda ss: np.ones((len(ss), 2)))


# ------------------------------------------------------------------ encoding
def test_length_batches_respect_size_and_token_limits():
    lengths = [50, 40, 30, 10, 10, 10, 10, 5]
    order = sorted(range(8), key=lambda i: -lengths[i])
    batches = length_batches(order, lengths, batch_size=3, max_tokens=80)
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert all(len(b) <= 3 and len(b) * lengths[b[0]] <= 80 or len(b) == 1 for b in batches)
    assert batches[0] == [0]  # 2 x 50 > 80


def test_encode_dedups_and_matches_one_by_one(tiny_bert_dir):
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    sentences = ["a man is playing the guitar", "a cat", "the dog is running in the park near the house",
                 "a cat", "two children are playing on the beach"]
    batched = enc.encode(sentences, batch_size=2)
    single = np.concatenate([enc.encode([s]) for s in sentences])
    assert batched.shape == (5, enc.dim) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert (batched[1] == batched[3]).all()
    assert enc.encode([]).shape == (0, enc.dim)
    with pytest.raises(SparseCSEError, match="precision"):
        enc.encode(sentences, precision="int3")
    with pytest.raises(SparseCSEError, match="batch size"):
        enc.encode(sentences, batch_size=0)


def test_bf16_encoding_runs_in_bf16_and_stays_within_its_precision(tiny_bert_dir):
    """``precision="bf16"`` really runs the model in bf16: the CLS pooler's output (a bf16 linear layer and tanh)
    comes back exactly representable in bf16, which no fp32 run gives; and it stays within bf16's precision of the
    fp32 embeddings (each unit vector within cosine 0.999, 2^-8 relative error per element)."""
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="cls", device="cpu")
    sentences = ["a man is playing the guitar", "a cat", "the dog is running in the park near the house",
                 "two children are playing on the beach"]
    full, half = enc.encode(sentences), enc.encode(sentences, precision="bf16")
    assert half.dtype == np.float32
    as_bf16 = torch.from_numpy(half).to(torch.bfloat16).float().numpy()
    assert np.array_equal(as_bf16, half)
    assert not np.array_equal(torch.from_numpy(full).to(torch.bfloat16).float().numpy(), full)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    cosines = (unit(full) * unit(half)).sum(1)
    assert cosines.min() >= 0.999, cosines


def test_embedding_table_encodes_each_normalised_sentence_once(tiny_bert_dir):
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    calls = []
    original = enc.encode
    enc.encode = lambda s, **kw: calls.append(list(s)) or original(s, **kw)
    table = EmbeddingTable(enc)
    table.add(["a  cat ", "a cat", "a dog"])
    rows = table(["a cat", "a dog", "a\tcat"])
    assert calls == [["a cat", "a dog"]]
    assert (rows[0] == rows[2]).all() and len(table) == 2
    table(["a bird"])
    assert calls[-1] == ["a bird"]


# ------------------------------------------------------------------ evaluate()
def test_evaluate_all_tasks_on_tiny_model(tiny_bert_dir, fake_senteval):
    result = evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="all", data_dir=fake_senteval, pooling="mean",
        fasttest=True, device="cpu"))
    assert list(result["scores"]) == list(ALL_TASKS)
    assert all(-100 <= result["scores"][t] <= 100 for t in STS_TASKS)
    assert all(0 <= result["scores"][t] <= 100 for t in TRANSFER_TASKS)
    assert result["avg_sts"] == pytest.approx(np.mean([result["scores"][t] for t in STS_TASKS]))
    assert result["avg_transfer"] == pytest.approx(np.mean([result["scores"][t] for t in TRANSFER_TASKS]))
    assert 0 <= result["alignment"] <= 4 and result["uniformity"] <= 0
    assert "f1" in result["details"]["MRPC"] and len(result["details"]["MR"]["fold_acc"]) == 5
    assert result["details"]["STS16"]["n"] == 5 * 8


def test_evaluate_with_mask_gates_then_detaches(tiny_bert_dir, fake_senteval, tmp_path):
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    probe = enc.encode(["a man is playing the guitar"])
    plain = evaluate(enc, config=EvaluationConfig(tasks="STSBenchmark,STS12", data_dir=fake_senteval))
    full = Mask.for_model(enc.model)
    assert evaluate(enc, mask=full, config=EvaluationConfig(tasks="STSBenchmark,STS12",
        data_dir=fake_senteval))["scores"] == plain["scores"]
    pruned = Mask(full.head_mask.clone(), full.neuron_mask.clone())
    pruned.head_mask[:, :3] = False
    pruned.neuron_mask[:, ::2] = False
    path = pruned.save(tmp_path / "mask.safetensors")
    masked = evaluate(enc, mask=path, config=EvaluationConfig(tasks="STSBenchmark,STS12", data_dir=fake_senteval))
    assert masked["scores"] != plain["scores"]
    assert masked["mask"]["heads_pruned"] == 6 and masked["mask"]["path"] == str(path)
    np.testing.assert_array_equal(enc.encode(["a man is playing the guitar"]), probe)  # gates are gone
    with pytest.raises(SparseCSEError, match="mask is for a model"):
        evaluate(enc, mask=Mask.full(3, 4, 48), config=EvaluationConfig(tasks="STS12", data_dir=fake_senteval))


def test_evaluate_bad_input(tiny_bert_dir, fake_senteval, tmp_path):
    with pytest.raises(SparseCSEError, match="Unknown task 'STS99'"):
        evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="STS99", data_dir=fake_senteval))
    with pytest.raises(SparseCSEError, match="data directory"):
        evaluate(tiny_bert_dir, config=EvaluationConfig(data_dir=tmp_path / "nowhere"))
    with pytest.raises(SparseCSEError, match="SICKRelatedness data is missing"):
        evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="SICKRelatedness", data_dir=tmp_path))


# ------------------------------------------------------------------ the real model (slow)
@pytest.mark.integration
def test_minilm_stsb_matches_published(minilm_dir, senteval_dir):
    torch.manual_seed(0)
    result = evaluate(minilm_dir, config=EvaluationConfig(tasks="STSBenchmark", data_dir=senteval_dir))
    # MTEB leaderboard, all-MiniLM-L6-v2, STSBenchmark test cosine Spearman: 82.03
    assert round(result["scores"]["STSBenchmark"], 2) == 82.03
    assert result["alignment"] < 0.5 and result["uniformity"] < -3
