"""export of a stock model (issue 64) writes sentence-transformers' own backend layout inside the model directory
(onnx/model.onnx, openvino/openvino_model.xml and their int8 variants), where SentenceTransformer(dir,
backend="onnx"/"openvino") loads it with no custom code and gives the torch model's embeddings.

sentence-transformers' backends need optimum, whose releases pin transformers below 5 (sparsecse's shrunk
configs need 5): the backend test runs in a Python that has optimum (this one, or $SPARSECSE_BACKEND_PYTHON: an
environment with optimum[onnxruntime], optimum-intel[openvino] and sentence-transformers), and skips saying so
where there is none."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from sparsecse.cards.backends import put_section
from sparsecse.cards.model_card import card_sections
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import shape_record
from sparsecse.pruning.budget import UnitCosts
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.uniform import select_uniform
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import cli, random_mask, random_sentences
from tests.tiny import make_tiny_model_dir

SENTENCES = random_sentences(16, seed=640)


def make_stock_bert(tmp_path, budget=0.9):
    """A stock tiny BERT (every head, one FFN width, one layer removed) saved to tmp_path / "stock"."""
    encoder = SentenceEncoder.load(make_tiny_model_dir(tmp_path / "dense", "bert", layers=3, init_range=0.2),
                                   pooling="mean", device="cpu")
    shape = shape_record(encoder.model)
    g = torch.Generator().manual_seed(1)
    costs = UnitCosts.from_shape({**shape, "layers": 2}, "flops")
    heads, neurons = select_uniform(torch.rand(2, shape["heads"], generator=g), torch.rand(2, shape["ffn"], generator=g),
                                    costs, budget, False)
    mask = Mask(torch.cat([heads[:1], torch.zeros(1, shape["heads"], dtype=torch.bool), heads[1:]]),
                torch.cat([neurons[:1], torch.zeros(1, shape["ffn"], dtype=torch.bool), neurons[1:]])).without_layers([1])
    remove_units(encoder, mask, ShrinkConfig(layout="stock"), shrink_lineage(str(tmp_path / "dense"), mask),
                 out=tmp_path / "stock")
    return tmp_path / "stock"


@pytest.fixture(scope="module")
def stock_with_backends(tmp_path_factory, corpus, tiny_stsb_dir):
    """A stock model with its ONNX (fp32 + dynamic int8, timed beside torch) and OpenVINO (fp32 + NNCF int8, not
    timed) graphs inside it."""
    tmp = tmp_path_factory.mktemp("stock_export")
    path = make_stock_bert(tmp)
    before = sorted(p.name for p in path.iterdir())
    for args in (("--format", "onnx", "--quantize", "int8", "--data-dir", tiny_stsb_dir),
                 ("--format", "openvino", "--quantize", "int8", "--calibration", corpus, "--calibration-size", "32",
                  "--no-timing")):
        result = cli("export", "--model", path, *args, "--json", "--quiet")
        assert result.exit_code == 0, result.output
    return path, before


def test_export_without_out_writes_the_backend_layout_inside_a_stock_model(stock_with_backends):
    path, before = stock_with_backends
    for file in ("onnx/model.onnx", "onnx/model_qint8.onnx", "openvino/openvino_model.xml",
                 "openvino/openvino_model.bin", "openvino/openvino_model_qint8_quantized.xml"):
        assert (path / file).is_file(), file
    assert sorted(p.name for p in path.iterdir()) == sorted([*before, "onnx", "openvino"])  # nothing else changed
    record = json.loads((path / "onnx" / "sparsecse_export.json").read_text())
    assert record["manifest"]["verification"]["fp32_min_cosine"] >= 0.9999
    assert json.loads((path / "config.json").read_text())["model_type"] == "bert"
    assert SentenceEncoder.load(path, device="cpu").model.__class__.__name__ == "BertModel"  # still the torch model


def test_the_card_lists_every_backend_with_its_loading_arguments_and_the_timed_ones_speed(stock_with_backends):
    path, _ = stock_with_backends
    card = (path / "README.md").read_text()
    assert card_sections(card).index("Backends") == card_sections(card).index("Usage") + 1
    rows = {line.split(" | ")[1].strip("`"): line for line in card.splitlines() if line.startswith("| ONNX |")
            or line.startswith("| OpenVINO |")}
    assert sorted(rows) == ["onnx/model.onnx", "onnx/model_qint8.onnx", "openvino/openvino_model.xml",
                            "openvino/openvino_model_qint8_quantized.xml"]
    assert '`backend="onnx"`' in rows["onnx/model.onnx"]
    assert 'model_kwargs={"file_name": "openvino/openvino_model_qint8_quantized.xml"}' in rows[
        "openvino/openvino_model_qint8_quantized.xml"]
    for file, line in rows.items():  # the ONNX graphs were timed at batch 1 and 128, the OpenVINO ones not
        speeds = re.findall(r"\| (\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\]|—) ", line + " ")
        assert len(speeds) == 2 and all(("x [" in cell) == file.startswith("onnx/") for cell in speeds), line
    speed = json.loads((path / "onnx" / "sparsecse_export.json").read_text())["speed"]
    assert sorted((r["file"], r["batch"], r["metric"]) for r in speed["rows"]) == [
        ("onnx/model.onnx", 1, "latency-p50"), ("onnx/model.onnx", 128, "throughput"),
        ("onnx/model_qint8.onnx", 1, "latency-p50"), ("onnx/model_qint8.onnx", 128, "throughput")]
    assert all(r["interval"][0] <= r["speedup"] <= r["interval"][1] for r in speed["rows"])
    assert "speed" not in json.loads((path / "openvino" / "sparsecse_export.json").read_text())


def test_the_backends_section_replaces_its_old_self_and_keeps_the_rest_of_the_card():
    card = "# M\n\n## Usage\n\ncode\n\n## Compression\n\nc\n"
    once = put_section(card, ["## Backends", "", "a", ""])
    assert card_sections(once) == ["Usage", "Backends", "Compression"] and "\na\n" in once
    twice = put_section(once, ["## Backends", "", "b", ""])
    assert card_sections(twice) == ["Usage", "Backends", "Compression"] and "\na\n" not in twice and "\nb\n" in twice
    assert put_section(twice, []) == card
    assert card_sections(put_section("# M\n", ["## Backends", ""])) == ["Backends"]


def test_timing_without_sts_data_is_refused_before_any_work(tmp_path):
    path = make_stock_bert(tmp_path)
    refused = cli("export", "--model", path, "--format", "onnx", "--data-dir", tmp_path / "nowhere")
    assert refused.exit_code != 0 and "--no-timing" in refused.output
    assert not (path / "onnx").exists()


def test_a_custom_model_or_an_existing_folder_is_refused_in_one_sentence(stock_with_backends, tmp_path):
    path, _ = stock_with_backends
    again = cli("export", "--model", path, "--format", "onnx")
    assert again.exit_code != 0 and "exists; pass --overwrite" in again.output
    custom = SentenceEncoder.load(make_tiny_model_dir(tmp_path / "d", "bert", layers=2), device="cpu")
    shrink_encoder(custom, random_mask(custom.model, 0.3), align_ffn=1)
    custom.save(tmp_path / "custom")
    refused = cli("export", "--model", tmp_path / "custom", "--format", "onnx")
    assert refused.exit_code != 0 and "compress --layout stock" in refused.output
    assert not (tmp_path / "custom" / "onnx").exists()


BACKENDS = textwrap.dedent("""
    import json, sys
    import numpy as np
    from sentence_transformers import SentenceTransformer
    path, sentences, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    runs = {"onnx": "onnx/model.onnx", "onnx-int8": "onnx/model_qint8.onnx",
            "openvino": "openvino/openvino_model.xml",
            "openvino-int8": "openvino/openvino_model_qint8_quantized.xml"}
    found = {}
    for name, file in runs.items():
        st = SentenceTransformer(path, device="cpu", backend=name.split("-")[0], trust_remote_code=False,
                                 model_kwargs={"file_name": file})
        found[name] = st.encode(sentences, convert_to_numpy=True, batch_size=8)
    np.savez(out, **found)
    print("sparsecse" in sys.modules)
""")


def backend_python():
    """A Python with optimum's runtimes and sentence-transformers, or None."""
    if importlib.util.find_spec("optimum") is not None:
        return sys.executable
    return os.environ.get("SPARSECSE_BACKEND_PYTHON") or None


@pytest.mark.skipif(backend_python() is None, reason="sentence-transformers' ONNX/OpenVINO backends need optimum, "
                    "which pins transformers<5 here; set SPARSECSE_BACKEND_PYTHON to a Python that has it")
def test_sentence_transformers_backends_load_it_and_give_the_torch_embeddings(stock_with_backends, tmp_path):
    path, _ = stock_with_backends
    done = subprocess.run([backend_python(), "-c", BACKENDS, str(path), json.dumps(SENTENCES), str(tmp_path / "e.npz")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"  # sparsecse was never imported there
    torch_embeddings = SentenceEncoder.load(path, device="cpu").encode(SENTENCES)
    found = np.load(tmp_path / "e.npz")
    for name in ("onnx", "onnx-int8", "openvino", "openvino-int8"):
        a, b = found[name].astype(np.float64), torch_embeddings.astype(np.float64)
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cosine.min() >= (0.99 if "int8" in name else 0.9999), (name, cosine.min())
