"""Timing a model as its users serve it: the sentence-transformers loader behind the timing interface (the same
embeddings as sparsecse's own loader, for a dense and a shrunk model directory), the target's loader setting (its
default recorded with the shape, bad values refused in one sentence) and a worker timing through it."""

from pathlib import Path

import numpy as np
import pytest

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving import st_encoder
from sparsecse.shrinking.shrink import ShrinkConfig, shrink
from sparsecse.targets import fresh
from sparsecse.targets.engines import to_time
from sparsecse.targets.spec import Target, default_loader
from tests.helpers import random_mask, worker_pid
from tests.tiny import make_tiny_model_dir

SENTENCES = ["a short one", "a somewhat longer sentence to embed here", "three words here"]

pytest.importorskip("sentence_transformers")


@pytest.fixture
def shrunk_dir(tmp_path):
    encoder = SentenceEncoder.load(make_tiny_model_dir(tmp_path / "tiny", "bert", seed=2), pooling="mean", device="cpu")
    dense = tmp_path / "dense"
    encoder.save(dense)  # with its sentence-transformers files, as a hub model has them
    mask = random_mask(encoder.model, 0.4, seed=5)
    out = shrink(model=dense, mask=mask.save(tmp_path / "mask.safetensors"), out=tmp_path / "small",
                 config=ShrinkConfig(pooling="mean")).out
    return dense, out


def test_sentence_transformers_embeds_as_sparsecse_for_a_dense_and_a_shrunk_model(shrunk_dir):
    for path in shrunk_dir:
        served = fresh.OnDisk(str(path), loader=st_encoder.NAME).load()
        ours = SentenceEncoder.load(path, device="cpu")
        assert isinstance(served, st_encoder.SentenceTransformersEncoder) and served.model is not None
        expected = ours.encode(SENTENCES, normalize="Normalize" in (Path(path) / "modules.json").read_text())
        np.testing.assert_allclose(served.encode(SENTENCES, batch_size=2), expected, atol=1e-5)
        assert served.max_length == ours.max_length and served.config.num_hidden_layers == ours.config.num_hidden_layers


def test_a_worker_times_through_the_loader_the_target_names(shrunk_dir, monkeypatch):
    monkeypatch.setenv(fresh.ENV, "fresh")
    _, small = shrunk_dir
    placed = to_time(small, "torch-fp32", loader=st_encoder.NAME)
    assert placed == fresh.OnDisk(str(small), loader=st_encoder.NAME)
    _, embeddings = fresh.run(worker_pid, {"a": placed}, SENTENCES)
    direct = st_encoder.SentenceTransformersEncoder.load(small).encode(SENTENCES)
    np.testing.assert_allclose(embeddings["a"], direct, atol=1e-6)


def test_the_loader_defaults_to_sentence_transformers_on_torch_and_is_recorded():
    assert default_loader("torch-fp32") == st_encoder.NAME  # installed here (the test extra)
    assert default_loader("onnx") == "sparsecse"
    shape = Target(speedup=2).check().shape(2)
    assert shape.loader == st_encoder.NAME and shape.to_dict()["loader"] == st_encoder.NAME
    assert shape.describe().endswith("torch-fp32 via sentence-transformers")
    assert Target(speedup=2, loader="sparsecse").check().shape(2).describe().endswith("torch-fp32")
    assert Target(speedup=2, engine="onnx").check().shape(2).loader == "sparsecse"


@pytest.mark.parametrize("settings, words", [
    ({"loader": "vllm"}, "Unknown loader 'vllm' to time through"),
    ({"loader": st_encoder.NAME, "engine": "onnx"}, "the engine onnx times its own runtime"),
])
def test_a_bad_loader_is_refused_in_one_sentence(settings, words):
    with pytest.raises(SparseCSEError, match=words) as info:
        Target(speedup=2, **settings).check()
    assert len(str(info.value).splitlines()) == 1


def test_without_sentence_transformers_the_loader_says_how_to_go_on(monkeypatch):
    monkeypatch.setattr(st_encoder, "available", lambda: False)
    assert default_loader("torch-fp32") == "sparsecse"
    with pytest.raises(SparseCSEError, match=r"pip install 'sparsecse\[st\]'.*target.loader=sparsecse"):
        st_encoder.SentenceTransformersEncoder.load("any")
