"""Deployment: OpenVINO export equals torch, int8 (ONNX static, OpenVINO/NNCF) stays close, the
calibration draw is seeded and recorded, one loader serves every directory, refusals write nothing."""

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sparsecse.cli import main  # noqa: E402
from sparsecse.exporting.calibration import calibration_sample  # noqa: E402
from sparsecse.modeling.cpu_features import cpu_features, describe_cpu  # noqa: E402
from sparsecse.serving.loading import load_encoder  # noqa: E402
from sparsecse.exporting.onnx_static import empty_weight_matmuls, gelu_input_matmuls  # noqa: E402
from sparsecse.serving.openvino_encoder import FP32_XML, INT8_XML, OpenVinoEncoder  # noqa: E402
from sparsecse.serving.runtime import Encoder, is_encoder  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.evaluation.sts import cosine_rows as cosines  # noqa: E402
from sparsecse.exporting.export import export  # noqa: E402
from sparsecse.serving.onnx_encoder import FP32_FILE, STATIC_INT8_FILE, OnnxEncoder  # noqa: E402
from tests.helpers import TEST_SENTENCES, shrunk_dir  # noqa: E402
from tests.tiny import make_tiny_model_dir  # noqa: E402
from sparsecse.exporting.config import ExportConfig

CALIBRATION_SIZE = 40


@pytest.fixture(scope="module", params=["bert-dense", "bert-shrunk", "roberta-dense", "roberta-shrunk",
                                        "mpnet-dense", "mpnet-shrunk"])
def deployed(request, tmp_path_factory, corpus):
    """(source, OpenVINO export with fp32 + NNCF int8, ONNX export with fp32 + static int8)."""
    arch, kind = request.param.split("-")
    root = tmp_path_factory.mktemp(request.param)
    source = make_tiny_model_dir(root / "model", arch, pooling="mean")
    if kind == "shrunk":
        source = shrunk_dir(source, root / "shrunk")  # layer 0 without heads
    openvino = export(source, root / "ov", format="openvino", config=ExportConfig(quantize="int8", calibration=corpus,
        calibration_size=CALIBRATION_SIZE, calibration_seed=3))
    static = export(source, root / "onnx", config=ExportConfig(quantize="int8", calibration=corpus,
        calibration_size=CALIBRATION_SIZE, calibration_seed=3))
    return source, openvino, static


def test_openvino_fp32_equals_torch_and_int8_stays_close(deployed):
    source, result, _ = deployed
    expected = SentenceEncoder.load(source, device="cpu").encode(TEST_SENTENCES)
    fp32 = OpenVinoEncoder.load(result.out, file=FP32_XML)
    got = fp32.encode(TEST_SENTENCES)
    assert cosines(got, expected).min() >= 0.99999 and np.abs(got - expected).max() <= 1e-4
    assert cosines(fp32.encode(TEST_SENTENCES[:1]), expected[:1]).min() >= 0.99999  # no padding at all
    assert cosines(fp32.encode(TEST_SENTENCES, batch_size=3), expected).min() >= 0.99999
    int8 = load_encoder(result.out)  # the directory's choice: the int8 IR
    assert isinstance(int8, OpenVinoEncoder) and int8.file == INT8_XML == result.file
    assert cosines(int8.encode(TEST_SENTENCES), expected).min() >= 0.98
    ops = {op.get_type_name() for op in ov.Core().read_model(str(result.out / INT8_XML)).get_ops()}
    assert "FakeQuantize" in ops  # really quantized, not a copy of the fp32 IR
    assert "FakeQuantize" not in {op.get_type_name() for op in ov.Core().read_model(str(result.out / FP32_XML)).get_ops()}


def test_onnx_static_int8_stays_close_and_is_qdq(deployed):
    source, _, result = deployed
    expected = SentenceEncoder.load(source, device="cpu").encode(TEST_SENTENCES)
    int8 = load_encoder(result.out)
    assert isinstance(int8, OnnxEncoder) and int8.file == STATIC_INT8_FILE == result.file
    assert result.kinds == {FP32_FILE: "fp32", STATIC_INT8_FILE: "int8_static"}
    assert cosines(int8.encode(TEST_SENTENCES), expected).min() >= 0.98
    ops = [node.op_type for node in onnx.load(str(result.out / STATIC_INT8_FILE)).graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops and "DynamicQuantizeLinear" not in ops
    # the FFN's output projections (GELU input) stay fp32, one per layer; every other weight MatMul is int8
    ffn_out = set(gelu_input_matmuls(result.out / FP32_FILE))
    assert len(ffn_out) == json.loads((source / "config.json").read_text())["num_hidden_layers"]
    empty = set(empty_weight_matmuls(result.out / FP32_FILE))
    graph = onnx.load(str(result.out / STATIC_INT8_FILE)).graph
    producer = {out: node.op_type for node in graph.node for out in node.output}
    constants = {t.name for t in graph.initializer}
    weight_matmuls = {n.name: producer.get(n.input[1]) for n in graph.node if n.op_type == "MatMul"
                      and (n.input[1] in constants or producer.get(n.input[1]) == "DequantizeLinear")}
    quantized = {name for name, made_by in weight_matmuls.items() if made_by == "DequantizeLinear"}
    assert ffn_out <= set(weight_matmuls) and quantized == set(weight_matmuls) - ffn_out - empty
    assert cosines(OnnxEncoder.load(result.out, file=FP32_FILE).encode(TEST_SENTENCES), expected).min() >= 0.99999


def test_calibration_draw_is_seeded_and_recorded(deployed, corpus):
    _, openvino, static = deployed
    assert not set(corpus.read_text().splitlines()) & set(TEST_SENTENCES)  # calibrated on none of the held-out
    sentences, record = calibration_sample(corpus, CALIBRATION_SIZE, seed=3)
    assert len(sentences) == len(set(sentences)) == CALIBRATION_SIZE == record["size"]
    assert calibration_sample(corpus, CALIBRATION_SIZE, seed=3)[0] == sentences
    assert calibration_sample(corpus, CALIBRATION_SIZE, seed=4)[0] != sentences
    for result, kind, quantization in ((openvino, "openvino_export", "nncf_static"),
                                       (static, "onnx_export", "static")):
        manifest = json.loads((result.out / "sparsecse_config.json").read_text())["manifest"]
        assert manifest["kind"] == kind and manifest["seed"] == 3
        assert manifest["params"]["quantization"] == quantization
        assert manifest["params"]["calibration"] == record  # seed, size, corpus hash, sample hash
        assert manifest["inputs"]["calibration"]["path"] == str(corpus)
    everything, whole = calibration_sample(corpus, 1000, seed=0)  # a small corpus gives all it has, once each
    assert sorted(everything) == sorted(set(corpus.read_text().split("\n")) - {""}) and whole["requested_size"] == 1000


def test_one_loader_and_protocol_for_every_backend(deployed, tiny_stsb_dir):
    source, openvino, static = deployed
    encoders = [load_encoder(source, device="cpu"), load_encoder(openvino.out), load_encoder(static.out)]
    assert [type(e).__name__ for e in encoders] == ["SentenceEncoder", "OpenVinoEncoder", "OnnxEncoder"]
    assert all(isinstance(e, Encoder) and is_encoder(e) for e in encoders)
    assert not is_encoder(str(source)) and not is_encoder(source)
    assert len({e.dim for e in encoders}) == 1 and {e.pooling for e in encoders} == {"mean"}
    runner = CliRunner()
    run = runner.invoke(main, ["compare", str(source), str(openvino.out), "--tasks", "STSBenchmark", "--data-dir",
                               str(tiny_stsb_dir), "--bootstrap", "10", "--json", "--quiet"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["b"]["source"] == str(openvino.out)
    for extra in (["--precision", "bf16"], ["--pooling", "cls_before_pooler"]):
        run = runner.invoke(main, ["eval", "--model", str(openvino.out), "--tasks", "STSBenchmark", "--data-dir",
                                   str(tiny_stsb_dir), "--quiet", *extra])
        assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1, run.output


def test_plain_openvino_and_tokenizer_as_the_readme_shows(deployed):
    from transformers import AutoTokenizer

    _, result, _ = deployed
    expected = OpenVinoEncoder.load(result.out, file=FP32_XML).encode(TEST_SENTENCES)
    # the README's lines, verbatim apart from the directory
    tokenizer = AutoTokenizer.from_pretrained(result.out)
    model = ov.Core().compile_model(f"{result.out}/openvino/openvino_model.xml", "CPU")
    batch = tokenizer(TEST_SENTENCES, padding=True, truncation=True, return_tensors="np")
    embeddings = model({i.any_name: batch[i.any_name] for i in model.inputs})["sentence_embedding"]
    # OpenVINO computes in bf16 by default where the CPU has bf16 units (sparsecse asks for f32), so equal
    # up to that precision, not to float rounding
    cosine = (embeddings * expected).sum(1) / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(expected, axis=1)
    assert embeddings.shape == expected.shape and cosine.min() >= 0.999


def test_cli_openvino_export_json_stdout_is_only_the_report(tiny_roberta_dir, corpus, tmp_path):
    args = ["export", "--model", str(tiny_roberta_dir), "--out", str(tmp_path / "ov"), "--format", "openvino",
            "--quantize", "int8", "--calibration", str(corpus), "--calibration-size", "8", "--json"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)  # NNCF's progress went to stderr
    assert report["kinds"] == {FP32_XML: "fp32", INT8_XML: "int8_static"} and report["file"] == INT8_XML


def test_refusals_write_nothing(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    (tmp_path / "empty.txt").write_text("\n  \n")
    for fmt in ("onnx", "openvino"):
        with pytest.raises(SparseCSEError, match="calibration corpus.*no sentences"):
            export(tiny_bert_dir, tmp_path / "out", format=fmt, config=ExportConfig(quantize="int8",
                calibration=tmp_path / "empty.txt"))
        with pytest.raises(SparseCSEError, match="--calibration only serves --quantize int8"):
            export(tiny_bert_dir, tmp_path / "out", format=fmt, config=ExportConfig(calibration=corpus))
    with pytest.raises(SparseCSEError, match="pass --calibration CORPUS"):
        export(tiny_bert_dir, tmp_path / "out", format="openvino", config=ExportConfig(quantize="int8"))
    with pytest.raises(SparseCSEError, match="Unknown export format 'tflite'"):
        export(tiny_bert_dir, tmp_path / "out", format="tflite")
    with pytest.raises(SparseCSEError, match="at least 1 sentence"):
        export(tiny_bert_dir, tmp_path / "out", config=ExportConfig(quantize="int8", calibration=corpus,
            calibration_size=0))
    runner = CliRunner()
    run = runner.invoke(main, ["export", "--model", str(tiny_bert_dir), "--out", str(tmp_path / "out"),
                               "--format", "onnx", "--quantize", "int8", "--calibration", str(tmp_path / "empty.txt")])
    assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1 and "no sentences" in run.output
    exported = export(tiny_bert_dir, tmp_path / "ov", format="openvino")
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino now raises ImportError
    with pytest.raises(SparseCSEError, match=r"pip install 'sparsecse\[openvino\]'"):
        export(tiny_bert_dir, tmp_path / "out", format="openvino")
    with pytest.raises(SparseCSEError, match=r"pip install 'sparsecse\[openvino\]'"):
        load_encoder(exported.out)
    run = runner.invoke(main, ["export", "--model", str(tiny_bert_dir), "--out", str(tmp_path / "out"),
                               "--format", "openvino"])
    assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1 and "sparsecse[openvino]" in run.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt", "ov"]  # nothing written, no temp dirs


def test_cpu_features_from_cpuinfo():
    amd = "model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma\n"
    sapphire = "model name\t: Xeon\nflags\t\t: avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16\n"
    assert cpu_features(amd) == {name: name == "avx2" for name in cpu_features(amd)}
    assert cpu_features(sapphire)["avx512_vnni"] and cpu_features(sapphire)["amx_bf16"]
    assert describe_cpu(amd).startswith("AMD EPYC: +avx2 -avx512f")
