"""The plug-in objectives (DiffCSE, InfoCSE, noise negatives, input noise, weight perturbation) on tiny
random models: losses, gradients, frozen parts, masks, shrunk models and errors."""

from __future__ import annotations

import math

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts
from sparsecse.pruning.masks import Mask
from sparsecse.objectives.base import ObjectiveOutput
from sparsecse.objectives.masked_lm import choose_positions, corrupt
from sparsecse.objectives.noise_negatives import sample_noise_negatives
from sparsecse.objectives.registry import build_objective, get_objective
from sparsecse.shrinking.surgery import shrink_encoder
from tests.tiny import SENTENCES, make_tiny_model_dir, make_tokenizer
from tests.helpers import save_mlm as _save_mlm

# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is fastest and does not spin against other jobs on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def mlm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlms")
    return {
        "bert": _save_mlm(root / "bert"),
        "distilbert": _save_mlm(root / "distilbert", arch="distilbert", layers=2),
        "wide": _save_mlm(root / "wide", hidden=48),
        "other_vocab": _save_mlm(root / "other_vocab", vocab_from_tokenizer=False),
    }


@pytest.fixture(scope="module")
def mean_pooled_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_mean"), "bert", pooling="mean")


@pytest.fixture(scope="module")
def learnable_dir(tmp_path_factory):
    """A tiny BERT initialised wider (std 0.2, not 0.02) so its sentences differ beyond dropout noise;
    at the usual init every sentence gets nearly the same [CLS] and SimCSE can only collapse."""
    from transformers import BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny_learnable")
    tok = make_tokenizer(out)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=72, initializer_range=0.2)).save_pretrained(out)
    return out


def load_encoder(model_dir) -> SentenceEncoder:
    encoder = SentenceEncoder.load(model_dir, device="cpu")
    encoder.train()
    return encoder


def batch_of(encoder, n=8):
    return encoder.tokenize(SENTENCES[:n])


# name -> params (mlm paths filled in by `params_for`)
VARIANTS = {
    "diffcse": {"generator": "bert"},
    "infocse": {"mlm": "bert", "frozen_layers": 2, "extra_layers": 1},
    "noise_negatives": {},
    "input_noise": {},
    "input_noise/gaussian_dropout": {"noise": "gaussian_dropout"},
    "weight_perturbation": {},
    "weight_perturbation/fgsm": {"fgsm": True},
}


def params_for(variant: str, mlm_dirs, **overrides) -> tuple[str, dict]:
    name = variant.split("/")[0]
    params = dict(VARIANTS[variant])
    for key in ("generator", "mlm"):
        if key in params:
            params[key] = str(mlm_dirs[params[key]])
    params.update(overrides)
    return name, params


def build(variant, encoder, mlm_dirs, **overrides):
    name, params = params_for(variant, mlm_dirs, **overrides)
    return build_objective(name, encoder, **params)


def trainable(encoder, objective):
    extra = [p for m in objective.trainable_extra_modules() for p in m.parameters() if p.requires_grad]
    return [p for p in encoder.parameters() if p.requires_grad] + extra


def train_steps(encoder, objective, batch, steps, lr=1e-3):
    """The training loop's contract: backward, after_backward, optimizer step. Returns the outputs."""
    optimizer = torch.optim.Adam(trainable(encoder, objective), lr=lr)
    objective.train()
    outputs = []
    for _ in range(steps):
        out = objective(batch)
        out.loss.backward()
        objective.after_backward()
        optimizer.step()
        optimizer.zero_grad()
        outputs.append(ObjectiveOutput(out.loss.detach(), out.logs))
    return outputs


# ---------------------------------------------------------------------------------------------- every objective


def seeded_loss(objective, batch, seed=123) -> float:
    """The objective's loss with fixed dropout masks and random draws: comparable across training."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return float(objective(batch).loss)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_loss_is_finite_and_falls_when_overfitting_a_batch(variant, learnable_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(learnable_dir)
    objective = build(variant, encoder, mlm_dirs)
    batch = encoder.tokenize(SENTENCES)
    before = seeded_loss(objective, batch)
    outputs = train_steps(encoder, objective, batch, steps=20, lr=3e-3)
    after = seeded_loss(objective, batch)
    assert all(math.isfinite(float(o.loss)) for o in outputs)
    assert all(math.isfinite(v) for o in outputs for v in o.logs.values())
    assert after < 0.7 * before, (before, after)


@pytest.mark.parametrize("variant", ["diffcse", "infocse", "input_noise", "weight_perturbation/fgsm"])
def test_objectives_run_on_roberta_and_distilbert_encoders(variant, tiny_roberta_dir, tmp_path, mlm_dirs):
    distil_dir = make_tiny_model_dir(tmp_path / "distil", "distilbert")
    for model_dir in (tiny_roberta_dir, distil_dir):
        torch.manual_seed(0)
        encoder = load_encoder(model_dir)
        objective = build(variant, encoder, mlm_dirs)
        outputs = train_steps(encoder, objective, batch_of(encoder), steps=2)
        assert all(math.isfinite(float(o.loss)) for o in outputs)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_registry_builds_each_objective_by_name(variant, tiny_bert_dir, mlm_dirs):
    name, params = params_for(variant, mlm_dirs)
    cls = get_objective(name)
    assert cls.name == name and cls.description and cls.paper
    assert set(params) <= set(cls.defaults)
    objective = build_objective(name, load_encoder(tiny_bert_dir), **params)
    assert type(objective) is cls


# ---------------------------------------------------------------------------------------------- DiffCSE


def test_diffcse_edits_only_masked_positions_with_the_generators_argmax(tiny_bert_dir, mlm_dirs):
    encoder = load_encoder(tiny_bert_dir)
    objective = build("diffcse", encoder, mlm_dirs, mask_ratio=0.3)
    batch = encoder.tokenize(SENTENCES * 4)
    ids, attention = batch["input_ids"], batch["attention_mask"]

    torch.manual_seed(5)
    edited, replaced, masked = objective.edit(ids, attention)
    torch.manual_seed(5)  # replay the same positions and ask the full masked LM directly
    same_positions = choose_positions(ids, attention, encoder.tokenizer.all_special_ids, 0.3)
    corrupted = corrupt(ids, same_positions, encoder.tokenizer.mask_token_id, len(encoder.tokenizer), False)
    with torch.no_grad():
        argmax = objective.frozen_parts()["generator"](input_ids=corrupted, attention_mask=attention).logits.argmax(-1)

    assert torch.equal(masked, same_positions)
    assert torch.equal(edited[masked], argmax[masked])
    assert torch.equal(edited[~masked], ids[~masked])
    assert torch.equal(replaced, edited != ids)
    special = torch.isin(ids, torch.tensor(encoder.tokenizer.all_special_ids))
    assert not masked[special | ~attention.bool()].any()
    real = attention.bool() & ~special
    assert 0.2 < masked[real].float().mean() < 0.4
    assert replaced.any()


def test_diffcse_rtd_loss_averages_over_every_batch_by_length_position(tiny_bert_dir, mlm_dirs):
    """As the published code: cross-entropy over all B x T positions, padding and position 0 included
    with label "original" (the scale λ = 0.005 was tuned on), not over real tokens only."""
    encoder = load_encoder(tiny_bert_dir)
    objective = build("diffcse", encoder, mlm_dirs).eval()
    encoder.eval()
    batch = batch_of(encoder)
    ids, attention = batch["input_ids"], batch["attention_mask"]
    assert not attention.bool().all()  # the batch has padding
    known = torch.zeros_like(ids, dtype=torch.bool)
    known[:, 2] = True
    objective.edit = lambda i, a: (ids, known, known)
    h = objective.project(encoder(**batch))
    loss, logs = objective.rtd_loss(h, batch)
    log_probs = torch.log_softmax(objective.rtd_logits(h, ids, batch), -1)
    expected = -log_probs.gather(-1, known.long().unsqueeze(-1)).sum() / ids.numel()
    assert torch.allclose(loss, expected)
    real = attention.bool()
    assert logs["replaced_frac"] == pytest.approx(float(known[real].float().mean()))


def test_diffcse_puts_h_straight_into_position_0_of_the_embedding_output(tiny_bert_dir, mlm_dirs):
    """The first transformer layer reads h itself at position 0 (no position/type embedding, LayerNorm
    or dropout on it) and the discriminator's own embedding output elsewhere."""
    encoder = load_encoder(tiny_bert_dir)
    objective = build("diffcse", encoder, mlm_dirs).eval()
    batch = batch_of(encoder)
    h = torch.randn(batch["input_ids"].shape[0], encoder.dim)
    seen = []
    first_layer = objective.discriminator.encoder.layer[0]
    handle = first_layer.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    try:
        objective.rtd_logits(h, batch["input_ids"], batch)
    finally:
        handle.remove()
    plain = objective.discriminator.embeddings(input_ids=batch["input_ids"])
    assert torch.equal(seen[0][:, 0], h)
    assert torch.allclose(seen[0][:, 1:], plain[:, 1:])
    assert not objective.discriminator.embeddings._forward_hooks  # the hook is gone afterwards


def test_diffcse_gradient_reaches_encoder_through_h_and_generator_stays_untouched(tiny_bert_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(tiny_bert_dir)
    objective = build("diffcse", encoder, mlm_dirs)
    generator = objective.frozen_parts()["generator"]
    before = {k: v.clone() for k, v in generator.state_dict().items()}
    batch = batch_of(encoder)

    h = objective.project(encoder(**batch))
    h.retain_grad()
    loss, _ = objective.rtd_loss(h, batch)
    loss.backward()
    assert h.grad is not None and h.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())
    assert all(p.grad is None and not p.requires_grad for p in generator.parameters())

    train_steps(encoder, objective, batch, steps=3)
    after = generator.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not generator.training
    # train-only parts: the discriminator and heads are trained; the generator is neither trained nor saved
    names = {n.split(".")[0] for n, _ in objective.named_parameters()}
    assert names == {"mlp", "discriminator", "rtd_head"}
    assert not any(k.startswith("generator") for k in objective.state_dict())


def test_diffcse_discriminator_starts_from_the_dense_pretrained_checkpoint(tiny_bert_dir, mlm_dirs):
    """The published code loads the discriminator from the pretrained model: a rewound (shrunk,
    changed) encoder still gets the full-size weights of the checkpoint it was loaded from."""
    dense = dict(SentenceEncoder.load(tiny_bert_dir, device="cpu").model.named_parameters())
    encoder = load_encoder(tiny_bert_dir)
    with torch.no_grad():
        encoder.model.embeddings.word_embeddings.weight.add_(1.0)  # the encoder has moved on
    shrink_encoder(encoder, _example_mask(encoder.model))
    objective = build("diffcse", encoder, mlm_dirs)
    disc = dict(objective.discriminator.named_parameters())
    assert disc.keys() == dense.keys() and not hasattr(objective.discriminator.config, "kept_heads")
    assert all(torch.equal(disc[k], dense[k]) and disc[k].requires_grad for k in dense)
    own = dict(encoder.model.named_parameters())
    assert all(disc[k].data_ptr() != own[k].data_ptr() for k in own if k in disc)
    # an explicit discriminator= checkpoint is used instead; one of another width is refused
    other = build("diffcse", load_encoder(tiny_bert_dir), mlm_dirs, discriminator=str(tiny_bert_dir))
    assert torch.equal(other.discriminator.embeddings.word_embeddings.weight, dense["embeddings.word_embeddings.weight"])
    with pytest.raises(SparseCSEError, match="vocabulary and width"):
        build("diffcse", load_encoder(tiny_bert_dir), mlm_dirs, discriminator=str(mlm_dirs["wide"]))


def test_diffcse_discriminator_depends_on_the_sentence_embedding(tiny_bert_dir, mlm_dirs):
    encoder = load_encoder(tiny_bert_dir)
    objective = build("diffcse", encoder, mlm_dirs).eval()
    batch = batch_of(encoder)
    h = torch.randn(batch["input_ids"].shape[0], encoder.dim)
    first = objective.rtd_logits(h, batch["input_ids"], batch)
    second = objective.rtd_logits(torch.randn_like(h), batch["input_ids"], batch)  # (a shift would vanish in LayerNorm)
    assert not torch.allclose(first[:, 1:], second[:, 1:])


# ---------------------------------------------------------------------------------------------- InfoCSE


def test_infocse_encoder_gradient_flows_only_through_cls(mean_pooled_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(mean_pooled_dir)
    objective = build("infocse", encoder, mlm_dirs, mlm_weight=1.0)
    batch = batch_of(encoder)
    hidden = encoder.transformer_outputs(**batch).last_hidden_state
    hidden.retain_grad()
    loss, logs = objective.mlm_loss(hidden[:, 0], batch)
    loss.backward()
    assert logs["mlm_loss"] > 0
    assert hidden.grad[:, 0].abs().sum() > 0
    assert torch.count_nonzero(hidden.grad[:, 1:]) == 0
    assert all(p.grad is None and not p.requires_grad for p in objective.lower.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in objective.upper.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


def test_infocse_full_forward_sends_the_mlm_gradient_only_to_cls(mean_pooled_dir, mlm_dirs):
    """Same seed, λ = 0 vs λ = 1: the difference of the two gradients on the encoder's last hidden
    states (all from the MLM term) is non-zero at [CLS] only, and in both dropout views (the published
    code reconstructs both); the mean-pooled SimCSE term touches all positions."""
    encoder = load_encoder(mean_pooled_dir)
    objective = build("infocse", encoder, mlm_dirs, sentence_vector="cls").eval()
    encoder.eval()
    captured = []

    def keep_hidden(module, args, out):
        out.last_hidden_state.retain_grad()
        captured.append(out.last_hidden_state)

    handle = encoder.model.register_forward_hook(keep_hidden)
    grads = []
    for weight in (0.0, 1.0):
        objective.mlm_weight = weight
        captured.clear()
        torch.manual_seed(3)
        objective(batch_of(encoder)).loss.backward()
        grads.append(captured[0].grad)
    handle.remove()
    n = grads[0].shape[0] // 2
    difference = grads[1] - grads[0]
    assert grads[0][:, 1:].abs().sum() > 0
    assert difference[:n, 0].abs().sum() > 0 and difference[n:, 0].abs().sum() > 0
    assert torch.allclose(difference[:, 1:], torch.zeros_like(difference[:, 1:]), atol=1e-7)


def test_infocse_sentence_vector_follows_the_encoders_pooling(tiny_bert_dir, mean_pooled_dir, mlm_dirs):
    assert build("infocse", load_encoder(tiny_bert_dir), mlm_dirs).sentence_vector == "cls"
    assert build("infocse", load_encoder(mean_pooled_dir), mlm_dirs).sentence_vector == "pooled"
    encoder = load_encoder(mean_pooled_dir)
    objective = build("infocse", encoder, mlm_dirs, sentence_vector="pooled", mask_ratio=0.9)
    torch.manual_seed(0)  # (a sentence with no masked token would get no gradient at all)
    batch = batch_of(encoder)
    outputs = encoder.transformer_outputs(**batch)
    outputs.last_hidden_state.retain_grad()
    loss, _ = objective.mlm_loss(encoder.pool(outputs, batch["attention_mask"]), batch)
    loss.backward()
    grad = outputs.last_hidden_state.grad
    real = batch["attention_mask"].bool()
    assert (grad.abs().sum(-1)[real] > 0).all() and torch.count_nonzero(grad[~real]) == 0


def test_infocse_mlm_loss_falls_and_frozen_layers_stay_untouched(learnable_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(learnable_dir)
    objective = build("infocse", encoder, mlm_dirs, mlm_weight=1.0, mask_ratio=0.4)
    lower_before = {k: v.clone() for k, v in objective.lower.state_dict().items()}
    batch = encoder.tokenize(SENTENCES)

    def seeded_mlm_loss():
        torch.manual_seed(7)
        with torch.no_grad():
            return objective(batch).logs["mlm_loss"]

    before = seeded_mlm_loss()
    train_steps(encoder, objective, batch, steps=20, lr=3e-3)
    after = seeded_mlm_loss()
    assert after < 0.85 * before, (before, after)
    assert all(torch.equal(lower_before[k], v) for k, v in objective.lower.state_dict().items())
    assert {n.split(".")[0] for n, _ in objective.named_parameters()} == {"mlp", "upper", "mlm_head"}


def test_infocse_builds_its_layers_from_the_masked_lm(tiny_bert_dir, mlm_dirs):
    from sparsecse.objectives.masked_lm import layer_stack

    objective = build("infocse", load_encoder(tiny_bert_dir), mlm_dirs, frozen_layers=2, extra_layers=2)
    assert len(layer_stack(objective.lower)[0]) == 2
    assert len(layer_stack(objective.upper)[0]) == 2
    # the extra layers start as copies of the masked LM's top two (layers 1 and 2 of 3), own storage
    from transformers import AutoModelForMaskedLM

    mlm = AutoModelForMaskedLM.from_pretrained(mlm_dirs["bert"])
    top = mlm.bert.encoder.layer[1].attention.self.query.weight
    copied = layer_stack(objective.upper)[0][0].attention.self.query.weight
    assert torch.equal(top, copied)
    lower_layer_1 = layer_stack(objective.lower)[0][1].attention.self.query.weight
    assert copied.data_ptr() != lower_layer_1.data_ptr() and copied.requires_grad and not lower_layer_1.requires_grad


def _loss_and_encoder_gradient(encoder, objective, batch, seed=0):
    """One forward and backward with fixed dropout masks and draws: the output and the encoder's gradient."""
    encoder.zero_grad()
    torch.manual_seed(seed)
    out = objective(batch)
    out.loss.backward()
    return out, torch.cat([p.grad.flatten() for p in encoder.parameters() if p.grad is not None])


# (objective, its extra term's weight, the term's log, other parameters): DiffCSE's replaced-token detection with a
# DistilBERT generator, InfoCSE's masked-LM reconstruction with a DistilBERT and with a wider masked LM
EXTRA_TERMS = [("diffcse", "lambda_weight", "rtd_loss", {"generator": "distilbert"}),
               ("infocse", "mlm_weight", "mlm_loss", {"mlm": "distilbert", "frozen_layers": 1, "extra_layers": 1}),
               ("infocse", "mlm_weight", "mlm_loss", {"mlm": "wide", "frozen_layers": 1, "extra_layers": 1})]


@pytest.mark.parametrize("variant,weight,term,params", EXTRA_TERMS)
def test_the_extra_term_is_in_the_loss_and_its_gradient_reaches_the_encoder(variant, weight, term, params,
                                                                          tiny_bert_dir, mlm_dirs):
    """The loss is the SimCSE loss plus weight x the extra term, and the term's gradient reaches the encoder: with
    the term's weight 1 the encoder's gradient differs from weight 0's (same dropout masks and draws), which a
    term left out of the graph (computed but detached) would not give."""
    params = {k: str(mlm_dirs[v]) if k in ("generator", "mlm") else v for k, v in params.items()}
    encoder = load_encoder(tiny_bert_dir)
    batch = batch_of(encoder)
    runs = {}
    for w in (1.0, 0.0):
        torch.manual_seed(0)
        objective = build(variant, encoder, mlm_dirs, **params, **{weight: w})
        runs[w] = _loss_and_encoder_gradient(encoder, objective, batch)
    (with_term, grad_with), (without, grad_without) = runs[1.0], runs[0.0]
    assert with_term.logs["simcse_loss"] == pytest.approx(without.logs["simcse_loss"], rel=1e-6)
    assert with_term.logs[term] > 0
    assert float(with_term.loss) == pytest.approx(with_term.logs["simcse_loss"] + with_term.logs[term], rel=1e-5)
    assert float(without.loss) == pytest.approx(without.logs["simcse_loss"], rel=1e-6)
    assert not torch.allclose(grad_with, grad_without, rtol=1e-3, atol=1e-7)
    if params.get("mlm") == str(mlm_dirs["wide"]):  # a wider masked LM is reached through a learned map
        assert objective.sentence_map is not None


def test_infocse_with_distilbert_mlm_and_a_wider_mlm_trains(tiny_bert_dir, mlm_dirs):
    for key in ("distilbert", "wide"):
        torch.manual_seed(0)
        encoder = load_encoder(tiny_bert_dir)
        objective = build("infocse", encoder, mlm_dirs, mlm=str(mlm_dirs[key]), frozen_layers=1, extra_layers=1)
        assert (objective.sentence_map is not None) == (key == "wide")
        outputs = train_steps(encoder, objective, batch_of(encoder), steps=2)
        assert all(math.isfinite(float(o.loss)) for o in outputs)


# ---------------------------------------------------------------------------------------------- noise negatives


@pytest.mark.parametrize("distribution", ["mu_sigma", "zero_one", "mu_one", "zero_sigma"])
def test_noise_negatives_have_the_batchs_mean_and_spread(distribution):
    torch.manual_seed(0)
    anchors = torch.randn(64, 16) * torch.linspace(0.1, 2.0, 16) + torch.linspace(-3.0, 3.0, 16)
    noise = sample_noise_negatives(anchors, 40000, distribution)
    std, mean = torch.std_mean(anchors, dim=0)
    want_mean = mean if distribution.startswith("mu") else torch.zeros(16)
    want_std = std if distribution.endswith("sigma") else torch.ones(16)
    assert noise.shape == (40000, 16) and not noise.requires_grad
    assert torch.allclose(noise.mean(0), want_mean, atol=0.04 * want_std.max().item())
    assert torch.allclose(noise.std(0), want_std, rtol=0.03)


def test_noise_negatives_reduce_to_simcse_without_samples_and_add_negatives_with_them(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir)
    losses = {}
    for key, name, params in (("simcse", "simcse", {}), ("zero", "noise_negatives", {"num_samples": 0}),
                              ("some", "noise_negatives", {"num_samples": 32})):
        torch.manual_seed(0)
        objective = build_objective(name, encoder, **params)
        torch.manual_seed(1)
        losses[key] = objective(batch_of(encoder)).loss.item()
    assert losses["zero"] == pytest.approx(losses["simcse"], abs=1e-6)
    assert losses["some"] > losses["simcse"]


def test_noise_negatives_default_to_one_per_anchor(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir)
    out = build_objective("noise_negatives", encoder)(batch_of(encoder, 6))
    assert out.logs["noise_negatives"] == 6


# ---------------------------------------------------------------------------------------------- input noise


def test_input_noise_with_zero_sigma_equals_simcse_and_noise_changes_the_loss(tiny_model_dir):
    """Without dropout (eval) the noise is the only randomness: σ = 0 must give SimCSE's loss exactly,
    which also checks that the inputs_embeds path encodes like input_ids (RoBERTa positions included)."""
    encoder = load_encoder(tiny_model_dir)
    encoder.eval()
    losses = {}
    for key, name, params in (("simcse", "simcse", {}), ("zero", "input_noise", {"sigma": 0.0}),
                              ("dropout_zero", "input_noise", {"sigma": 0.0, "noise": "gaussian_dropout"}),
                              ("noisy", "input_noise", {"sigma": 0.5})):
        torch.manual_seed(0)
        objective = build_objective(name, encoder, **params).eval()
        losses[key] = objective(batch_of(encoder)).loss.item()
    assert losses["zero"] == pytest.approx(losses["simcse"], abs=1e-5)
    assert losses["dropout_zero"] == pytest.approx(losses["simcse"], abs=1e-5)
    assert losses["noisy"] != pytest.approx(losses["simcse"], abs=1e-4)


def test_input_noise_statistics():
    from sparsecse.objectives.input_noise import add_noise

    torch.manual_seed(0)
    base = torch.full((200, 50, 8), 2.0)
    added = add_noise(base, "gaussian", 0.01) - base
    multiplied = add_noise(base, "gaussian_dropout", 0.01) / base
    assert added.mean().abs() < 5e-4 and added.std().item() == pytest.approx(0.01, rel=0.03)
    assert (multiplied.mean() - 1).abs() < 5e-4 and multiplied.std().item() == pytest.approx(0.01, rel=0.03)


# ---------------------------------------------------------------------------------------------- weight perturbation


def test_weight_perturbation_moves_weights_uphill_and_restores_them_exactly(learnable_dir):
    torch.manual_seed(0)
    encoder = load_encoder(learnable_dir)
    encoder.eval()  # no dropout: the loss is a deterministic function of the weights
    objective = build_objective("weight_perturbation", encoder, gamma=0.01).eval()
    original = {id(p): p.detach().clone() for p in objective.perturbed_parameters()}
    out = objective(batch_of(encoder))
    assert objective.perturbed
    assert out.loss.item() > out.logs["clean_loss"]
    moved = [p for p in objective.perturbed_parameters() if not torch.equal(p, original[id(p)])]
    assert moved
    for p in moved:
        relative = (p.detach() - original[id(p)]).norm() / original[id(p)].norm()
        assert relative.item() == pytest.approx(0.01, rel=1e-3)
    out.loss.backward()
    objective.after_backward()
    assert not objective.perturbed
    assert all(torch.equal(p, original[id(p)]) for p in objective.perturbed_parameters())
    assert all(p.grad is not None for p in moved)


def test_weight_perturbation_with_fgsm_raises_the_loss_further(learnable_dir):
    losses = {}
    for fgsm in (False, True):
        torch.manual_seed(0)
        encoder = load_encoder(learnable_dir)
        encoder.eval()
        objective = build_objective("weight_perturbation", encoder, gamma=0.01, fgsm=fgsm,
                                    fgsm_epsilon=0.01).eval()
        out = objective(batch_of(encoder))
        objective.after_backward()
        losses[fgsm] = (out.logs["clean_loss"], out.loss.item())
    assert losses[False][0] == pytest.approx(losses[True][0])
    assert losses[True][1] > losses[False][1] > losses[False][0]


def test_weight_perturbation_with_zero_gamma_is_simcse(tiny_bert_dir):
    losses = []
    for name, params in (("simcse", {}), ("weight_perturbation", {"gamma": 0.0})):
        torch.manual_seed(0)
        encoder = load_encoder(tiny_bert_dir)
        encoder.eval()
        objective = build_objective(name, encoder, **params).eval()
        losses.append(objective(batch_of(encoder)).loss.item())
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)


def test_weight_perturbation_without_grad_is_plain_and_does_not_perturb(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir)
    objective = build_objective("weight_perturbation", encoder)
    with torch.no_grad():
        out = objective(batch_of(encoder))
    assert math.isfinite(out.loss.item()) and not objective.perturbed


# ---------------------------------------------------------------------------------------------- masks and shrinking


def _example_mask(model) -> Mask:
    mask = Mask.for_model(model)
    mask.head_mask[0, 1] = False
    mask.head_mask[1, 3] = False
    mask.neuron_mask[0, :10] = False
    mask.neuron_mask[1, 5:9] = False
    return mask


def _pruned_slices(model, mask):
    """Every weight slice that only a pruned unit uses: its gradient must be zero, its value fixed."""
    slices = []
    for part, heads, neurons in zip(layer_parts(model), mask.head_mask, mask.neuron_mask):
        for h in (~heads).nonzero().flatten().tolist():
            rows = slice(h * part.head_dim, (h + 1) * part.head_dim)
            slices += [(part.value.weight, (rows, slice(None))), (part.attn_out.weight, (slice(None), rows))]
        cut = (~neurons).nonzero().flatten()
        slices += [(part.ffn_in.weight, (cut, slice(None))), (part.ffn_out.weight, (slice(None), cut))]
    return slices


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_objectives_train_under_a_pruning_mask(variant, tiny_bert_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(tiny_bert_dir)
    mask = _example_mask(encoder.model)
    gates = mask.apply(encoder.model)
    try:
        objective = build(variant, encoder, mlm_dirs)
        batch = batch_of(encoder)
        slices = _pruned_slices(encoder.model, mask)
        before = [w[idx].detach().clone() for w, idx in slices]
        out = objective(batch)
        out.loss.backward()
        objective.after_backward()
        assert math.isfinite(out.loss.item())
        for w, idx in slices:
            assert torch.count_nonzero(w.grad[idx]) == 0
        optimizer = torch.optim.Adam(trainable(encoder, objective), lr=1e-2)
        optimizer.step()
        assert all(torch.equal(w[idx], b) for (w, idx), b in zip(slices, before))
        if variant == "diffcse":  # the train-only discriminator is a dense copy without the gates
            assert not any(m._forward_pre_hooks for m in objective.discriminator.modules())
    finally:
        gates.detach()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_objectives_train_a_physically_shrunk_encoder(variant, tiny_bert_dir, mlm_dirs):
    torch.manual_seed(0)
    encoder = load_encoder(tiny_bert_dir)
    shrink_encoder(encoder, _example_mask(encoder.model))
    objective = build(variant, encoder, mlm_dirs)
    outputs = train_steps(encoder, objective, batch_of(encoder), steps=3)
    assert all(math.isfinite(float(o.loss)) for o in outputs)
    if variant == "diffcse":  # the discriminator is the dense checkpoint the encoder was loaded from
        assert not hasattr(objective.discriminator.config, "kept_heads")


# ---------------------------------------------------------------------------------------------- frozen parts follow .to()


def test_frozen_parts_follow_dtype_moves_but_stay_out_of_training(tiny_bert_dir, mlm_dirs):
    encoder = load_encoder(tiny_bert_dir)
    objective = build("infocse", encoder, mlm_dirs)
    objective.train()
    assert not objective.lower.training
    objective.double()
    assert next(objective.lower.parameters()).dtype == torch.float64
    assert all(not any(p is q for q in objective.parameters()) for p in objective.lower.parameters())
    assert all(id(m) != id(objective.lower) for m in objective.trainable_extra_modules())


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name, params, words", [
    ("diffcse", {}, "generator"),
    ("infocse", {}, "mlm"),
    ("diffcse", {"generator": "{other_vocab}"}, "different vocabulary"),
    ("infocse", {"mlm": "{encoder}"}, "not a trained masked language model"),
    ("diffcse", {"generator": "/no/such/dir"}, "does not exist"),
    ("diffcse", {"generator": "{bert}", "mask_ratio": 1.5}, "mask_ratio"),
    ("infocse", {"mlm": "{bert}", "frozen_layers": 9}, "at most"),
    ("infocse", {"mlm": "{bert}", "extra_layers": 0}, "extra_layers"),
    ("infocse", {"mlm": "{bert}", "sentence_vector": "mean"}, "sentence_vector"),
    ("noise_negatives", {"distribution": "uniform"}, "distribution"),
    ("noise_negatives", {"num_samples": -1}, "num_samples"),
    ("input_noise", {"noise": "salt"}, "noise"),
    ("input_noise", {"sigma": "x"}, "sigma"),
    ("weight_perturbation", {"fgsm": "maybe"}, "fgsm"),
    ("weight_perturbation", {"gamma": -1}, "gamma"),
    ("noise_negatives", {"temprature": 0.1}, "no parameter"),
])
def test_bad_setups_fail_with_one_clear_sentence(name, params, words, tiny_bert_dir, mlm_dirs):
    paths = {"encoder": str(tiny_bert_dir), **{k: str(v) for k, v in mlm_dirs.items()}}
    params = {k: v.format(**paths) if isinstance(v, str) else v for k, v in params.items()}
    with pytest.raises(SparseCSEError, match=words) as info:
        build_objective(name, load_encoder(tiny_bert_dir), **params)
    assert "\n" not in str(info.value)
