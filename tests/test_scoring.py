import pytest
import torch

from sparsecse.scoring.alignment import alignment_loss, uniformity_loss
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.scoring.gates import Gates
from sparsecse.scoring.gradients import make_batches
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.scoring.scores import TENSORS, GateScores


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tiny_stsb_dir):
    enc = SentenceEncoder.load(tiny_model_dir, pooling="mean")
    scores = score(enc, config=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=6, seed=3))
    return enc, scores


def direct_importance(enc, data_dir, lam, batch_size=6, seed=3):
    """Reference: per batch, backprop L_score(λ) through one shared set of gates; mean |grad| weighted by
    the batch's positive pairs."""
    batches = make_batches(read_sts_benchmark(data_dir, "train"), batch_size, seed)
    heads, neurons = [], []
    sizes = torch.tensor([float(len(b.pairs)) for b in batches])
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
    w = (sizes / sizes.sum())[:, None, None]
    # computed on the encoder's device (a GPU where there is one), compared on the CPU where scores live
    return (w * torch.stack(heads).cpu()).sum(0), (w * torch.stack(neurons).cpu()).sum(0)


@pytest.mark.parametrize("lam", [0.0, 0.25, 0.5, 1.0])
def test_recombined_scores_equal_a_fresh_run_with_that_lambda(setup, tiny_stsb_dir, lam):
    enc, scores = setup
    heads, neurons = direct_importance(enc, tiny_stsb_dir, lam)
    assert torch.allclose(scores.head_scores(lam), heads, rtol=1e-4, atol=1e-7)
    assert torch.allclose(scores.neuron_scores(lam), neurons, rtol=1e-4, atol=1e-7)


def test_score_shapes_and_manifest(setup):
    enc, scores = setup
    assert all(getattr(scores, name).device.type == "cpu" for name in TENSORS)  # also after a GPU run
    assert scores.shape == (2, 4, 48)
    assert scores.head_grad_align.shape[0] == scores.num_batches == scores.manifest["num_batches"]
    m = scores.manifest
    assert m["params"]["split"] == "train" and m["seed"] == 3 and m["pooling"] == "mean"
    assert m["shape"]["hidden"] == 32 and "torch" in m["versions"]


def test_scoring_freezes_weights_and_uses_eval_mode(setup, tiny_stsb_dir):
    enc, scores = setup
    enc.zero_grad(set_to_none=True)
    enc.train()
    again = score(enc, config=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=6, seed=3))
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
        score(str(tiny_bert_dir), config=ScoringConfig(data_dir=tmp_path))


# ---------------------------------------------------------------------------- criteria on hand-made gradients
def hand_scores(grads, sizes=None):
    """GateScores whose head gradients are ``grads`` [B, 1, U] for both losses (so every λ gives ``grads``)."""
    g = torch.tensor(grads, dtype=torch.float32)
    neurons = torch.ones(g.shape[0], g.shape[1], 2)
    return GateScores(g, g.clone(), neurons, neurons.clone(), manifest={"kind": "scores"},
                      batch_sizes=None if sizes is None else torch.tensor(sizes))


def ranking(scores, criterion="abs_grad", lam=0.5):
    return torch.argsort(scores.head_scores(lam, criterion).flatten(), descending=True).tolist()


def test_abs_grad_weights_batches_by_their_size():
    # unit 0 is large in the full batch, unit 1 in the short one: equal weights would rank 1 first
    grads = [[[1.0, 0.0]], [[0.0, 1.5]]]
    assert ranking(hand_scores(grads, sizes=[64, 28])) == [0, 1]
    assert torch.allclose(hand_scores(grads, [64, 28]).head_scores(0.5), torch.tensor([[64 / 92, 1.5 * 28 / 92]]))
    assert ranking(hand_scores(grads)) == [1, 0]  # a score file without batch sizes: equal weights


def test_fisher_rewards_rare_large_gradients():
    grads = [[[1.0, 1.8]], [[1.0, 0.0]]]  # E|g| = 1, 0.9; E g^2 = 1, 1.62
    s = hand_scores(grads, sizes=[10, 10])
    assert ranking(s, "abs_grad") == [0, 1]
    assert ranking(s, "fisher") == [1, 0]
    assert torch.allclose(s.head_scores(0.3, "fisher"), torch.tensor([[1.0, 1.62]]))


def test_layer_norm_divides_each_layer_by_its_l2_norm():
    g = torch.tensor([[[4.0, 3.0], [0.1, 0.2]]])  # one batch, 2 layers x 2 heads
    s = GateScores(g, g.clone(), torch.ones(1, 2, 3), torch.ones(1, 2, 3), manifest={"kind": "scores"},
                   batch_sizes=torch.tensor([5]))
    normed = s.head_scores(0.5, "layer_norm")
    assert torch.allclose(normed, torch.tensor([[0.8, 0.6], [0.1 / 0.05 ** 0.5, 0.2 / 0.05 ** 0.5]]))
    assert torch.allclose(s.neuron_scores(0.5, "layer_norm"), torch.full((2, 3), 3 ** -0.5))
    # globally, abs_grad removes both heads of layer 1; layer_norm removes the weaker head of each layer
    from sparsecse.pruning.prune import PruningConfig, prune

    s.manifest["shape"] = {"layers": 2, "heads": 2, "ffn": 3, "hidden": 8, "head_dim": 4}
    either = PruningConfig(keep_one_head=False)
    assert prune(s, 0.5, config=either).head_mask.tolist() == [[True, True], [False, False]]
    layer_norm = PruningConfig(keep_one_head=False, criterion="layer_norm")
    assert prune(s, 0.5, config=layer_norm).head_mask.tolist() == [[True, False], [False, True]]


def test_batch_sizes_round_trip_and_old_files_load_with_equal_weights(tmp_path):
    s = hand_scores([[[1.0, 0.0]], [[0.0, 1.5]]], sizes=[64, 28])
    back = GateScores.load(s.save(tmp_path / "new.safetensors"))
    assert back.batch_sizes.tolist() == [64, 28] and back.weighting.startswith("batch size")
    old = hand_scores([[[1.0, 0.0]], [[0.0, 1.5]]])
    loaded = GateScores.load(old.save(tmp_path / "old.safetensors"))
    assert loaded.batch_sizes is None and "equal batch weights" in loaded.weighting
    assert torch.allclose(loaded.head_scores(0.5), torch.tensor([[0.5, 0.75]]))


def test_scoring_stores_uneven_batch_sizes(setup):
    _, scores = setup
    assert scores.batch_sizes.sum() == scores.manifest["num_positive_pairs"]
    assert len(set(scores.batch_sizes.tolist())) > 1  # the tiny split ends with a short batch
