"""ONNX export: the graph computes the torch model's embeddings, int8 stays close, bad input is refused."""

import json
import shutil
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from sparsecse.cli import main  # noqa: E402
from sparsecse.serving.loading import load_encoder  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.evaluation import evaluate  # noqa: E402
from sparsecse.evaluation.sts import cosine_rows as cosines  # noqa: E402
from sparsecse.exporting.export import export  # noqa: E402
from sparsecse.pruning.masks import Mask  # noqa: E402
from sparsecse.serving.onnx_encoder import FP32_FILE, INT8_FILE, OnnxEncoder  # noqa: E402
from sparsecse.shrinking.shrink import save_model_dir  # noqa: E402
from sparsecse.shrinking.surgery import shrink_encoder  # noqa: E402
from tests.tiny import SENTENCES, make_tiny_model_dir  # noqa: E402
from tests.helpers import TEST_SENTENCES, shrunk_dir
from sparsecse.evaluation.config import EvaluationConfig  # noqa: E402
from sparsecse.exporting.config import ExportConfig  # noqa: E402

# Longer than anything traced at export (2 sentences), of many lengths, plus one with repeated words.
@pytest.fixture(scope="module", params=["bert-dense", "bert-shrunk", "roberta-dense", "roberta-shrunk"])
def exported(request, tmp_path_factory):
    """(source directory, exported directory with fp32 + int8)."""
    arch, kind = request.param.split("-")
    root = tmp_path_factory.mktemp(request.param)
    source = make_tiny_model_dir(root / "model", arch, pooling="mean")
    if kind == "shrunk":
        source = shrunk_dir(source, root / "shrunk")
    result = export(source, root / "onnx", config=ExportConfig(quantize="int8"))
    return source, result


def test_fp32_graph_equals_torch_and_int8_stays_close(exported):
    source, result = exported
    expected = SentenceEncoder.load(source, device="cpu").encode(TEST_SENTENCES)
    fp32 = OnnxEncoder.load(result.out, file=FP32_FILE)
    got = fp32.encode(TEST_SENTENCES)
    assert cosines(got, expected).min() >= 0.99999
    assert np.abs(got - expected).max() <= 1e-4
    # one sentence alone (no padding at all) and batches of 3 (other lengths than at export)
    assert cosines(fp32.encode(TEST_SENTENCES[:1]), expected[:1]).min() >= 0.99999
    assert cosines(fp32.encode(TEST_SENTENCES, batch_size=3), expected).min() >= 0.99999

    int8 = load_encoder(result.out)  # the directory's own choice: the int8 graph
    assert isinstance(int8, OnnxEncoder) and int8.file == INT8_FILE == result.file
    assert cosines(int8.encode(TEST_SENTENCES), expected).min() >= 0.98
    assert result.verification["fp32_min_cosine"] >= 0.99999


def test_directory_layout_and_dynamic_axes(exported):
    source, result = exported
    out = result.out
    for name in (FP32_FILE, INT8_FILE, "tokenizer.json", "modules.json", "1_Pooling/config.json",
                 "sentence_bert_config.json", "sparsecse_config.json"):
        assert (out / name).is_file(), name
    assert not list(out.glob("*.safetensors")) and not list(out.glob("*.py"))
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] in ("bert", "roberta") and "auto_map" not in config  # no custom code needed
    graph = onnx.load(str(out / FP32_FILE)).graph
    for value in graph.input:
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]
    assert [o.name for o in graph.output] == ["last_hidden_state", "sentence_embedding"]
    own = json.loads((out / "sparsecse_config.json").read_text())
    assert own["pooling"] == "mean" and own["onnx"]["file"] == INT8_FILE
    assert own["lineage"]["exported_from"] == str(source)
    assert own["manifest"]["kind"] == "onnx_export" and own["manifest"]["files"] == result.files
    assert (own["shape"] is not None) == ("shrunk" in str(source))


def test_cls_pooler_and_normalize_are_in_the_graph(tiny_bert_dir, tmp_path):
    source = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, source)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (source / "modules.json").write_text(json.dumps(modules))
    result = export(source, tmp_path / "onnx", config=ExportConfig(pooling="cls"))
    expected = SentenceEncoder.load(source, pooling="cls", device="cpu").encode(TEST_SENTENCES, normalize=True)
    got = load_encoder(result.out).encode(TEST_SENTENCES)
    assert result.normalize and result.file == FP32_FILE
    assert np.abs(np.linalg.norm(got, axis=1) - 1).max() < 1e-5
    assert np.abs(got - expected).max() <= 1e-4
    types = [m["type"].rsplit(".", 1)[-1] for m in json.loads((result.out / "modules.json").read_text())]
    assert types == ["Transformer", "Pooling", "Normalize"]


def test_eval_runs_the_exported_graph_through_the_same_evaluator(exported, tiny_stsb_dir, monkeypatch):
    # Scores of a random tiny model hang on nearly equal cosines, so compare what was encoded, not
    # ranks; the real model's scores are compared in the integration test below.
    _, result = exported
    run_batch = OnnxEncoder.run_batch
    batches = []
    monkeypatch.setattr(OnnxEncoder, "run_batch", lambda self, feeds: batches.append(len(feeds["input_ids"])) or
                        run_batch(self, feeds))
    scores = evaluate(model=str(result.out), config=EvaluationConfig(tasks="STSBenchmark", data_dir=tiny_stsb_dir))
    assert scores["model"] == str(result.out) and np.isfinite(scores["scores"]["STSBenchmark"])
    assert sum(batches) == scores["timing"]["sentences_encoded"] > 0

    run = CliRunner().invoke(main, ["eval", "--model", str(result.out), "--tasks", "STSBenchmark",
                                    "--data-dir", str(tiny_stsb_dir), "--json", "--quiet"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["model"] == str(result.out)


def test_exported_model_refuses_what_it_cannot_do(exported, tiny_stsb_dir, tmp_path):
    _, result = exported
    runner = CliRunner()
    mask = Mask(torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 48, dtype=torch.bool))
    mask = mask.save(tmp_path / "m.safetensors")
    for extra in (["--mask", str(mask)], ["--pooling", "cls"], ["--precision", "bf16"]):
        run = runner.invoke(main, ["eval", "--model", str(result.out), "--tasks", "STSBenchmark",
                                   "--data-dir", str(tiny_stsb_dir), "--quiet", *extra])
        assert run.exit_code == 1 and run.output.startswith("Error: "), run.output
        assert len(run.output.strip().splitlines()) == 1 and "Traceback" not in run.output
    with pytest.raises(SparseCSEError, match="already an exported onnx model"):
        export(result.out, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    with pytest.raises(SparseCSEError, match="only encodes .*load_encoder"):
        SentenceEncoder.load(result.out)  # the torch loader never hands back something else


def test_bad_input_is_refused_before_anything_is_written(tiny_bert_dir, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SparseCSEError, match="Cannot load a model config"):
        export(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(SparseCSEError, match="does not exist"):
        export(tmp_path / "nowhere", tmp_path / "out")
    with pytest.raises(SparseCSEError, match="Unknown quantization"):
        export(tiny_bert_dir, tmp_path / "out", config=ExportConfig(quantize="int4"))
    (tmp_path / "taken").mkdir()
    with pytest.raises(SparseCSEError, match="already exists"):
        export(tiny_bert_dir, tmp_path / "taken")
    assert list((tmp_path / "taken").iterdir()) == []
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    with pytest.raises(SparseCSEError, match=r"pip install 'sparsecse\[onnx\]'"):
        export(tiny_bert_dir, tmp_path / "out")
    run = CliRunner().invoke(main, ["export", "--model", str(tiny_bert_dir), "--out", str(tmp_path / "out")])
    assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1 and "sparsecse[onnx]" in run.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "taken"]  # nothing written, no temp dirs


def test_cli_export_json_and_overwrite(tiny_roberta_dir, tmp_path):
    runner = CliRunner()
    args = ["export", "--model", str(tiny_roberta_dir), "--out", str(tmp_path / "onnx"), "--quantize", "int8"]
    run = runner.invoke(main, [*args, "--json"])
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)
    assert set(report["files"]) == {FP32_FILE, INT8_FILE} and report["file"] == INT8_FILE
    run = runner.invoke(main, args)
    assert run.exit_code == 1 and "already exists" in run.output
    run = runner.invoke(main, [*args[:-2], "--overwrite"])
    assert run.exit_code == 0, run.output
    assert "min cosine to torch" in run.output and not (tmp_path / "onnx" / INT8_FILE).exists()
    assert f"`sparsecse eval --model {tmp_path / 'onnx'} --tasks STSBenchmark --split dev`" in run.output


@pytest.mark.integration
def test_minilm_export_matches_sentence_transformers(minilm_dir, senteval_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    result = export(minilm_dir, tmp_path / "onnx", config=ExportConfig(quantize="int8"))
    expected = SentenceTransformer(str(minilm_dir), device="cpu").encode(TEST_SENTENCES)  # normalized
    got = OnnxEncoder.load(result.out, file=FP32_FILE).encode(TEST_SENTENCES)
    assert result.normalize and np.abs(got - expected).max() <= 1e-4
    assert cosines(load_encoder(result.out).encode(TEST_SENTENCES), expected).min() >= 0.98
    config = EvaluationConfig(tasks="STSBenchmark", data_dir=senteval_dir, align_uniform=False)
    onnx_score = evaluate(model=OnnxEncoder.load(result.out, file=FP32_FILE), config=config)["scores"]["STSBenchmark"]
    assert onnx_score == pytest.approx(evaluate(model=minilm_dir, config=config)["scores"]["STSBenchmark"], abs=0.01)


def test_plain_onnxruntime_and_tokenizer_as_the_readme_shows(exported):
    import onnxruntime as ort
    from transformers import AutoTokenizer

    _, result = exported
    expected = OnnxEncoder.load(result.out, file=FP32_FILE).encode(TEST_SENTENCES)
    # the README's lines, verbatim apart from the directory
    tokenizer = AutoTokenizer.from_pretrained(result.out)
    session = ort.InferenceSession(f"{result.out}/onnx/model.onnx", providers=["CPUExecutionProvider"])
    batch = tokenizer(TEST_SENTENCES, padding=True, truncation=True, return_tensors="np")
    feeds = {i.name: batch[i.name].astype("int64") for i in session.get_inputs()}
    embeddings = session.run(["sentence_embedding"], feeds)[0]
    assert np.abs(embeddings - expected).max() <= 1e-5
