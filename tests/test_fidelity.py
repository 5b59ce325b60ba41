"""Details the papers' reference code fixes: head initialisation, and a rewind that has no initial
checkpoint to go back to saying so."""

import json

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.objectives.registry import build_objective
from sparsecse.training import rewind
from sparsecse.training.rewind import NO_LINEAGE
from tests.helpers import make_mask, quick


@pytest.mark.parametrize("seed", [0, 1])
def test_simcse_mlp_head_starts_as_the_reference_code_initialises_it(tiny_bert_dir, seed):
    """SimCSE's ``cl_init`` ends with ``init_weights()``: dense weight N(0, initializer_range = 0.02),
    bias zero (PyTorch's own default would be uniform with std ~ 1/sqrt(3d) ~ 0.1 here, bias non-zero)."""
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    assert encoder.config.initializer_range == 0.02
    torch.manual_seed(seed)
    dense = build_objective("simcse", encoder).mlp.dense
    assert dense.weight.shape == (32, 32)
    assert torch.count_nonzero(dense.bias) == 0
    assert 0.017 < float(dense.weight.detach().std()) < 0.023 and abs(float(dense.weight.detach().mean())) < 0.003


def test_diffcse_heads_start_as_the_reference_code_initialises_them(tiny_bert_dir, tmp_path):
    from tests.helpers import save_mlm as _save_mlm

    generator = _save_mlm(tmp_path / "mlm")
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    torch.manual_seed(0)
    objective = build_objective("diffcse", encoder, generator=str(generator))
    linears = [m for m in objective.mlp.modules() if isinstance(m, torch.nn.Linear)] + [objective.rtd_head]
    assert len(linears) == 3
    assert all(0.016 < float(m.weight.detach().std()) < 0.024 for m in linears)
    assert torch.count_nonzero(objective.rtd_head.bias) == 0


def test_rewinding_a_model_without_lineage_warns_and_says_so_in_the_manifest(tiny_bert_dir, corpus, tmp_path,  # noqa: F811
                                                                             capsys):
    mask_path, _ = make_mask(tmp_path, tiny_bert_dir)  # scored straight from a checkpoint sparsecse never trained
    result = rewind(mask_path, corpus, tmp_path / "rewound", **quick(max_steps=1))
    err = capsys.readouterr().err
    assert "records no initial checkpoint" in err and "--init" in err
    manifest = json.loads((result.out / "manifest.json").read_text())
    assert manifest["lineage"]["init_source"] == NO_LINEAGE
    assert json.loads((result.out / "sparsecse_config.json").read_text())["lineage"]["init_source"] == NO_LINEAGE

    explicit = rewind(mask_path, corpus, tmp_path / "explicit", init=tiny_bert_dir, **quick(max_steps=1))
    assert "records no initial checkpoint" not in capsys.readouterr().err
    assert json.loads((explicit.out / "manifest.json").read_text())["lineage"]["init_source"] == "argument"


def test_rewinding_a_trained_model_uses_its_lineage_quietly(tiny_bert_dir, corpus, tmp_path, capsys):  # noqa: F811
    from sparsecse.training import train

    trained = train(tiny_bert_dir, corpus, tmp_path / "trained", **quick(max_steps=1)).out
    mask_path, _ = make_mask(tmp_path, trained)
    capsys.readouterr()
    result = rewind(mask_path, corpus, tmp_path / "rewound", **quick(max_steps=1))
    assert "records no initial checkpoint" not in capsys.readouterr().err
    assert json.loads((result.out / "manifest.json").read_text())["lineage"]["init_source"] == "lineage"
