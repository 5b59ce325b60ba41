"""Bad input is one sentence, found before the work (issue 22): damaged exports, seeds, shrink options,
empty sweep points, exact values and file byte offsets in messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparsecse.data.corpus import read_corpus
from sparsecse.serving.loading import load_encoder
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.pruning.masks import Mask
from tests.helpers import cli


@pytest.fixture(scope="module")
def exported_dir(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from sparsecse.exporting.export import export
    from tests.tiny import make_tiny_model_dir

    root = tmp_path_factory.mktemp("export")
    return export(model=make_tiny_model_dir(root / "m", "bert"), out=root / "onnx").out


def _copy(exported_dir, tmp_path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(exported_dir, target)
    return target


def test_damaged_graph_is_one_sentence(exported_dir, tmp_path):
    copy = _copy(exported_dir, tmp_path)
    graph = copy / "onnx" / "model.onnx"
    graph.write_bytes(graph.read_bytes()[:200])
    with pytest.raises(SparseCSEError, match="cannot be loaded.*export the model again"):
        load_encoder(copy)


def test_config_that_does_not_match_the_graph_is_refused(exported_dir, tmp_path):
    copy = _copy(exported_dir, tmp_path)
    config = json.loads((copy / "sparsecse_config.json").read_text())
    config["onnx"]["dim"] += 1
    (copy / "sparsecse_config.json").write_text(json.dumps(config))
    with pytest.raises(SparseCSEError, match="embeddings, not 33"):
        load_encoder(copy)


def test_graph_path_outside_the_directory_is_refused(exported_dir, tmp_path):
    copy = _copy(exported_dir, tmp_path)
    shutil.copy(copy / "onnx" / "model.onnx", tmp_path / "elsewhere.onnx")
    config = json.loads((copy / "sparsecse_config.json").read_text())
    for name in ("../elsewhere.onnx", str(tmp_path / "elsewhere.onnx")):
        config["onnx"]["file"] = name
        (copy / "sparsecse_config.json").write_text(json.dumps(config))
        with pytest.raises(SparseCSEError, match="not inside the directory"):
            load_encoder(copy)


def test_exported_directory_without_tokenizer_is_refused(exported_dir, tmp_path, tiny_stsb_dir):
    copy = _copy(exported_dir, tmp_path)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (copy / name).unlink(missing_ok=True)
    result = cli("eval", "--model", copy, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
    assert result.exit_code == 1 and "has no tokenizer files" in result.output, result.output


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--seed", str(2**32)], ["--bootstrap-seed", str(2**40)]])
def test_seeds_outside_numpy_are_refused_up_front(args, tmp_path):
    result = cli("eval", "--model", tmp_path / "missing", *args)
    assert result.exit_code == 2 and "is not in the range" in result.output


def test_sweep_seeds_outside_numpy_are_refused(tmp_path):
    from sparsecse.sweeps.naming import parse_seeds

    with pytest.raises(SparseCSEError, match="outside what numpy accepts"):
        parse_seeds("0,4294967296", 0)
    assert parse_seeds("0,4294967295", 0) == [0, 4294967295]


def test_shrink_options_beyond_the_model_are_one_sentence(tiny_bert_dir, tmp_path):
    mask = Mask.full(2, 4, 48)
    mask.manifest = {"kind": "mask", "model": str(tiny_bert_dir)}
    mask_path = mask.save(tmp_path / "m.safetensors")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man is here\nthe dog runs\n")
    for extra, message in ((["--align-ffn", "100000"], "wider than the model's 48 neurons"),
                           (["--align-ffn", "40"], "wider than the model's 48 neurons"),
                           (["--reconstruct", corpus, "--reconstruct-ridge", "inf"], "finite number >= 0, not inf")):
        result = cli("shrink", "--model", tiny_bert_dir, "--mask", mask_path, "--out", tmp_path / "o", *extra)
        assert result.exit_code == 1 and message in result.output, result.output
        assert not (tmp_path / "o").exists()


def test_report_on_a_sweep_with_an_empty_point_file_says_so(tmp_path):
    from sparsecse.reporting.report import load_points

    points = tmp_path / "points"
    points.mkdir()
    (points / "a.json").write_text(json.dumps({"scores": {"STSBenchmark": 0.5}}))
    (points / "b.json").write_text("{}")
    with pytest.raises(SparseCSEError, match="b.json holds no scores"):
        load_points(tmp_path)


def test_value_errors_show_the_exact_value():
    from sparsecse.pruning.budget import check_budget
    from sparsecse.pruning.grid import check_sparsity
    from sparsecse.scoring.criteria import check_lambda

    for check in (check_budget, check_sparsity, check_lambda):
        with pytest.raises(SparseCSEError, match=r"got 1\.0000001\."):
            check(1.0000001)


def test_corpus_decode_error_gives_the_file_byte_offset(tmp_path):
    path = tmp_path / "c.txt"
    prefix = b"a fine sentence\n" * 1000  # past any read buffer
    path.write_bytes(prefix + b"bad \xff byte\n")
    with pytest.raises(SparseCSEError, match=rf"\(byte {len(prefix) + 4}\)"):
        read_corpus(path)
    path.write_bytes(b"one\r\ntwo\n\nthree")
    assert read_corpus(path) == ["one", "two", "three"]


def test_point_names_keep_every_digit_that_matters():
    from sparsecse.sweeps.naming import budget_point_name, point_name

    assert point_name(0.1, 0.5) == "s0.1-l0.5" and budget_point_name(0.7, 1.0) == "f0.7-l1"  # names as before
    assert point_name(0.1000001, 0.5) != point_name(0.1, 0.5)
    assert budget_point_name(0.7, 0.50000001) == "f0.7-l0.50000001"
