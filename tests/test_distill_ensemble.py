"""distill from an ensemble of teachers (teacher=A+B): the target's cosine similarities are the mean of the
members' (checked against the members encoded on their own), each member cached on its own, and what needs
one teacher refused."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.objectives.distill import Distill
from sparsecse.objectives.teacher_cache import teacher_embeddings
from sparsecse.objectives.teachers import Teacher, teacher_names
from sparsecse.training import train
from tests.helpers import counted, quick  # noqa: F401 (counted is a fixture)
from tests.tiny import SENTENCES, make_tiny_model_dir


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    return [make_tiny_model_dir(root / name, "bert", seed=seed, pooling="mean", init_range=0.2, hidden=hidden)
            for name, seed, hidden in (("a", 1, 32), ("b", 2, 48))]


def cosines(x):
    x = F.normalize(torch.as_tensor(x, dtype=torch.float64), dim=-1)
    return x @ x.T


def own_cosines(model_dir, sentences):
    """A member's cosine matrix from the member loaded and encoded on its own."""
    return cosines(SentenceEncoder.load(model_dir, device="cpu").encode(sentences))


@pytest.fixture
def student(tiny_bert_dir):
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    enc.eval()
    return enc


def test_the_ensemble_target_has_the_mean_of_the_members_cosines(members, student):
    teacher = Teacher(f"{members[0]}+{members[1]}")
    assert teacher.is_ensemble and teacher.dim == 32 + 48 and teacher.same_tokenizer(student)
    texts = SENTENCES[:7]
    target = teacher.embed(student.tokenize(texts)).double()
    assert target.shape == (7, 80)
    np.testing.assert_allclose(target.norm(dim=-1).numpy(), 1.0, atol=1e-6)
    expected = (own_cosines(members[0], texts) + own_cosines(members[1], texts)) / 2
    np.testing.assert_allclose((target @ target.T).numpy(), expected.numpy(), atol=1e-5)


def test_the_similarity_loss_pulls_to_the_mean_cosines(members, student):
    objective = Distill(student, teacher=f"{members[0]}+{members[1]}", loss="similarity")
    texts = SENTENCES[:6]
    loss = float(objective(student.tokenize(texts)).loss.detach())
    mean = (own_cosines(members[0], texts) + own_cosines(members[1], texts)) / 2
    with torch.no_grad():
        mine = cosines(student(**student.tokenize(texts)))
    off = ~torch.eye(6, dtype=torch.bool)
    assert loss == pytest.approx(float(((mine - mean)[off] ** 2).mean()), rel=1e-4)
    assert objective.teacher_info["teachers"] == [str(m) for m in members]


def test_one_teacher_gives_its_own_vectors_unnormalised(members, student):
    texts = SENTENCES[:5]
    alone = Teacher(str(members[0]))
    assert not alone.is_ensemble and alone.dim == 32
    raw = SentenceEncoder.load(members[0], device="cpu").encode(texts)
    np.testing.assert_allclose(alone.embed(student.tokenize(texts)).numpy(), raw, atol=1e-5)  # not normalised


def test_each_member_is_cached_on_its_own_and_reused(members, student, corpus, tmp_path, counted):  # noqa: F811
    rows = counted
    sentences = read_corpus(corpus)
    unique = len(set(sentences))
    root = str(tmp_path / "cache")
    objective = Distill(student, teacher=f"{members[0]}+{members[1]}", loss="similarity", teacher_cache=root)
    objective.prepare_corpus(sentences, corpus, max_length=64, device="cpu", show_progress=False)
    assert sum(rows) == 2 * unique  # each member embeds each distinct sentence once
    assert len(objective.teacher_info["key"]) == 2
    rows.clear()
    _, info = teacher_embeddings(str(members[1]), corpus, cache_dir=root, max_length=64, show_progress=False)
    assert rows == [] and info["computed_sentences"] == 0  # the member's own cache, reused alone
    texts = sentences[:9]
    looked_up = objective(student.tokenize(texts, max_length=64), sentences=texts).loss
    rows.clear()
    from_tokens = Distill(student, teacher=f"{members[0]}+{members[1]}", loss="similarity")(
        student.tokenize(texts, max_length=64)).loss
    assert float(looked_up.detach()) == pytest.approx(float(from_tokens.detach()), rel=1e-4)


def test_what_needs_one_teacher_is_refused_for_an_ensemble(members, student, tmp_path, corpus):  # noqa: F811
    spec = f"{members[0]}+{members[1]}"
    with pytest.raises(SparseCSEError, match="needs one teacher"):
        Distill(student, teacher=spec, loss="similarity", layer_weight=1.0)
    with pytest.raises(SparseCSEError, match="80 dimensions"):
        Distill(student, teacher=spec)  # mse on the joined vectors needs teacher_dim=projection|pca
    finished = teacher_embeddings(str(members[0]), corpus, cache_dir=tmp_path / "c", show_progress=False)[1]
    objective = Distill(student, teacher=spec, loss="similarity", teacher_cache=finished["cache_dir"])
    with pytest.raises(SparseCSEError, match="one per member"):
        objective.prepare_corpus(read_corpus(corpus), corpus, device="cpu", show_progress=False)


def test_teacher_names_are_split_on_plus_unless_the_path_exists(tmp_path):
    assert teacher_names("all-mpnet-base-v2 + paraphrase-MiniLM-L3-v2") == ["all-mpnet-base-v2",
                                                                            "paraphrase-MiniLM-L3-v2"]
    odd = tmp_path / "model+v2"
    odd.mkdir()
    assert teacher_names(str(odd)) == [str(odd)]
    with pytest.raises(SparseCSEError, match="empty model"):
        teacher_names("all-mpnet-base-v2+")
    with pytest.raises(SparseCSEError, match="twice"):
        teacher_names("a+a")


def test_training_from_an_ensemble_records_its_members(members, tiny_bert_dir, corpus, tmp_path):  # noqa: F811
    out = tmp_path / "student"
    result = train(tiny_bert_dir, corpus, out, objective="distill", pooling="mean",
                   objective_args=f"teacher={members[0]}+{members[1]},loss=similarity", **quick(max_steps=3))
    assert result.steps == 3
    info = json.loads((out / "manifest.json").read_text())["params"]["objective_info"]
    assert info["teachers"] == [str(m) for m in members] and info["teacher_dim"] == 80
    assert SentenceEncoder.load(out, device="cpu").dim == 32  # the student keeps its own space
