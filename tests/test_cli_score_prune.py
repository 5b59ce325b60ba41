import json

import pytest

from sparsecse.pruning.masks import Mask
from tests.helpers import cli


@pytest.fixture(scope="module")
def score_file(tiny_bert_dir, tiny_stsb_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "scores.safetensors"
    result = cli("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--batch-size", 8, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_score_then_prune_single_mask(score_file, tmp_path):
    out = tmp_path / "mask.safetensors"
    result = cli("prune", "--scores", score_file, "--sparsity", 0.25, "--lambda", 0.5, "--out", out,
                 "--heatmap", tmp_path / "h.png")
    assert result.exit_code == 0, result.output
    mask = Mask.load(out)
    assert mask.heads_pruned == 2 and mask.neurons_pruned == 24
    assert "2/8 heads, 24/96 FFN neurons removed" in result.output
    assert (tmp_path / "h.png").stat().st_size > 1000
    manifest = json.loads((tmp_path / "mask.json").read_text())
    assert manifest["scores"]["sha256"] and manifest["lambda"] == 0.5


def test_prune_grid_writes_a_directory(score_file, tmp_path):
    out = tmp_path / "masks"
    result = cli("prune", "--scores", score_file, "--sparsity", "0.1:0.3:0.1", "--lambda", "0.25,0.75",
                 "--out", out, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert len(payload["masks"]) == 6
    names = [f"mask-s{s:g}-l{lam:g}" for s in (0.1, 0.2, 0.3) for lam in (0.25, 0.75)]
    assert sorted(p.name for p in out.iterdir()) == sorted(n + ext for n in names for ext in (".safetensors", ".json"))


def test_refuses_to_overwrite(score_file, tmp_path):
    out = tmp_path / "m.safetensors"
    assert cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", out).exit_code == 0
    again = cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", out)
    assert again.exit_code == 1 and "already exists" in again.output


@pytest.mark.parametrize("args,message", [
    (["--sparsity", "1.2"], "sparsity must lie strictly between 0 and 1"),
    (["--sparsity", "0"], "sparsity must lie strictly between 0 and 1"),
    (["--sparsity", "0.1", "--lambda", "1.5"], "lambda must lie in [0, 1]"),
    (["--sparsity", "0.1:0.05:0.01"], "needs start <= stop"),
])
def test_prune_bad_values(score_file, tmp_path, args, message):
    result = cli("prune", "--scores", score_file, *args, "--out", tmp_path / "m.safetensors")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "m.safetensors").exists()


def test_unreadable_score_file(tmp_path):
    bad = tmp_path / "s.safetensors"
    bad.write_text("garbage")
    result = cli("prune", "--scores", bad, "--sparsity", 0.1, "--out", tmp_path / "m.safetensors")
    assert result.exit_code == 1 and "not a readable safetensors file" in result.output


def test_score_missing_data_dir(tiny_bert_dir, tmp_path):
    result = cli("score", "--model", tiny_bert_dir, "--data-dir", tmp_path / "nope", "--out", tmp_path / "s.st")
    assert result.exit_code == 1 and "does not exist" in result.output and "--data-dir" in result.output
    assert f"`sparsecse data download --to {tmp_path / 'nope'}`" in result.output


def test_score_missing_stsb_files(tiny_bert_dir, tmp_path):
    result = cli("score", "--model", tiny_bert_dir, "--data-dir", tmp_path, "--out", tmp_path / "s.st")
    assert result.exit_code == 1 and "STSBenchmark data is missing" in result.output


def test_score_data_dir_from_environment(tiny_bert_dir, tmp_path):
    result = cli("score", "--model", tiny_bert_dir, "--out", tmp_path / "s.st", env={"SPARSECSE_DATA": str(tmp_path / "x")})
    assert result.exit_code == 1 and "$SPARSECSE_DATA" in result.output


def test_score_malformed_row(tiny_bert_dir, tmp_path):
    d = tmp_path / "STS" / "STSBenchmark"
    d.mkdir(parents=True)
    (d / "sts-train.csv").write_text("g\tf\ty\t1\t4.5\ta\tb\ng\tf\ty\t2\tfive\ta\tb\n")
    result = cli("score", "--model", tiny_bert_dir, "--data-dir", tmp_path, "--out", tmp_path / "s.st")
    assert result.exit_code == 1 and "sts-train.csv:2" in result.output and "not a number" in result.output


def test_score_unsupported_architecture(tmp_path, tiny_stsb_dir):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_head=2, n_embd=8).save_pretrained(tmp_path / "gpt")
    result = cli("score", "--model", tmp_path / "gpt", "--data-dir", tiny_stsb_dir, "--out", tmp_path / "s.st")
    assert result.exit_code == 1 and "Unsupported architecture 'gpt2'" in result.output


def test_missing_model_directory(tmp_path, tiny_stsb_dir):
    result = cli("score", "--model", tmp_path / "nomodel", "--data-dir", tiny_stsb_dir, "--out", tmp_path / "s.st")
    assert result.exit_code == 1 and "does not exist" in result.output


@pytest.mark.integration
def test_score_and_prune_default_model(senteval_dir, minilm_dir, tmp_path):
    """The default model (skipped without its package), scored on the CPU: the exact counts rank heads and
    neurons on one scale, where a device's rounding could move a unit across the cut."""
    out = tmp_path / "scores.safetensors"
    result = cli("score", "--data-dir", senteval_dir, "--max-batches", 1, "--batch-size", 16, "--device", "cpu",
                 "--out", out)
    assert result.exit_code == 0, result.output
    assert "6 layers x 12 heads" in result.output and "pooling mean" in result.output
    result = cli("prune", "--scores", out, "--sparsity", 0.02, "--lambda", 0.5, "--out", tmp_path / "m.safetensors")
    assert result.exit_code == 0, result.output
    assert "1/72 heads, 184/9216 FFN neurons removed" in result.output
