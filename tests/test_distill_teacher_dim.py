"""distill from a teacher of another embedding size: a learned projection saved as a Dense module, or
the teacher reduced by PCA; teacher targets looked up by sentence from the up-front table."""

import json
import shutil

import numpy as np
import pytest
import torch

from sparsecse.data.corpus import read_corpus
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.distill import (Distill, least_squares_map, pca_components, procrustes_rotation,
                                          similarity_loss)
from sparsecse.training import train
from tests.helpers import quick
from tests.tiny import SENTENCES, make_mpnet_tokenizer, make_tiny_model_dir


def mapped_teacher(student_dir, out, dim=48, seed=3):
    """The student's own encoder followed by a fixed linear map to ``dim``: a teacher whose vectors a
    student with the right projection reproduces exactly."""
    enc = SentenceEncoder.load(student_dir, pooling="mean", device="cpu")
    torch.manual_seed(seed)
    enc.dense = torch.nn.Linear(enc.hidden_size, dim)
    enc.save(out)
    return out, enc.dense


def student_of(model_dir):
    student = SentenceEncoder.load(model_dir, pooling="mean", device="cpu")
    student.eval()
    return student


def test_a_saved_dense_module_loads_in_sparsecse_and_sentence_transformers(tiny_bert_dir, tmp_path):
    out, dense = mapped_teacher(tiny_bert_dir, tmp_path / "teacher")
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Dense"]
    loaded = SentenceEncoder.load(out, device="cpu")
    assert loaded.dim == 48 and loaded.hidden_size == 32
    ours = loaded.encode(SENTENCES[:5])
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(out), device="cpu")
    assert st.encode(["a man"]).shape == (1, 48)
    np.testing.assert_allclose(st.encode(SENTENCES[:5]), ours, atol=1e-5)
    plain = student_of(tiny_bert_dir).encode(SENTENCES[:5])
    with torch.no_grad():
        np.testing.assert_allclose(dense(torch.from_numpy(plain)).numpy(), ours, atol=1e-5)


def test_projection_loss_is_zero_for_a_student_that_reproduces_the_mapped_teacher(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher_dir, dense = mapped_teacher(tiny_bert_dir, tmp_path / "teacher")
    student = student_of(tiny_bert_dir)
    with pytest.raises(SparseCSEError, match="teacher_dim=projection|pca"):
        Distill(student, teacher=str(teacher_dir))
    objective = Distill(student, teacher=str(teacher_dir), teacher_dim="projection")
    assert student.dense is objective.projection and student.dim == 48
    assert [type(m).__name__ for m in objective.trainable_extra_modules()] == ["Linear"]
    batch = student.tokenize(SENTENCES[:6])
    assert float(objective(batch).loss.detach()) > 1e-4  # a fresh projection is not the teacher's map
    objective.projection.load_state_dict(dense.state_dict())
    assert float(objective(batch).loss.detach()) == pytest.approx(0.0, abs=1e-8)  # token-id path
    sentences = read_corpus(corpus)
    objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    texts = sentences[:8]
    out = objective(student.tokenize(texts, max_length=64), sentences=texts)  # looked up by sentence
    assert float(out.loss.detach()) == pytest.approx(0.0, abs=1e-8)
    assert objective.teacher_info["key"] and objective.teacher_info["teacher_dim"] == 48


def test_distilling_from_another_tokenizer_and_size_trains_and_saves_a_projected_student(
        tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher = make_tiny_model_dir(tmp_path / "mpnet", "mpnet", hidden=48, pooling="mean")
    result = train(tiny_bert_dir, corpus, tmp_path / "out", objective="distill", pooling="mean",
                   objective_args=f"teacher={teacher},teacher_dim=projection", **quick(max_steps=3))
    assert result.steps == 3
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert st.encode(["a man"]).shape == (1, 48)
    ours = SentenceEncoder.load(tmp_path / "out", device="cpu")
    assert ours.dim == 48
    np.testing.assert_allclose(st.encode(SENTENCES[:4]), ours.encode(SENTENCES[:4]), atol=1e-5)
    params = json.loads((tmp_path / "out" / "manifest.json").read_text())["params"]
    info = params["objective_info"]
    assert info["teacher_dim_mode"] == "projection" and info["same_tokenizer"] is False
    assert len(info["teacher_digest"]) == 64 and info["key"]


def test_pca_components_are_orthonormal_and_keep_a_low_rank_teacher_exactly():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 20)) + 3.0  # rank 6 after centring
    axes, kept = pca_components(x, 8)
    assert axes.shape == (8, 20) and kept.shape == (8,)
    np.testing.assert_allclose(axes @ axes.T, np.eye(8), atol=1e-5)
    assert kept.sum() == pytest.approx(1.0, abs=1e-9) and kept[6:].sum() < 1e-12
    reduced = x @ axes.T
    d_full = np.linalg.norm(x[:, None] - x[None], axis=-1)
    d_reduced = np.linalg.norm(reduced[:, None] - reduced[None], axis=-1)
    np.testing.assert_allclose(d_reduced, d_full, atol=1e-3)
    full_rank = rng.normal(size=(200, 20))
    _, part = pca_components(full_rank, 8)
    assert 8 / 20 < part.sum() < 1.0 and np.all(np.diff(part) <= 0)  # the largest variances first
    with pytest.raises(SparseCSEError, match="more than 8 corpus sentences"):
        pca_components(full_rank[:8], 8)


def test_pca_targets_have_the_student_size_and_keep_the_teacher_geometry(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher_dir, _ = mapped_teacher(tiny_bert_dir, tmp_path / "teacher", dim=48)
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(teacher_dir), teacher_dim="pca")
    assert student.dense is None and student.dim == 32
    sentences = read_corpus(corpus)
    objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    assert objective._table.shape == (len(sentences), 32)
    # the teacher's 48-d vectors are an affine image of 32-d ones: PCA to 32 keeps every distance
    assert objective.teacher_info["pca_variance_kept"] == pytest.approx(1.0, abs=1e-5)
    teacher_emb = SentenceEncoder.load(teacher_dir, device="cpu", max_length=64).encode(sentences[:20])
    t = torch.from_numpy(teacher_emb)
    r = objective._table[:20]
    scale = objective.teacher_info["align"]["scale"]  # turned onto the student's axes: distances x scale
    np.testing.assert_allclose(torch.cdist(r, r).numpy() / scale, torch.cdist(t, t).numpy(), atol=1e-3)
    texts = sentences[:8]
    out = objective(student.tokenize(texts, max_length=64), sentences=texts)
    assert out.loss.requires_grad and float(out.loss.detach()) > 0
    small = make_tiny_model_dir(tmp_path / "small", "bert", hidden=16, heads=4)
    with pytest.raises(SparseCSEError, match="use teacher_dim=projection"):
        Distill(student, teacher=str(small), teacher_dim="pca")


def test_an_explicit_cache_of_another_corpus_is_refused(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    student = student_of(tiny_bert_dir)
    objective = Distill(student, teacher=str(tiny_bert_dir))
    sentences = read_corpus(corpus)
    objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    cache = objective.teacher_info["cache_dir"]
    other = tmp_path / "other.txt"
    shutil.copy(corpus, other)
    with open(other, "a") as f:
        f.write("one more sentence .\n")
    explicit = Distill(student, teacher=str(tiny_bert_dir), teacher_cache=cache)
    with pytest.raises(SparseCSEError, match="another corpus"):
        explicit.prepare_corpus(read_corpus(other), other, max_length=64, device="cpu", show_progress=False)
    explicit.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    assert torch.equal(explicit._table, objective._table)


def test_least_squares_map_and_procrustes_recover_known_maps():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 12))
    weight, bias = rng.normal(size=(20, 12)), rng.normal(size=20)
    w, b, r2 = least_squares_map(x, x @ weight.T + bias)
    np.testing.assert_allclose(w, weight, atol=1e-4)
    np.testing.assert_allclose(b, bias, atol=1e-4)
    assert r2 == pytest.approx(1.0, abs=1e-8)
    rotation, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    r, s = procrustes_rotation(x, 2.5 * x @ rotation)
    np.testing.assert_allclose(r, rotation, atol=1e-4)
    assert s == pytest.approx(2.5, rel=1e-6)
    np.testing.assert_allclose(r @ r.T, np.eye(12), atol=1e-5)


def test_a_fresh_projection_starts_from_the_least_squares_map(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher_dir, dense = mapped_teacher(tiny_bert_dir, tmp_path / "teacher")
    sentences = read_corpus(corpus)
    losses = {}
    for align in ("fit", "off"):
        student = student_of(tiny_bert_dir)
        torch.manual_seed(0)
        objective = Distill(student, teacher=str(teacher_dir), teacher_dim="projection", align=align)
        objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
        texts = sentences[:8]
        losses[align] = float(objective(student.tokenize(texts, max_length=64), sentences=texts).loss.detach())
    # the teacher is an exact affine image of the student, so the fit finds the teacher's own map
    assert losses["fit"] < 1e-6 < 1e-3 < losses["off"]
    assert objective.teacher_info.get("align") is None


def test_pca_targets_turned_onto_the_student_keep_their_cosines(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher_dir, _ = mapped_teacher(tiny_bert_dir, tmp_path / "teacher", dim=48)
    sentences = read_corpus(corpus)
    tables, objectives = {}, {}
    for align in ("fit", "off"):
        student = student_of(tiny_bert_dir)
        objectives[align] = Distill(student, teacher=str(teacher_dir), teacher_dim="pca", align=align)
        objectives[align].prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
        tables[align] = objectives[align]._table
    cosines = {k: torch.nn.functional.cosine_similarity(t[:, None], t[None], dim=-1) for k, t in tables.items()}
    np.testing.assert_allclose(cosines["fit"].numpy(), cosines["off"].numpy(), atol=1e-4)
    own = torch.from_numpy(student_of(tiny_bert_dir).encode(sentences, max_tokens=None))
    gap = {k: float(((t - own) ** 2).mean()) for k, t in tables.items()}
    assert gap["fit"] < 0.5 * gap["off"]
    info = objectives["fit"].teacher_info["align"]
    assert info["mode"] == "procrustes" and info["sample"] == len(set(sentences)) and info["student_r2"] > 0.5


def test_similarity_loss_ignores_rotation_scale_and_size():
    rng = np.random.default_rng(1)
    student = torch.from_numpy(rng.normal(size=(10, 12))).float()
    isometry, _ = np.linalg.qr(rng.normal(size=(20, 12)))  # 12 -> 20 dimensions, cosines kept
    teacher = 3.0 * student @ torch.from_numpy(isometry).float().T
    assert float(similarity_loss(student, teacher)) < 1e-10
    other = torch.from_numpy(rng.normal(size=(10, 20))).float()
    assert float(similarity_loss(student, other)) > 1e-3
    # only the pairs count: each row's similarity with itself (always 1) is left out
    a, b = torch.eye(3), torch.tensor([[1.0, 0, 0], [0, 1, 0], [1, 1, 0]])
    # pairs (1,2), (1,3), (2,3) twice each: student cosines 0, teacher 0, 1/√2, 1/√2 -> (4 x 1/2) / 6
    assert float(similarity_loss(a, b)) == pytest.approx(1 / 3, abs=1e-6)


def test_similarity_distillation_takes_a_teacher_of_another_size_as_it_is(tiny_bert_dir, tmp_path, corpus):  # noqa: F811
    teacher_dir, _ = mapped_teacher(tiny_bert_dir, tmp_path / "teacher", dim=48)
    student = student_of(tiny_bert_dir)
    with pytest.raises(SparseCSEError, match="takes no teacher_dim=pca"):
        Distill(student, teacher=str(teacher_dir), loss="similarity", teacher_dim="pca")
    objective = Distill(student, teacher=str(teacher_dir), loss="similarity")
    assert student.dense is None and student.dim == 32
    sentences = read_corpus(corpus)
    objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    assert objective._table.shape[1] == 48
    texts = sentences[:8]
    out = objective(student.tokenize(texts, max_length=64), sentences=texts)
    assert out.loss.requires_grad and float(out.loss.detach()) > 0
    # a teacher that is the student in other, wider axes (a scaled isometry to 48-d): nothing to learn
    wide = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    isometry, _ = np.linalg.qr(np.random.default_rng(2).normal(size=(48, 32)))
    wide.dense = torch.nn.Linear(32, 48, bias=False)
    with torch.no_grad():
        wide.dense.weight.copy_(3.0 * torch.from_numpy(isometry).float())
    wide.save(tmp_path / "wide")
    same = Distill(student, teacher=str(tmp_path / "wide"), loss="similarity")
    same.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    assert float(same(student.tokenize(texts, max_length=64), sentences=texts).loss.detach()) < 1e-8
