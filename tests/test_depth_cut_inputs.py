"""Issue 65's remaining category: a depth-cut model (whole layers removed, the others narrowed) as the input of
every other command. Each command runs on it as on a dense model and what it writes keeps the cut (two of three
layers, the source's layer numbers); and no command writes over it, with or without --overwrite. A model cut in
depth and in width (layers of different shapes) is refused by the commands that gate it, in one sentence, with
nothing written."""

import hashlib
import json

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.shrinking.shrink import save_model_dir
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import cli
from tests.tiny import make_tiny_model_dir

KEPT = [0, 2]  # layer 1 of 3 removed


def cut(root, narrowed: bool):
    """A 3-layer tiny BERT without layer 1 (``narrowed``: and a third of layer 2's FFN gone), saved."""
    encoder = SentenceEncoder.load(str(make_tiny_model_dir(root / "dense", "bert", layers=3, init_range=0.2)),
                                   pooling="mean", device="cpu")
    neurons = torch.ones(3, 48, dtype=torch.bool)
    if narrowed:
        neurons[2, ::3] = False
    shrink_encoder(encoder, Mask(torch.ones(3, 4, dtype=torch.bool), neurons).without_layers([1]), align_ffn=1)
    return save_model_dir(encoder, root / "model")


@pytest.fixture(scope="module")
def cut_dir(tmp_path_factory):
    return cut(tmp_path_factory.mktemp("cut"), narrowed=False)


@pytest.fixture(scope="module")
def cut_and_narrowed_dir(tmp_path_factory):
    return cut(tmp_path_factory.mktemp("narrowed"), narrowed=True)


def digest(folder) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()


def layers_of(model_dir) -> tuple[int, list[int]]:
    config = json.loads((model_dir / "config.json").read_text())
    return config["num_hidden_layers"], config.get("kept_layers")


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_the_cut_model_records_its_layers(cut_dir):
    assert layers_of(cut_dir) == (2, KEPT)


def test_score_prune_shrink_and_compress_keep_the_cut(cut_dir, tmp_path, tiny_stsb_dir, corpus):
    before = digest(cut_dir)
    scores, mask = tmp_path / "scores.safetensors", tmp_path / "mask.safetensors"
    ok(cli("score", "--model", cut_dir, "--data-dir", tiny_stsb_dir, "--batch-size", 8, "--max-batches", 2,
           "--out", scores, "--quiet"))
    ok(cli("prune", "--scores", scores, "--keep-flops", "0.6", "--out", mask))
    ok(cli("shrink", "--model", cut_dir, "--mask", mask, "--out", tmp_path / "small"))
    assert layers_of(tmp_path / "small") == (2, KEPT)
    ok(cli("compress", "--model", cut_dir, "--keep-flops", "0.6", "--steps", 1, "--reconstruct", corpus,
           "--reconstruct-sentences", 32, "--data-dir", tiny_stsb_dir, "--max-batches", 2, "--score-batch-size", 8,
           "--out", tmp_path / "compressed", "--quiet"))
    assert layers_of(tmp_path / "compressed") == (2, KEPT)
    small = SentenceEncoder.load(str(tmp_path / "compressed"), device="cpu")
    assert small.encode(["a cut model, pruned again"]).shape == (1, 32)
    assert digest(cut_dir) == before


def test_train_rewind_eval_and_export_run_on_the_cut_model(cut_dir, tmp_path, tiny_stsb_dir, fake_senteval, corpus):
    before = digest(cut_dir)
    short = ["--corpus", corpus, "--batch-size", 8, "--max-steps", 2, "--eval-steps", 2, "--lr", "1e-3",
             "--data-dir", tiny_stsb_dir, "--device", "cpu", "--quiet"]
    ok(cli("train", "--model", cut_dir, *short, "--out", tmp_path / "trained"))
    trained = next(p.parent for p in (tmp_path / "trained").rglob("config.json"))
    assert layers_of(trained) == (2, KEPT)
    mask = tmp_path / "mask.safetensors"
    ok(cli("score", "--model", cut_dir, "--data-dir", tiny_stsb_dir, "--batch-size", 8, "--max-batches", 2,
           "--out", tmp_path / "scores.safetensors", "--quiet"))
    ok(cli("prune", "--scores", tmp_path / "scores.safetensors", "--sparsity", "0.2", "--out", mask))
    ok(cli("rewind", "--mask", mask, "--init", cut_dir, *short, "--out", tmp_path / "rewound"))
    result = ok(cli("eval", "--model", cut_dir, "--data-dir", fake_senteval, "--tasks", "STSBenchmark", "--quiet",
                    "--json"))
    assert "STSBenchmark" in result.output
    ok(cli("export", "--model", cut_dir, "--out", tmp_path / "onnx", "--format", "onnx"))
    assert any((tmp_path / "onnx").rglob("*.onnx"))
    assert digest(cut_dir) == before


@pytest.mark.parametrize("command", ["shrink", "compress", "train", "export"])
def test_no_command_writes_over_the_cut_model(cut_dir, tmp_path, tiny_stsb_dir, corpus, command):
    before = digest(cut_dir)
    mask = tmp_path / "mask.safetensors"
    Mask(torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 48, dtype=torch.bool)).save(mask) if command == "shrink" \
        else None
    args = {"shrink": ["shrink", "--model", cut_dir, "--mask", mask],
            "compress": ["compress", "--model", cut_dir, "--keep-flops", "0.6", "--reconstruct", corpus],
            "train": ["train", "--model", cut_dir, "--corpus", corpus, "--max-steps", 1, "--data-dir", tiny_stsb_dir],
            "export": ["export", "--model", cut_dir, "--format", "onnx"]}[command]
    quiet = ["--quiet"] if command in ("compress", "train") else []
    result = cli(*args, "--out", cut_dir, "--overwrite", *quiet)
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1, result.output
    assert digest(cut_dir) == before


@pytest.mark.parametrize("command", ["score", "compress"])
def test_a_model_cut_in_depth_and_width_is_refused_by_the_gating_commands(cut_and_narrowed_dir, tmp_path,
                                                                         tiny_stsb_dir, corpus, command):
    args = {"score": ["score", "--data-dir", tiny_stsb_dir],
            "compress": ["compress", "--keep-flops", "0.6", "--reconstruct", corpus]}[command]
    result = cli(*args, "--model", cut_and_narrowed_dir, "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: This model has already been shrunk")
    assert not (tmp_path / "out").exists()
    assert layers_of(cut_and_narrowed_dir) == (2, KEPT)
