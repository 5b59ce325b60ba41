import pytest
import torch

from sparsecse.alignment import alignment_loss, uniformity_loss
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.gates import Gates
from sparsecse.scoring import GateScores, make_batches, score


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tiny_stsb_dir):
    enc = SentenceEncoder.load(tiny_model_dir, pooling="mean")
    scores = score(enc, data_dir=tiny_stsb_dir, batch_size=6, seed=3)
    return enc, scores


def direct_importance(enc, data_dir, lam, batch_size=6, seed=3):
    """Reference: per batch, backprop L_score(λ) through one shared set of gates; mean |grad|."""
    batches = make_batches(read_sts_benchmark(data_dir, "train"), batch_size, seed)
    heads, neurons = [], []
    enc.eval()
    for batch in batches:
        gates = Gates.ones_for(enc.model, requires_grad=True)
        with gates.attach(enc.model):
            n = len(batch.pairs)
            emb = enc(**enc.tokenize(batch.rows()))
            loss = lam * alignment_loss(emb[:n], emb[n:2 * n]) + (1 - lam) * uniformity_loss(emb[2 * n:])
            loss.backward()
        heads.append(gates.head.grad.abs())
        neurons.append(gates.neuron.grad.abs())
    return torch.stack(heads).mean(0), torch.stack(neurons).mean(0)


@pytest.mark.parametrize("lam", [0.0, 0.25, 0.5, 1.0])
def test_recombined_scores_equal_a_fresh_run_with_that_lambda(setup, tiny_stsb_dir, lam):
    enc, scores = setup
    heads, neurons = direct_importance(enc, tiny_stsb_dir, lam)
    assert torch.allclose(scores.head_scores(lam), heads, rtol=1e-4, atol=1e-7)
    assert torch.allclose(scores.neuron_scores(lam), neurons, rtol=1e-4, atol=1e-7)


def test_score_shapes_and_manifest(setup):
    enc, scores = setup
    assert scores.shape == (2, 4, 48)
    assert scores.head_grad_align.shape[0] == scores.num_batches == scores.manifest["num_batches"]
    m = scores.manifest
    assert m["params"]["split"] == "train" and m["seed"] == 3 and m["pooling"] == "mean"
    assert m["shape"]["hidden"] == 32 and "torch" in m["versions"]


def test_scoring_freezes_weights_and_uses_eval_mode(setup, tiny_stsb_dir):
    enc, scores = setup
    enc.zero_grad(set_to_none=True)
    enc.train()
    again = score(enc, data_dir=tiny_stsb_dir, batch_size=6, seed=3)
    assert enc.training  # mode restored
    assert all(p.grad is None for p in enc.parameters())  # no weight gradients computed
    assert all(p.requires_grad for p in enc.parameters())  # flags restored
    assert torch.equal(again.head_grad_align, scores.head_grad_align)  # no dropout: deterministic


def test_score_file_round_trip(setup, tmp_path):
    _, scores = setup
    path = scores.save(tmp_path / "s.safetensors")
    loaded = GateScores.load(path)
    assert torch.equal(loaded.neuron_grad_uniform, scores.neuron_grad_uniform)
    assert loaded.manifest["num_batches"] == scores.num_batches
    assert (tmp_path / "s.json").is_file()


def test_only_positive_pairs_are_used_for_alignment(tiny_stsb_dir):
    pairs = read_sts_benchmark(tiny_stsb_dir, "train")
    batches = make_batches(pairs, 4, seed=0)
    used = [p for b in batches for p in b.pairs]
    assert used and all(p.score > 4 for p in used)
    assert len(used) == sum(p.score > 4 for p in pairs)


def test_unreadable_score_file_is_rejected(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(SparseCSEError, match="not a readable safetensors file"):
        GateScores.load(bad)


def test_too_few_positive_pairs(tiny_bert_dir, tmp_path):
    d = tmp_path / "STS" / "STSBenchmark"
    d.mkdir(parents=True)
    (d / "sts-train.csv").write_text("g\tf\ty\t1\t1.0\ta man\ta dog\n")
    with pytest.raises(SparseCSEError, match="at least 2 positive pairs"):
        score(str(tiny_bert_dir), data_dir=tmp_path)
