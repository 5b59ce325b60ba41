"""The on-disk teacher-embedding cache: computed once, resumable, keyed by the corpus digest."""

import json

import numpy as np
import pytest
import torch

from sparsecse.data.corpus import read_corpus
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.objectives import teacher_cache
from sparsecse.objectives.teacher_cache import teacher_embeddings
from tests.helpers import counted  # noqa: F401 (fixture)
from tests.tiny import SENTENCES, make_tiny_model_dir


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    lines = SENTENCES[:10] + [SENTENCES[3], "", SENTENCES[0]]  # duplicates and a blank line
    path.write_text("\n".join(lines) + "\n")
    return path


def reference(model_dir, sentences):
    return SentenceEncoder.load(model_dir, device="cpu").encode(sentences, batch_size=4)


def test_embeddings_match_the_encoder_and_the_second_call_computes_nothing(tiny_bert_dir, corpus_file,
                                                                           tmp_path, counted, monkeypatch):
    monkeypatch.setattr(teacher_cache, "CHUNK_SENTENCES", 4)
    sentences = read_corpus(corpus_file)
    emb, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "cache",
                                   batch_size=3, show_progress=False)
    assert emb.dtype == np.float32 and emb.shape == (len(sentences), 32)
    assert sum(counted) == len(set(sentences)) == info["computed_sentences"]
    np.testing.assert_allclose(emb, reference(tiny_bert_dir, sentences), atol=1e-5)
    counted.clear()
    again, info2 = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "cache",
                                      batch_size=3, show_progress=False)
    assert counted == [] and info2["computed_sentences"] == 0 and info2["key"] == info["key"]
    np.testing.assert_array_equal(again, emb)


def test_a_killed_run_resumes_from_its_chunks(tiny_bert_dir, corpus_file, tmp_path, counted, monkeypatch):
    unique = len(set(read_corpus(corpus_file)))
    real_save = teacher_cache._save_atomic
    saved = []

    def dying_save(path, array):
        if path.name.startswith("chunk-") and len(saved) == 1:
            raise KeyboardInterrupt  # killed while the second chunk is being written
        real_save(path, array)
        saved.append(path)

    monkeypatch.setattr(teacher_cache, "_save_atomic", dying_save)
    monkeypatch.setattr(teacher_cache, "CHUNK_SENTENCES", 4)
    with pytest.raises(KeyboardInterrupt):
        teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    monkeypatch.setattr(teacher_cache, "_save_atomic", real_save)
    counted.clear()
    emb, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    assert info["computed_sentences"] == sum(counted) == unique - 4  # the first chunk was not redone
    np.testing.assert_allclose(emb, reference(tiny_bert_dir, read_corpus(corpus_file)), atol=1e-5)
    assert not (tmp_path / "c" / info["key"] / "chunks").exists()


def test_another_corpus_or_teacher_gets_another_key_and_is_recomputed(tiny_bert_dir, corpus_file, tmp_path,
                                                                       counted):
    _, first = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    corpus_file.write_text(corpus_file.read_text() + "a new sentence .\n")
    counted.clear()
    emb, second = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c",
                                     show_progress=False)
    assert second["key"] != first["key"] and second["computed_sentences"] == sum(counted) > 0
    assert emb.shape[0] == len(read_corpus(corpus_file))
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=7)
    _, third = teacher_embeddings(str(other), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    assert third["key"] not in (first["key"], second["key"]) and third["computed_sentences"] > 0


def test_a_cache_of_another_corpus_is_refused_when_named_explicitly(tiny_bert_dir, corpus_file, tmp_path):
    _, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    emb, same = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_path=info["cache_dir"])
    assert same["computed_sentences"] == 0 and emb.shape[0] == info["sentences"]
    corpus_file.write_text(corpus_file.read_text().replace("the", "a", 1))
    with pytest.raises(SparseCSEError, match="another corpus"):
        teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_path=info["cache_dir"] + "/embeddings.npy")


def test_a_stale_directory_under_the_key_is_never_used(tiny_bert_dir, corpus_file, tmp_path, counted):
    emb, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    meta_path = tmp_path / "c" / info["key"] / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["corpus_sha256"] = "0" * 64  # e.g. a hand-copied cache: its digest no longer matches
    meta_path.write_text(json.dumps(meta))
    np.save(tmp_path / "c" / info["key"] / "embeddings.npy", np.zeros_like(emb))
    counted.clear()
    again, info2 = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c",
                                      show_progress=False)
    assert info2["computed_sentences"] == sum(counted) > 0
    np.testing.assert_allclose(again, emb, atol=1e-6)


def test_a_loaded_teacher_and_its_directory_share_the_cache(tiny_bert_dir, corpus_file, tmp_path, counted):
    _, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    counted.clear()
    loaded = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    _, info2 = teacher_embeddings(loaded, corpus_file, cache_dir=tmp_path / "c", show_progress=False)
    assert info2["key"] == info["key"] and counted == []
    with torch.no_grad():
        _, normed = teacher_embeddings(loaded, corpus_file, cache_dir=tmp_path / "c", normalize=True,
                                       show_progress=False)
    assert normed["key"] != info["key"]


def test_two_runs_asking_at_once_compute_the_vectors_once(tiny_bert_dir, corpus_file, tmp_path, counted,
                                                          monkeypatch):
    """Two distillations of one corpus and teacher started together (as on a GPU box): the second waits
    for the first's lock and reads its finished cache instead of racing on the chunk files."""
    import threading

    monkeypatch.setattr(teacher_cache, "CHUNK_SENTENCES", 2)

    unique = len(set(read_corpus(corpus_file)))
    results, errors = [], []

    def run():
        try:
            results.append(teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "cache",
                                              batch_size=2, show_progress=False))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(info["computed_sentences"] for _emb, info in results) == [0, unique]
    assert sum(counted) == unique
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert not list((tmp_path / "cache").glob("*.lock"))


def test_a_held_lock_is_waited_for_then_named(tiny_bert_dir, corpus_file, tmp_path, monkeypatch):
    from sparsecse.artifacts.locks import FileLock

    first, info = teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "cache",
                                     show_progress=False)
    held = FileLock(tmp_path / "cache" / f"{info['key']}.lock")
    assert held.acquire()
    monkeypatch.setattr(teacher_cache, "LOCK_WAIT_S", 0.5)
    try:
        with pytest.raises(SparseCSEError, match="locked by"):
            teacher_embeddings(str(tiny_bert_dir), corpus_file, cache_dir=tmp_path / "cache", show_progress=False)
    finally:
        held.release()
