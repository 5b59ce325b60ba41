"""Layer-wise distillation (layer_weight, layer_map): zero for an identical student, the masked MSE of
mapped hidden states otherwise, refused for another tokenizer or width, layer maps parsed strictly."""

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.distill import Distill
from sparsecse.objectives.layer_map import parse_layer_map
from tests.tiny import SENTENCES, make_tiny_model_dir
from sparsecse.shrinking.shrink import ShrinkConfig


def student_of(model_dir):
    student = SentenceEncoder.load(model_dir, pooling="mean", device="cpu")
    student.eval()
    return student


def test_layer_loss_is_zero_for_a_student_identical_to_its_teacher(tiny_bert_dir):
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(tiny_bert_dir), layer_weight=1.0)
    objective.teacher.pooling = "mean"
    assert objective.layer_pairs == [(1, 1), (2, 2)]
    out = objective(student.tokenize(SENTENCES[:6]))
    assert float(out.logs["layer_loss"]) == pytest.approx(0.0, abs=1e-10)
    assert float(out.loss.detach()) == pytest.approx(0.0, abs=1e-10)


def test_layer_loss_is_the_masked_mse_of_the_mapped_hidden_states(tiny_bert_dir, tmp_path):
    teacher_dir = make_tiny_model_dir(tmp_path / "deep", "bert", layers=4, seed=2)
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(teacher_dir), layer_weight=0.5, layer_map="0:0/2:3")
    batch = student.tokenize(SENTENCES[:5])  # sentences of different lengths: padding must not count
    out = objective(batch)
    with torch.no_grad():
        s = student.model(**batch, output_hidden_states=True).hidden_states
        t = objective.teacher.model(**batch, output_hidden_states=True).hidden_states
        keep = batch["attention_mask"].bool()
        expected = (((s[0] - t[0])[keep] ** 2).mean() + ((s[2] - t[3])[keep] ** 2).mean()) / 2
        distill = ((student(**batch) - objective.teacher(**batch)) ** 2).mean()
    assert float(out.logs["layer_loss"]) == pytest.approx(float(expected), rel=1e-5) and out.logs["layer_loss"] > 0
    assert float(out.loss.detach()) == pytest.approx(float(distill + 0.5 * expected), rel=1e-5)
    out.loss.backward()
    assert student.model.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in objective.teacher.parameters())


def test_layer_loss_on_a_shrunk_student_uses_the_identity_map(tiny_bert_dir, tmp_path):
    from sparsecse.shrinking.shrink import shrink
    from tests.helpers import make_mask

    mask_path, _ = make_mask(tmp_path, tiny_bert_dir, pooling="mean")
    shrink(tiny_bert_dir, mask_path, tmp_path / "small", config=ShrinkConfig(pooling="mean"))
    student = student_of(tmp_path / "small")
    objective = Distill(student, layer_weight=1.0)  # the teacher comes from the lineage
    assert objective.layer_pairs == [(1, 1), (2, 2)]
    out = objective(student.tokenize(SENTENCES[:4]))
    assert out.logs["layer_loss"] > 0 and torch.isfinite(out.loss)


def test_layer_loss_refuses_another_tokenizer_or_width(tiny_bert_dir, tmp_path):
    mpnet = make_tiny_model_dir(tmp_path / "mpnet", "mpnet", pooling="mean")  # same width, MPNet tokenizer
    student = student_of(tiny_bert_dir)
    Distill(student, teacher=str(mpnet))  # the embedding loss alone is fine
    with pytest.raises(SparseCSEError, match="needs the student's tokenizer; the teacher .* tokenizes differently"):
        Distill(student, teacher=str(mpnet), layer_weight=1.0)
    wide = make_tiny_model_dir(tmp_path / "wide", "bert", hidden=48)
    with pytest.raises(SparseCSEError, match="same hidden width; the teacher .* has 48, the student 32"):
        Distill(student, teacher=str(wide), layer_weight=1.0, teacher_dim="projection")
    with pytest.raises(SparseCSEError, match="only with layer_weight > 0"):
        Distill(student, teacher=str(tiny_bert_dir), layer_map="1:1")


def test_a_student_with_removed_layers_learns_each_kept_layer_from_its_source(tmp_path):
    """Teacher layers 1..4; the student kept source layers 0, 2, 3 (1-based 1, 3, 4): auto maps them to the
    teacher layers they were cut from, skipping the removed one. Its first layer is the teacher's, so that
    pair's loss is 0 and the next pair's is not."""
    from sparsecse.pruning.masks import Mask
    from sparsecse.shrinking.shrink import shrink

    teacher_dir = make_tiny_model_dir(tmp_path / "deep", "bert", layers=4, init_range=0.2, pooling="mean")
    shrink(teacher_dir, Mask.full(4, 4, 48).without_layers([1]), tmp_path / "small",
           config=ShrinkConfig(pooling="mean", align_ffn=1))
    student = student_of(tmp_path / "small")
    assert (student.config.kept_layers, student.config.source_layers) == ([0, 2, 3], 4)
    objective = Distill(student, layer_weight=1.0)  # the teacher comes from the lineage: the 4-layer source
    assert objective.layer_pairs == [(1, 1), (2, 3), (3, 4)]
    batch = student.tokenize(SENTENCES[:5])
    with torch.no_grad():
        hidden = objective._student_hidden(batch)[1]
    objective.layer_pairs = [(1, 1)]
    assert float(objective.layer_loss(hidden, batch)) == pytest.approx(0.0, abs=1e-10)
    objective.layer_pairs = [(2, 3)]
    assert float(objective.layer_loss(hidden, batch)) > 1e-3
    assert parse_layer_map("auto", 3, 8, ([1, 3, 4], 4)) == [(1, 2), (2, 6), (3, 8)]  # a teacher twice as deep
    assert parse_layer_map("1:2", 3, 4, ([1, 3, 4], 4)) == [(1, 2)]  # explicit pairs name the student's own layers


def test_layer_maps():
    assert parse_layer_map("auto", 3, 6) == [(1, 2), (2, 4), (3, 6)]
    assert parse_layer_map("auto", 6, 6) == [(i, i) for i in range(1, 7)]
    assert parse_layer_map("auto", 6, 3) == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 3)]
    assert parse_layer_map("0:0/1:3; 2:6", 3, 6) == [(0, 0), (1, 3), (2, 6)]


@pytest.mark.parametrize("spec,message", [
    ("1-2", "not of the form STUDENT_LAYER:TEACHER_LAYER"),
    ("a:b", "not of the form"),
    ("1:7", r"out of range: the student has layers 0..3 and the teacher 0..6"),
    ("4:1", "out of range"),
    ("-1:1", "out of range"),
    ("1:2/1:3", "maps student layer 1 twice"),
    (" / ", "layer_map is empty"),
])
def test_bad_layer_maps_are_refused(spec, message):
    with pytest.raises(SparseCSEError, match=message):
        parse_layer_map(spec, 3, 6)


@pytest.mark.parametrize("arch", ["modernbert", "qwen3", "gemma3_text"])
def test_the_layer_map_of_a_student_with_removed_layers_holds_in_todays_families(arch, tmp_path):
    """The hidden states the map pairs are the same layers' in every family: the student's first layer is the
    teacher's (loss 0), its embeddings too."""
    from sparsecse.pruning.masks import Mask
    from sparsecse.shrinking.shrink import shrink
    from tests.tiny_modern import make_modern_model_dir

    teacher_dir = make_modern_model_dir(tmp_path / arch, arch, layers=4)
    shrink(teacher_dir, Mask.for_model(student_of(teacher_dir).model).without_layers([1]), tmp_path / "small",
           config=ShrinkConfig(pooling="mean", align_ffn=1))
    student = student_of(tmp_path / "small")
    objective = Distill(student, teacher=str(teacher_dir), layer_weight=1.0)
    assert objective.layer_pairs == [(1, 1), (2, 3), (3, 4)]
    batch = student.tokenize(SENTENCES[:5])
    with torch.no_grad():
        hidden = objective._student_hidden(batch)[1]
        for pair, zero in (((0, 0), True), ((1, 1), True), ((2, 3), False)):
            objective.layer_pairs = [pair]
            assert (float(objective.layer_loss(hidden, batch)) < 1e-10) == zero, pair
