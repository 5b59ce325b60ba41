"""The export registry: a format declared once, through the registry alone (a toy TorchScript format here:
its declaration, its writer, its loader), is offered by ``sparsecse export``, the Python ``export()``, recipes,
the exported-model reader and ``load_encoder``, and goes through every shared step (the check against torch,
the manifest, the refusals) without an edit anywhere else."""

import json
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sparsecse.artifacts.export_formats import (ExportFormat, Quantization, format_names, get_format,
                                                quantization_names, register_format, unregister_format)
from sparsecse.artifacts.exported_model import exported_format
from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import cosine_rows
from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.export import export
from sparsecse.exporting.result import WrittenGraphs
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.stages import ExportStage
from sparsecse.serving.graph import EmbeddingGraph, example_inputs
from sparsecse.serving.loading import load_encoder
from sparsecse.serving.runtime import RuntimeEncoder
from tests.helpers import TEST_SENTENCES, shrunk_dir

TOY_FILE = "torchscript/model.pt"


def write_torchscript(encoder, directory, normalize, config, calibration) -> WrittenGraphs:
    """The toy format's writer: the embedding function traced by torch.jit."""
    names, inputs = example_inputs(encoder)
    graph = EmbeddingGraph(encoder, names, normalize).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-constant branches
        traced = torch.jit.trace(graph, inputs, check_trace=False, strict=False)
    (directory / TOY_FILE).parent.mkdir(parents=True)
    traced.save(str(directory / TOY_FILE))
    return WrittenGraphs(["fp32"], settings={"inputs": names}, params={"exporter": "torch.jit.trace"})


class TorchScriptEncoder(RuntimeEncoder):
    """The toy format's loader: the traced module, run by torch."""

    format = "toy"
    batches = 0

    @classmethod
    def open_graph(cls, path, file, settings, threads):
        return torch.jit.load(str(path / file))

    def run_batch(self, feeds):
        TorchScriptEncoder.batches += 1
        with torch.no_grad():
            return self.graph(*(torch.from_numpy(feeds[n]) for n in self.input_names))[1].numpy()


TOY = ExportFormat(name="toy", title="TorchScript", summary="TorchScript module run by torch",
                   files={"fp32": TOY_FILE}, writer=write_torchscript, loader=TorchScriptEncoder.load)


@pytest.fixture
def toy_format():
    register_format(TOY)
    yield TOY
    unregister_format("toy")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(dense tiny BERT, the same with layer 0 headless and fewer neurons)."""
    from tests.tiny import make_tiny_model_dir

    root = tmp_path_factory.mktemp("toy-source")
    dense = make_tiny_model_dir(root / "dense", "bert", pooling="mean")
    return dense, shrunk_dir(dense, root / "shrunk")


@pytest.mark.parametrize("kind", [0, 1], ids=["dense", "shrunk"])
def test_a_format_registered_alone_exports_and_loads_through_every_shared_step(toy_format, models, kind, tmp_path):
    source = models[kind]
    result = export(source, tmp_path / "toy", format="toy")
    assert result.kinds == {TOY_FILE: "fp32"} and result.file == TOY_FILE
    assert result.files == {TOY_FILE: (tmp_path / "toy" / TOY_FILE).stat().st_size}
    for name in ("tokenizer.json", "modules.json", "config.json", "sparsecse_config.json"):
        assert (result.out / name).is_file(), name
    own = json.loads((result.out / "sparsecse_config.json").read_text())
    assert own["toy"]["file"] == TOY_FILE and own["toy"]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert own["manifest"]["kind"] == "toy_export" and own["manifest"]["params"]["exporter"] == "torch.jit.trace"
    assert own["manifest"]["params"]["format"] == "toy" and own["manifest"]["runtime_versions"] == {}
    assert exported_format(result.out) == "toy"

    expected = SentenceEncoder.load(source, device="cpu").encode(TEST_SENTENCES)
    TorchScriptEncoder.batches = 0
    loaded = load_encoder(result.out)
    got = loaded.encode(TEST_SENTENCES, batch_size=3)  # other batch sizes and lengths than traced
    assert isinstance(loaded, TorchScriptEncoder) and TorchScriptEncoder.batches == -(-len(TEST_SENTENCES) // 3)
    assert cosine_rows(got, expected).min() >= 0.99999 and np.abs(got - expected).max() <= 1e-4
    assert result.verification["fp32_min_cosine"] >= 0.99999
    with pytest.raises(SparseCSEError, match="already an exported toy model"):
        export(result.out, tmp_path / "again")
    with pytest.raises(SparseCSEError, match="only encodes"):
        SentenceEncoder.load(result.out)
    with pytest.raises(SparseCSEError, match="An exported TorchScript model runs at the precision it was exported with"):
        loaded.encode(TEST_SENTENCES[:1], precision="bf16")


def test_the_cli_and_recipes_offer_a_registered_format_and_refuse_what_it_does_not_accept(toy_format, models,
                                                                                         tmp_path):
    runner = CliRunner()
    assert "[onnx|openvino|toy]" in runner.invoke(main, ["export", "--help"]).output
    run = runner.invoke(main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "toy"), "--format", "toy",
                               "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["kinds"] == {TOY_FILE: "fp32"}
    refused = [["--quantize", "int8"], ["--calibration", __file__]]
    for extra in refused:
        run = runner.invoke(main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "no"), "--format",
                                   "toy", *extra])
        assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1, run.output
    assert "Unknown quantization 'int8' for toy export; choose none." in runner.invoke(
        main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "no"), "--format", "toy", "--quantize",
               "int8"]).output
    assert not (tmp_path / "no").exists()

    assert ExportStage(name="ship", format="toy", quantize=None).check("recipe r").format == "toy"
    with pytest.raises(SparseCSEError, match="recipe r: quantize must be null for toy export, not 'int8'"):
        ExportStage(name="ship", format="toy", quantize="int8").check("recipe r")
    unregister_format("toy")  # gone from every list at once
    assert "toy" not in format_names()
    run = runner.invoke(main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "no"), "--format", "toy"])
    assert run.exit_code == 2 and "'toy' is not one of 'onnx', 'openvino'" in run.output
    with pytest.raises(SparseCSEError, match="format must be one of onnx, openvino, not 'toy'"):
        ExportStage(name="ship", format="toy", quantize=None).check("recipe r")
    assert exported_format(tmp_path / "toy") is None  # the reader knows only registered formats


def test_the_declaration_is_the_one_list(toy_format):
    assert format_names() == ("onnx", "openvino", "toy") and quantization_names() == ("int8",)
    assert get_format("onnx").quantization("int8").calibration == "optional"
    assert get_format("openvino").quantization("int8").calibration == "required"
    # the packages a format declares are what its refusal names
    assert get_format("openvino").missing_packages() == ("OpenVINO export and inference need the openvino and nncf "
                                                          "packages: pip install 'sparsecse[openvino]'.")
    assert get_format("onnx").missing_packages() == ("ONNX export and inference need the onnx and onnxruntime "
                                                      "packages: pip install 'sparsecse[onnx]'.")
    with pytest.raises(SparseCSEError, match="Unknown export format 'tflite'; choose one of onnx, openvino, toy."):
        ExportConfig(format="tflite").check()
    with pytest.raises(SparseCSEError, match="OpenVINO int8 is calibrated on sample sentences"):
        ExportConfig(format="openvino", quantize="int8").check()
    assert ExportConfig(format="onnx", quantize="int8").check().quantize == "int8"  # dynamic: no corpus needed


@pytest.mark.parametrize("changes, message", [
    ({}, "already registered"),
    ({"name": "Toy"}, "lower-case letters"),
    ({"name": "lineage"}, "key of sparsecse_config.json"),
    ({"name": "toy2", "files": {"int8": "x.pt"}}, "must give the fp32 graph's file"),
    ({"name": "toy2", "files": {"fp32": "x.pt", "fp16": "y.pt"}}, "only kinds of"),
    ({"name": "toy2", "quantizations": (Quantization("int8", "sometimes", "?"),)}, "optional or required"),
])
def test_bad_declarations_are_refused(toy_format, changes, message):
    import dataclasses

    with pytest.raises(SparseCSEError, match=message):
        register_format(dataclasses.replace(TOY, **changes))
    assert format_names() == ("onnx", "openvino", "toy")


def test_a_missing_package_is_one_sentence_and_nothing_is_written(models, tmp_path):
    import dataclasses

    needy = register_format(dataclasses.replace(TOY, name="needy", packages=("sparsecse_no_such_runtime",),
                                                extra="needy"))
    try:
        with pytest.raises(SparseCSEError, match=r"^TorchScript export and inference need the "
                                                 r"sparsecse_no_such_runtime packages: pip install 'sparsecse\[needy\]'"):
            export(models[0], tmp_path / "out", format="needy")
        run = CliRunner().invoke(main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "out"),
                                        "--format", "needy"])
        assert run.exit_code == 1 and "sparsecse[needy]" in run.output
        assert list(tmp_path.iterdir()) == []
    finally:
        unregister_format(needy.name)


def test_an_installed_package_registers_its_format_by_entry_point(models, tmp_path, monkeypatch):
    import importlib.metadata

    from sparsecse.artifacts import export_formats

    def plugins(value):
        entry = importlib.metadata.EntryPoint("toy", value, export_formats.ENTRY_POINT_GROUP)
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry] if group == entry.group else [])
        monkeypatch.setattr(export_formats, "_plugins_loaded", False)

    plugins("tests.test_export_formats:TOY")
    try:
        run = CliRunner().invoke(main, ["export", "--model", str(models[0]), "--out", str(tmp_path / "toy"),
                                        "--format", "toy", "--json"])
        assert run.exit_code == 0, run.output
        assert isinstance(load_encoder(tmp_path / "toy"), TorchScriptEncoder)
    finally:
        unregister_format("toy")
    for value, message in (("tests.test_export_formats:TOY_FILE", "names a str, not an ExportFormat"),
                           ("tests.no_such_module:TOY", "cannot be loaded .ModuleNotFoundError")):
        plugins(value)
        with pytest.raises(SparseCSEError, match=message):
            format_names()
