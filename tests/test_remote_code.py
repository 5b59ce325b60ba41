"""No code from a model directory runs without consent (issue 22)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.pruning.masks import Mask
from tests.tiny import make_tiny_model_dir

CONFIG_CODE = """from pathlib import Path
Path({marker!r}).write_text("ran")
from transformers import BertConfig


class EvilConfig(BertConfig):
    model_type = "bert"
"""
MODEL_CODE = """from transformers import BertModel
from .configuration_evil import EvilConfig


class EvilModel(BertModel):
    config_class = EvilConfig
"""


@pytest.fixture()
def evil(tmp_path, tiny_bert_dir):
    """A BERT directory whose auto_map points at code that writes a marker file when imported."""
    root = tmp_path / "evil"
    shutil.copytree(tiny_bert_dir, root)
    marker = tmp_path / "MARKER"
    (root / "configuration_evil.py").write_text(CONFIG_CODE.format(marker=str(marker)))
    (root / "modeling_evil.py").write_text(MODEL_CODE)
    config = json.loads((root / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}
    (root / "config.json").write_text(json.dumps(config))
    mask = Mask.full(2, 4, 48)
    mask.manifest = {"kind": "mask", "model": str(root)}
    mask.save(tmp_path / "mask.safetensors")
    (tmp_path / "corpus.txt").write_text("".join(f"a man is playing the guitar number {i}\n" for i in range(40)))
    return root, marker


def _commands(root: Path, tmp: Path, stsb: Path, senteval: Path) -> dict[str, list[str]]:
    mask = str(tmp / "mask.safetensors")
    corpus = str(tmp / "corpus.txt")
    return {
        "score": ["score", "--model", root, "--data-dir", stsb, "--out", tmp / "s.safetensors"],
        "eval": ["eval", "--model", root, "--data-dir", senteval],
        "compare": ["compare", root, root, "--data-dir", senteval],
        "shrink": ["shrink", "--model", root, "--mask", mask, "--out", tmp / "small"],
        "shrink-recorded": ["shrink", "--mask", mask, "--out", tmp / "small2"],
        "export": ["export", "--model", root, "--out", tmp / "onnx"],
        "train": ["train", "--model", root, "--corpus", corpus, "--out", tmp / "trained", "--max-steps", "1"],
        "rewind": ["rewind", "--mask", mask, "--corpus", corpus, "--out", tmp / "rewound", "--max-steps", "1"],
        "sweep": ["sweep", "--model", root, "--sparsities", "0.1", "--data-dir", stsb, "--out", tmp / "sweep"],
        "compress": ["compress", "--model", root, "--keep-flops", "0.5", "--reconstruct", corpus, "--data-dir", stsb,
                     "--out", tmp / "compressed"],
    }


@pytest.mark.parametrize("command", ["score", "eval", "compare", "shrink", "shrink-recorded", "export", "train",
                                     "rewind", "sweep", "compress"])
def test_every_command_refuses_foreign_code(evil, tmp_path, tiny_stsb_dir, fake_senteval, command):
    root, marker = evil
    args = _commands(root, tmp_path, tiny_stsb_dir, fake_senteval)[command]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code != 0, result.output
    assert "--trust-remote-code" in result.output and "configuration_evil.py, modeling_evil.py" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert not marker.exists()


def test_python_api_refuses_and_accepts_with_consent(evil):
    root, marker = evil
    with pytest.raises(SparseCSEError, match="trust_remote_code=True"):
        SentenceEncoder.load(root, device="cpu")
    assert not marker.exists()
    encoder = SentenceEncoder.load(root, device="cpu", trust_remote_code=True)
    assert marker.exists() and type(encoder.model).__name__ == "EvilModel"


def test_flag_loads_and_the_manifest_says_so(evil, tmp_path, tiny_stsb_dir):
    root, marker = evil
    out = tmp_path / "s.safetensors"
    args = ["score", "--model", root, "--data-dir", tiny_stsb_dir, "--out", out, "--trust-remote-code"]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert marker.exists()
    assert json.loads(out.with_suffix(".json").read_text())["trust_remote_code"] is True
    plain = make_tiny_model_dir(tmp_path / "plain", "bert")
    out2 = tmp_path / "s2.safetensors"
    args = ["score", "--model", plain, "--data-dir", tiny_stsb_dir, "--out", out2]
    assert CliRunner().invoke(main, [str(a) for a in args]).exit_code == 0
    assert json.loads(out2.with_suffix(".json").read_text())["trust_remote_code"] is False


def test_shrunk_directory_loads_with_installed_code_only(tiny_bert_dir, tmp_path):
    from sparsecse.shrinking.shrink import shrink

    heads = torch.tensor([[True, False, True, True], [False, True, True, True]])
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[0, :10] = False
    mask = Mask(heads, neurons)
    mask.manifest = {"kind": "mask", "model": str(tiny_bert_dir)}
    mask_path = mask.save(tmp_path / "m.safetensors")
    result = shrink(model=tiny_bert_dir, mask=mask_path, out=tmp_path / "small")
    copied = sorted(p.name for p in result.out.glob("*.py"))
    assert copied  # the copy stays for users without sparsecse
    for name in copied:
        (result.out / name).unlink()
    encoder = SentenceEncoder.load(result.out, device="cpu")  # trust_remote_code off
    assert type(encoder.model).__module__ == "sparsecse.modeling.modeling_sparsecse"
    assert [len(r) for r in encoder.config.kept_heads] == [3, 3]
    gated = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    mask.apply(gated.model)
    sentences = ["a man is playing the guitar", "a dog runs"]
    assert torch.allclose(torch.as_tensor(encoder.encode(sentences)), torch.as_tensor(gated.encode(sentences)),
                          atol=1e-5)
