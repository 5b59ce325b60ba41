"""The distill objective: zero loss for an identical student, cached teacher, refused mismatches."""

import json

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.distill import Distill
from sparsecse.objectives.registry import get_objective
from sparsecse.training import rewind, train
from tests.helpers import make_mask, quick
from tests.tiny import SENTENCES, make_tiny_model_dir
from sparsecse.shrinking.shrink import ShrinkConfig


def student_of(model_dir):
    return SentenceEncoder.load(model_dir, pooling="mean", device="cpu")


def test_registered_by_name():
    assert get_objective("distill") is Distill


@pytest.mark.parametrize("loss", ["mse", "cosine"])
def test_loss_is_zero_for_a_student_identical_to_its_teacher(tiny_bert_dir, loss):
    student = student_of(tiny_bert_dir)
    student.eval()  # no dropout: the student computes exactly what the teacher does
    objective = Distill(student, teacher=str(tiny_bert_dir), loss=loss)
    objective.teacher.pooling = "mean"
    out = objective(student.tokenize(SENTENCES[:6]))
    assert float(out.loss.detach()) == pytest.approx(0.0, abs=1e-6)


def test_loss_is_the_mse_of_the_embeddings_and_has_a_gradient(tiny_bert_dir, tmp_path):
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=5)
    student = student_of(other)
    student.eval()
    objective = Distill(student, teacher=str(tiny_bert_dir))
    objective.teacher.pooling = "mean"
    batch = student.tokenize(SENTENCES[:5])
    out = objective(batch)
    with torch.no_grad():
        expected = ((student(**batch) - objective.teacher(**batch)) ** 2).mean()
    loss = float(out.loss.detach())
    assert loss == pytest.approx(float(expected), rel=1e-5) and loss > 0
    out.loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in student.parameters())
    assert all(p.grad is None for p in objective.teacher.parameters())


def test_teacher_embeds_each_sentence_once(tiny_bert_dir):
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(tiny_bert_dir))
    rows = []
    original = objective.teacher.forward
    objective.teacher.forward = lambda **kw: (rows.append(kw["input_ids"].shape[0]), original(**kw))[1]
    objective(student.tokenize(SENTENCES[:4]))
    objective(student.tokenize(SENTENCES[:4]))  # a second epoch over the same batch
    objective(student.tokenize(SENTENCES[2:7] + SENTENCES[6:7]))  # 3 new sentences, one of them twice
    assert rows == [4, 3] and objective.teacher_rows == 7


def test_simcse_weight_adds_the_contrastive_loss(tiny_bert_dir):
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(tiny_bert_dir), simcse_weight=0.5)
    out = objective(student.tokenize(SENTENCES[:6]))
    assert "simcse_loss" in out.logs
    assert float(out.loss.detach()) == pytest.approx(float(out.logs["distill_loss"]) + 0.5 * float(out.logs["simcse_loss"]),
                                                         rel=1e-5)  # figures are 0-dim tensors (no sync per step)
    assert [type(m).__name__ for m in objective.trainable_extra_modules()] == ["SimCSE"]


def test_teacher_of_another_size_or_tokenizer_is_refused_without_its_remedy(tiny_bert_dir, tmp_path):
    wider = make_tiny_model_dir(tmp_path / "wide", "bert", hidden=48, heads=4)
    with pytest.raises(SparseCSEError, match="embeds in 48 dimensions but the student in 32"):
        Distill(student_of(tiny_bert_dir), teacher=str(wider))
    other_tok = make_tiny_model_dir(tmp_path / "tok", "bert")
    vocab = (other_tok / "vocab.txt").read_text().splitlines()
    from transformers import BertTokenizerFast

    shuffled = {t: i for i, t in enumerate(reversed(vocab))}
    BertTokenizerFast(vocab=shuffled, do_lower_case=True).save_pretrained(other_tok)
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(other_tok))  # fine with the sentences: targets by text
    with pytest.raises(SparseCSEError, match="tokenizes differently"):  # token ids alone do not fit it
        objective(student.tokenize(SENTENCES[:3]))


@pytest.mark.parametrize("params,message", [
    (dict(loss="l1"), "loss must be one of mse, cosine"),
    (dict(simcse_weight=-1), "simcse_weight must be zero or positive"),
    (dict(), "needs a teacher"),
])
def test_bad_parameters(tiny_bert_dir, params, message):
    if "loss" in params or "simcse_weight" in params:
        params["teacher"] = str(tiny_bert_dir)
    with pytest.raises(SparseCSEError, match=message):
        Distill(student_of(tiny_bert_dir), **params)


def test_rewind_distills_from_the_scored_model_and_refuses_a_bad_teacher_before_training(
        tiny_bert_dir, corpus, tmp_path):  # noqa: F811
    mask_path, _ = make_mask(tmp_path, tiny_bert_dir, pooling="mean")
    result = rewind(mask_path, corpus, tmp_path / "rewound", objective="distill", **quick(max_steps=3))
    params = json.loads((tmp_path / "rewound" / "manifest.json").read_text())["params"]["objective_params"]
    assert params["teacher"] == str(tiny_bert_dir) and result.steps == 3
    wider = make_tiny_model_dir(tmp_path / "wide", "bert", hidden=48)
    with pytest.raises(SparseCSEError, match="same embedding size"):
        train(tiny_bert_dir, corpus, tmp_path / "t", objective="distill", objective_args=f"teacher={wider}",
              **quick(max_steps=2))
    assert not (tmp_path / "t").exists()


def test_train_on_a_shrunk_model_takes_the_teacher_from_its_lineage(tiny_bert_dir, tmp_path):
    from sparsecse.shrinking.shrink import shrink

    mask_path, _ = make_mask(tmp_path, tiny_bert_dir, pooling="mean")
    shrink(tiny_bert_dir, mask_path, tmp_path / "small", config=ShrinkConfig(pooling="mean"))
    objective = Distill(student_of(tmp_path / "small"))
    assert objective.params["teacher"] == str(tiny_bert_dir)


def test_on_demand_targets_are_the_corpus_table_s_and_only_the_batches_drawn_are_embedded(tiny_bert_dir, tmp_path):
    import numpy as np

    sentences = [f"sentence number {i} of the corpus" for i in range(40)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n")
    bulk, lazy = (Distill(student_of(tiny_bert_dir), teacher=str(tiny_bert_dir), teacher_cache="off")
                  for _ in range(2))
    bulk.prepare_corpus(sentences, corpus, 32, "cpu", show_progress=False)
    lazy.on_demand = True  # as training sets it under a time limit
    lazy.prepare_corpus(sentences, corpus, 32, "cpu", show_progress=False)
    assert lazy._table is None and lazy.teacher_info["on_demand"] and lazy.teacher_rows == 0
    drawn = sentences[3:11]
    batch = lazy.encoder.tokenize(drawn)
    on_demand, table = lazy.targets(batch, drawn), bulk.targets(batch, drawn)
    assert np.allclose(on_demand.numpy(), table.numpy(), atol=1e-5)
    assert lazy.teacher_rows == len(drawn)  # the batch drawn, not the 40 sentences of the corpus
    lazy.targets(batch, drawn)
    assert lazy.teacher_rows == len(drawn)  # a second epoch embeds nothing again
