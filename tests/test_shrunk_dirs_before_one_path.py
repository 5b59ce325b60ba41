"""Shrunk model directories written before the one cutting path (issue 48) still load, with the same
parameter names and shapes and the same outputs.

``tests/fixtures/shrunk_before_one_path/<arch>/`` holds what the pre-change code (commit ad45261) wrote
for tiny BERT, MPNet, ModernBERT, Qwen3 and Gemma-3 models cut by one structured mask (a layer with no
heads, a layer losing heads 0-1, a layer with no FFN or an uneven FFN, BERT padded to multiples of 8):
the ``config.json`` as saved, the parameter names and shapes of the model it built, and its
``last_hidden_state`` on two fixed (one padded) inputs with weights drawn from each parameter's name.
Only configs and numbers are stored; the weights are drawn again here.
"""

import json
import shutil
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import sparsecse.modeling  # noqa: F401  (registers the shrunk model types with the Auto classes)

FIXTURES = Path(__file__).parent / "fixtures" / "shrunk_before_one_path"


def weights(shapes: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """The weights the fixture's outputs were computed with: N(0, 0.2²) seeded by the parameter's name."""
    out = {}
    for name, shape in shapes.items():
        g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        out[name] = (0.2 * torch.randn(shape, generator=g)).contiguous()
    return out


@pytest.mark.parametrize("arch", ["bert", "mpnet", "modernbert", "qwen3", "gemma3_text"])
def test_a_directory_shrunk_before_the_change_loads_and_computes_the_same(arch, tmp_path):
    from transformers import AutoModel

    expected = json.loads((FIXTURES / arch / "expected.json").read_text())
    shutil.copy(FIXTURES / arch / "config.json", tmp_path / "config.json")  # no .py: the installed code serves it
    save_file(weights(expected["parameters"]), str(tmp_path / "model.safetensors"))

    model = AutoModel.from_pretrained(tmp_path).eval()
    assert type(model).__module__.startswith("sparsecse.modeling.")
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == expected["parameters"]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor(expected["input_ids"]),
                       attention_mask=torch.tensor(expected["attention_mask"])).last_hidden_state
    reference = torch.tensor(expected["last_hidden_state"])
    assert reference.abs().max() > 0.1  # the layers compute something
    assert torch.allclose(hidden, reference, atol=1e-5), (hidden - reference).abs().max()
