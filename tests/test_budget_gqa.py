"""Budgets under grouped-query attention (issue 47): a key/value head costs once for its group, while any
query head of the group stays. The search is checked against enumerations of every subset, the masks
against the counted cost of the shrunk model and against the shrunk model's embeddings, on tiny random
Qwen3 and Gemma-3 models with 4 query heads over 2 key/value heads; the early budget check costs every
modern architecture as the shrunk model counts it."""

import itertools
import json

import pytest
import torch

from sparsecse.compression import compress
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import count_parameters, flops_per_token, shape_record
from sparsecse.pruning.budget import UnitCosts, budget_cap, select_under_budget
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, prune
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.shrinking.iterative import iterative_prune, model_costs, shrink_iterative
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import cli, random_sentences
from tests.tiny_modern import FFN, HEAD_DIM, HIDDEN, KV_HEADS, LAYERS, make_modern_model_dir

HEADS = 4  # query heads: groups of 2 over the 2 key/value heads
GROUPED = ("qwen3", "gemma3_text")
POOLING = {"qwen3": "last", "gemma3_text": "mean", "modernbert": "mean"}
SEQ_LEN = 16
HELD_OUT = random_sentences(10, seed=47)


# ----------------------------------------------------------------------------- enumerations
def enumerate_best(head_values, neuron_options, c_q, c_kv, cap, keep_one_head=False, allowed=None):
    """The best (value, cost) over every subset of heads (``head_values`` [layers][heads], key/value groups
    of ``HEADS // KV_HEADS`` consecutive heads) joined with every neuron option ((value, cost, label)), the
    heads' cost being c_q per kept head plus c_kv per group with a kept head; ties to the larger cost.
    Returns (value, cost, head bits, neuron label)."""
    layers, heads = len(head_values), len(head_values[0])
    group = heads // KV_HEADS
    flat = [v for row in head_values for v in row]
    ok = [True] * len(flat) if allowed is None else [bool(a) for row in allowed for a in row]
    head_subsets = []
    for bits in range(1 << len(flat)):
        kept = [(bits >> i) & 1 for i in range(len(flat))]
        if any(k and not o for k, o in zip(kept, ok)):
            continue
        per_layer = [kept[i * heads:(i + 1) * heads] for i in range(layers)]
        if keep_one_head and not all(any(row) for row in per_layer):
            continue
        groups = sum(any(row[k * group:(k + 1) * group]) for row in per_layer for k in range(KV_HEADS))
        head_subsets.append((sum(v for v, k in zip(flat, kept) if k), sum(kept) * c_q + groups * c_kv, bits))
    best = None
    for (hv, hc, bits), (nv, nc, label) in itertools.product(head_subsets, neuron_options):
        if hc + nc <= cap and (best is None or (hv + nv, hc + nc) > best[:2]):
            best = (hv + nv, hc + nc, bits, label)
    return best


def every_neuron_subset(values, c_n):
    return [(sum(values[i] for i in s), len(s) * c_n, s) for r in range(len(values) + 1)
            for s in itertools.combinations(range(len(values)), r)]


def best_neurons_by_count(values, c_n):
    """Every neuron count n with its n highest-scored neurons: neurons all cost c_n, so no other n-subset is
    worth more."""
    ranked = sorted(values, reverse=True)
    return [(sum(ranked[:n]), n * c_n, n) for n in range(len(values) + 1)]


def bits_to_mask(bits, layers, heads):
    return torch.tensor([(bits >> i) & 1 for i in range(layers * heads)], dtype=torch.bool).view(layers, heads)


@pytest.mark.parametrize("c_q,c_kv,c_n", [(5, 3, 2), (4, 9, 3), (6, 1, 7)])
def test_grouped_search_is_optimal_against_every_subset(c_q, c_kv, c_n):
    layers, ffn = 2, 3
    g = torch.Generator().manual_seed(c_q * 100 + c_kv)
    hs = torch.rand(layers, HEADS, generator=g, dtype=torch.float64)
    ns = torch.rand(layers, ffn, generator=g, dtype=torch.float64)
    hs[1, :2] = 0.0  # a worthless group: ties on value, broken towards the larger cost
    costs = UnitCosts("flops", head=c_q, neuron=c_n, fixed=0, layers=layers, heads=HEADS, ffn=ffn, kv=c_kv,
                      kv_heads=KV_HEADS)
    assert costs.dense == layers * (HEADS * c_q + KV_HEADS * c_kv + ffn * c_n)
    allowed = (torch.tensor([[True, False, True, True], [False, True, True, False]]),
               torch.tensor([[True, False, True], [True, True, False]]))
    for budget, keep_one_head, within in itertools.product((0.15, 0.3, 0.5, 0.7, 0.9), (False, True), (False, True)):
        cap = budget_cap(costs, budget)
        neuron_values = ns.flatten().tolist()
        if within:
            neuron_values = [v if a else None for v, a in zip(neuron_values, allowed[1].flatten().tolist())]
        options = [(v, c, s) for v, c, s in every_neuron_subset([v or 0.0 for v in neuron_values], c_n)
                   if all(neuron_values[i] is not None for i in s)]
        best = enumerate_best(hs.tolist(), options, c_q, c_kv, cap, keep_one_head, allowed[0] if within else None)
        if best is None or (best[2] == 0 and not best[3]):
            with pytest.raises(SparseCSEError, match="raise the budget"):
                select_under_budget(hs, ns, costs, budget, keep_one_head, allowed if within else None)
            continue
        hk, nk = select_under_budget(hs, ns, costs, budget, keep_one_head, allowed if within else None)
        kept = costs.kept(hk, nk)
        assert kept <= cap and float(hs[hk].sum() + ns[nk].sum()) == pytest.approx(best[0], abs=1e-12)
        assert kept == best[1]  # equal value: the larger cost, as the enumeration's tie rule
        if within:
            assert not (hk & ~allowed[0]).any() and not (nk & ~allowed[1]).any()
        if keep_one_head:
            assert hk.any(1).all()
        # nothing more fits: the cheapest unit not kept (a head of a kept group, of an emptied group, a neuron)
        groups = hk.view(layers, KV_HEADS, -1).any(-1, keepdim=True).expand(-1, -1, HEADS // KV_HEADS)
        free_h = ~hk & (allowed[0] if within else True)
        free_n = ~nk & (allowed[1] if within else True)
        adds = ([c_q] if (free_h & groups.reshape(layers, HEADS)).any() else []) \
            + ([c_q + c_kv] if (free_h & ~groups.reshape(layers, HEADS)).any() else []) \
            + ([c_n] if free_n.any() else [])
        assert not adds or cap - kept < min(adds)


def test_a_budget_that_buys_a_query_head_but_not_its_key_value_head_is_refused():
    costs = UnitCosts("flops", head=5, neuron=20, fixed=0, layers=2, heads=HEADS, ffn=3, kv=3, kv_heads=KV_HEADS)
    hs, ns = torch.ones(2, HEADS), torch.ones(2, 3)
    budget = 6 / costs.dense  # a query head (5) fits, with its key/value head (8) not; no neuron (20)
    with pytest.raises(SparseCSEError) as error:
        select_under_budget(hs, ns, costs, budget)
    assert "keeps no head and no neuron (one head with its key/value head costs" in str(error.value)
    with pytest.raises(SparseCSEError, match="one head per layer"):
        select_under_budget(hs, ns, costs, 2 * 6 / costs.dense, keep_one_head=True)  # two query heads, no kv
    hk, _ = select_under_budget(hs, ns, costs, 8.5 / costs.dense)
    assert int(hk.sum()) == 1


# ----------------------------------------------------------------------------- tiny Qwen3 and Gemma-3
@pytest.fixture(scope="module", params=GROUPED)
def grouped(request, tmp_path_factory, tiny_stsb_dir):
    """(arch, model directory, dense scores) of a tiny random model with 4 query heads over 2 key/value heads."""
    arch = request.param
    path = make_modern_model_dir(tmp_path_factory.mktemp(f"gqa_{arch}"), arch, heads=HEADS)
    scores = score(path, ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, max_batches=2, seed=0),
                   pooling=POOLING[arch], device="cpu")
    return arch, path, scores


def hand_costs(arch, metric):
    """Costs per unit from the real shapes (DESIGN.md, grouped-query attention), written out here:
    (query head, key/value head, neuron, what no unit owns)."""
    d, dh = HIDDEN, HEAD_DIM
    if metric == "flops":
        return 2 * (2 * d * dh + 2 * SEQ_LEN * dh), 2 * 2 * d * dh, 2 * 3 * d, 0
    norms = (2 if arch == "qwen3" else 4) * d + 2 * dh  # RMSNorms of the layer, q_norm and k_norm
    return 2 * d * dh, 2 * d * dh, 3 * d, LAYERS * norms


def load(path, arch):
    return SentenceEncoder.load(path, pooling=POOLING[arch], device="cpu")


def counted(encoder, metric):
    return flops_per_token(encoder, SEQ_LEN) if metric == "flops" else count_parameters(encoder, "layers")


def assert_same_direction(a, b):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert torch.nn.functional.cosine_similarity(a, b, dim=1).min() >= 0.99999


@pytest.mark.parametrize("metric", ["flops", "params"])
def test_tiny_grouped_models_at_half_the_cost_match_the_enumeration(grouped, metric):
    """prune at 0.5: the query heads, whole key/value groups and neurons it removes are those of the best of
    every head subset (4096) with every neuron count; the mask's kept cost is the shrunk model's counted cost,
    and the gated model computes what the shrunk one does."""
    arch, path, scores = grouped
    c_q, c_kv, c_n, fixed = hand_costs(arch, metric)
    dense = load(path, arch)
    assert counted(dense, metric) == fixed + LAYERS * (HEADS * c_q + KV_HEADS * c_kv + FFN * c_n)
    assert shape_record(dense.model) == scores.manifest["shape"]
    mask = prune(scores, config=PruningConfig(seq_len=SEQ_LEN), **{f"keep_{metric}": 0.5})
    hs, ns = scores.head_scores(0.5, "fisher").double(), scores.neuron_scores(0.5, "fisher").double()
    cap = counted(dense, metric) // 2 - fixed
    value, cost, bits, neurons = enumerate_best(hs.tolist(), best_neurons_by_count(ns.flatten().tolist(), c_n),
                                                c_q, c_kv, cap)
    expected = bits_to_mask(bits, LAYERS, HEADS)
    groups_removed = int((~expected.view(LAYERS, KV_HEADS, -1).any(-1)).sum())
    m = mask.manifest
    assert (m["heads_pruned"], m["kv_heads_pruned"], m["neurons_pruned"]) == (
        LAYERS * HEADS - int(expected.sum()), groups_removed, LAYERS * FFN - neurons)
    assert torch.equal(mask.head_mask, expected)
    assert float(hs[mask.head_mask].sum() + ns[mask.neuron_mask].sum()) == pytest.approx(value, rel=1e-12)
    assert m[f"kept_{metric}"] == cost + fixed
    print(f"{arch} keep_{metric} 0.5: removed {m['heads_pruned']} query heads, {m['kv_heads_pruned']} key/value "
          f"groups, {m['neurons_pruned']} neurons")

    small = shrink_encoder(load(path, arch), mask, align_ffn=1)
    assert (flops_per_token(small, SEQ_LEN), count_parameters(small, "layers")) == (m["kept_flops"], m["kept_params"])
    with mask.apply(dense.model):
        gated = dense.encode(HELD_OUT)
    assert_same_direction(gated, small.encode(HELD_OUT))


@pytest.mark.parametrize("metric", ["flops", "params"])
def test_compress_in_python_removes_what_the_enumeration_removes(grouped, metric, corpus, tiny_stsb_dir, tmp_path):
    """One step from the dense scores: compress's mask is the enumeration's; the silenced full-size model and
    the saved, reloaded shrunk model compute the same embeddings; the budget is met and counted."""
    arch, path, scores = grouped
    score_file = scores.save(tmp_path / "scores.safetensors")
    result = compress(path, tmp_path / "small", steps=1, scores=score_file,
                      score=ScoringConfig(data_dir=tiny_stsb_dir), prune=PruningConfig(seq_len=SEQ_LEN),
                      shrink=ShrinkConfig(reconstruct=corpus, reconstruct_sentences=20, seq_len=SEQ_LEN,
                                          pooling=POOLING[arch], device="cpu", align_ffn=1),
                      **{f"keep_{metric}": 0.5})
    one_shot = prune(scores, config=PruningConfig(seq_len=SEQ_LEN), **{f"keep_{metric}": 0.5})
    assert torch.equal(result.mask.head_mask, one_shot.head_mask)
    assert torch.equal(result.mask.neuron_mask, one_shot.neuron_mask)
    m = result.mask.manifest
    assert m[f"kept_{metric}_ratio"] <= 0.5 and m["kv_heads_pruned"] == int((~result.mask.kv_mask).sum())
    reloaded = SentenceEncoder.load(tmp_path / "small", device="cpu")
    assert (flops_per_token(reloaded, SEQ_LEN), count_parameters(reloaded, "layers")) == (m["kept_flops"],
                                                                                         m["kept_params"])
    assert_same_direction(result.shrunk.encoder.encode(HELD_OUT), reloaded.encode(HELD_OUT))


def test_silenced_model_in_steps_computes_what_the_shrunk_model_does(grouped, corpus, tiny_stsb_dir):
    """Two steps (the second chooses within the first under the group costs): the reconstructed full-size
    model with its removed units silenced and the shrunk model give the same embeddings."""
    arch, path, scores = grouped
    result = iterative_prune(path, keep_flops=0.5, steps=2, reconstruct=ReconstructionPlan.prepare(corpus, 20),
                             scores=scores, prune=PruningConfig(seq_len=SEQ_LEN),
                             score=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, max_batches=2),
                             pooling=POOLING[arch], device="cpu")
    first, last = result.steps
    assert first["heads_kept"] >= last["heads_kept"] and first["neurons_kept"] >= last["neurons_kept"]
    full = result.encoder.encode(HELD_OUT)
    small = shrink_iterative(result, config=ShrinkConfig(align_ffn=1, seq_len=SEQ_LEN))
    assert_same_direction(full, small.encoder.encode(HELD_OUT))
    assert flops_per_token(small.encoder, SEQ_LEN) == result.mask.manifest["kept_flops"]


@pytest.mark.parametrize("metric", ["flops", "params"])
def test_compress_command_on_grouped_models(grouped, metric, corpus, tiny_stsb_dir, tmp_path):
    """`sparsecse compress --keep-flops/--keep-params 0.5` in three steps: the budget is met, each step keeps a
    subset of the previous one, and the written model counts what the mask says."""
    arch, path, _ = grouped
    out = tmp_path / "small"
    result = cli("compress", "--model", path, f"--keep-{metric}", "0.5", "--reconstruct", corpus,
                 "--reconstruct-sentences", "20", "--seq-len", SEQ_LEN, "--data-dir", tiny_stsb_dir,
                 "--score-batch-size", "8", "--max-batches", "2", "--pooling", POOLING[arch], "--device", "cpu",
                 "--align-ffn", "1", "--out", out, "--json", "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    m = report["mask"]
    assert m[f"kept_{metric}_ratio"] <= 0.5 and m["budget"]["keep"] == 0.5 and m["method"] == "iterative"
    kept = [(s["heads_kept"], s["neurons_kept"]) for s in report.get("steps", [])] or None
    if kept:
        assert all(a[0] >= b[0] and a[1] >= b[1] for a, b in zip(kept, kept[1:]))
    small = SentenceEncoder.load(out, device="cpu")
    assert (flops_per_token(small, SEQ_LEN), count_parameters(small, "layers")) == (m["kept_flops"], m["kept_params"])
    heads = [len(h) for h in small.model.config.kept_heads]
    assert sum(heads) == LAYERS * HEADS - m["heads_pruned"]
    assert sum(len(k) for k in small.model.config.kept_kv_heads) == LAYERS * KV_HEADS - m["kv_heads_pruned"]


def test_prune_command_keep_flops_on_a_grouped_model(grouped, tmp_path):
    arch, path, scores = grouped
    score_file = scores.save(tmp_path / "scores.safetensors")
    out = tmp_path / "mask.safetensors"
    result = cli("prune", "--scores", score_file, "--keep-flops", "0.5", "--seq-len", SEQ_LEN, "--out", out)
    assert result.exit_code == 0, result.output
    mask = Mask.load(out)
    expected = prune(scores, keep_flops=0.5, config=PruningConfig(seq_len=SEQ_LEN))
    assert torch.equal(mask.head_mask, expected.head_mask) and torch.equal(mask.neuron_mask, expected.neuron_mask)
    assert torch.equal(mask.kv_mask, mask.head_mask.view(LAYERS, KV_HEADS, -1).any(-1))
    m = json.loads((tmp_path / "mask.json").read_text())
    assert m["kept_flops"] == expected.manifest["kept_flops"] <= m["dense_flops"] // 2
    assert m["encoder_params_removed"] == m["dense_params"] - m["kept_params"]
    grid = cli("prune", "--scores", score_file, "--keep-params", "0.5,0.7", "--out", tmp_path / "grid")
    assert grid.exit_code == 0, grid.output
    for budget in (0.5, 0.7):
        saved = Mask.load(tmp_path / "grid" / f"mask-p{budget}-l0.5.safetensors")
        assert torch.equal(saved.head_mask, prune(scores, keep_params=budget).head_mask)
        assert saved.manifest["kept_params"] <= budget * saved.manifest["dense_params"]


REFUSED = [({"keep_flops": 1e-6}, "keeps no head and no neuron"),
           ({"keep_params": 0.01}, "below what the layers' biases and LayerNorms cost"),
           ({"keep_flops": 0.05, "keep_one_head": True}, "and one head per layer cost")]


@pytest.mark.parametrize("budget,message", REFUSED)
def test_compress_refuses_a_budget_that_keeps_nothing_before_scoring(grouped, corpus, tmp_path, budget, message):
    """In one sentence, before scoring (the STS-B directory given does not exist), nothing written."""
    arch, path, _ = grouped
    out = tmp_path / "small"
    args = [a for k, v in budget.items() for a in ((f"--{k.replace('_', '-')}", v) if v is not True
                                                   else (f"--{k.replace('_', '-')}",))]
    result = cli("compress", "--model", path, *args, "--reconstruct", corpus, "--seq-len", SEQ_LEN,
                 "--data-dir", tmp_path / "no-such-data", "--pooling", POOLING[arch], "--device", "cpu", "--out", out)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].endswith(".") and ". " not in errors[0]  # one sentence
    budget = dict(budget)
    rule = PruningConfig(seq_len=SEQ_LEN, keep_one_head=budget.pop("keep_one_head", None))
    with pytest.raises(SparseCSEError, match=message):
        compress(path, out, score=ScoringConfig(data_dir=tmp_path / "no-such-data"), prune=rule,
                 shrink=ShrinkConfig(reconstruct=corpus, seq_len=SEQ_LEN, pooling=POOLING[arch], device="cpu"),
                 **budget)
    assert not out.exists()


# ----------------------------------------------------------------------------- the early check's costs
@pytest.mark.parametrize("arch", ["modernbert", *GROUPED])
def test_model_costs_are_the_counted_costs_of_every_modern_architecture(arch, tmp_path):
    path = make_modern_model_dir(tmp_path, arch, heads=HEADS)
    encoder = load(path, arch)
    for metric in ("flops", "params"):
        costs = model_costs(encoder, f"keep_{metric}", SEQ_LEN)
        assert costs.dense == counted(encoder, metric)
        assert costs == UnitCosts.from_shape(shape_record(encoder.model), metric, SEQ_LEN)
        assert costs.kv_heads == (0 if arch == "modernbert" else KV_HEADS)
    if arch == "modernbert":  # a gated FFN without biases: not BERT's 4·d FLOPs and 2·d + 1 parameters
        assert model_costs(encoder, "keep_flops", SEQ_LEN).neuron == 2 * 3 * HIDDEN
        assert model_costs(encoder, "keep_params", SEQ_LEN).neuron == 3 * HIDDEN
