"""A toy encoder family that sparsecse learns about only through its adapter (issue 48): how adding a family
works, and the proof that the cutting path needs no edit for one.

The family is a tiny post-LayerNorm encoder of its own (not a transformers architecture): blocks
``blocks[i]`` with an attention ``attn`` (separate ``q``, ``k``, ``v``, ``out``; its head count in
``heads``, its head size in ``head_size``; it runs with any number of heads, none included) and a ReLU
FFN ``ffn_in`` → ``act`` → ``ffn_out``. Importing this module

- registers the dense family with transformers' Auto classes (what any custom architecture does to load
  with ``AutoModel``), and
- registers its :class:`~sparsecse.modeling.adapters.ArchitectureAdapter` with sparsecse: the layout, and
  the shrunk config/model classes (the family's config and model with sparsecse's two mixins).
"""

from __future__ import annotations

import math

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from sparsecse.modeling.adapters import ArchitectureAdapter, UnitLayout, register_adapter
from sparsecse.modeling.configuration_sparsecse import ShrunkConfigMixin
from sparsecse.modeling.modeling_sparsecse import ShrunkLayersMixin


@strict
class ToyConfig(PreTrainedConfig):
    model_type = "toy-encoder"
    vocab_size: int = 64
    hidden_size: int = 32
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    intermediate_size: int = 24
    pad_token_id: int | None = 0


class ToyAttention(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.q, self.k, self.v, self.out = (nn.Linear(config.hidden_size, config.hidden_size) for _ in range(4))

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        shape = (batch, length, self.heads, self.head_size)
        q, k, v = (p(x).view(shape).transpose(1, 2) for p in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size) + additive_mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, self.heads * self.head_size)
        return self.out(context)


class ToyBlock(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.attn = ToyAttention(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = nn.ReLU()
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, additive_mask))
        return self.norm2(x + self.ffn_out(self.act(self.ffn_in(x))))


class ToyModel(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "toy"

    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(ToyBlock(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, return_dict=True, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        additive = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x = self.embeddings(input_ids)
        for block in self.blocks:
            x = block(x, additive.to(x.dtype))
        return BaseModelOutput(last_hidden_state=x)


@strict
class SparseCSEToyConfig(ShrunkConfigMixin, ToyConfig):
    model_type = "sparsecse-toy-encoder"
    base_model_type = "toy-encoder"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    unit_layout: dict | None = None
    has_pooler: bool = False


class SparseCSEToyModel(ShrunkLayersMixin, ToyModel):
    config_class = SparseCSEToyConfig
    _takes_pooling_flag = False


TOY_LAYOUT = UnitLayout(layers="blocks", attention="attn", query=("attn.q",), key_value=("attn.k", "attn.v"),
                        attn_out="attn.out", ffn_in=("ffn_in",), ffn_out="ffn_out", head_dim="head_size",
                        head_count="heads", ffn_activation="act")

AutoConfig.register(ToyConfig.model_type, ToyConfig, exist_ok=True)
AutoModel.register(ToyConfig, ToyModel, exist_ok=True)
TOY_ADAPTER = register_adapter(ArchitectureAdapter("toy encoder", ("toy-encoder",), TOY_LAYOUT,
                                                   {"toy-encoder": SparseCSEToyModel}))
