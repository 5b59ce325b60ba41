"""Tiny randomly initialised ModernBERT, Qwen3 and Gemma-3 text model directories, from the configs that
transformers ships (their real weights cannot be fetched here). Weights are drawn with a large spread
(``initializer_range`` 0.2, and random norm scales) so every head and neuron changes the outputs."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.tiny import make_tokenizer

ARCHS = ("modernbert", "qwen3", "gemma3_text")
LAYERS, HEADS, KV_HEADS, HEAD_DIM, HIDDEN, FFN = 3, 8, 2, 8, 32, 40


def modern_config(arch: str, vocab_size: int, layers: int = LAYERS, heads: int = HEADS, **extra):
    from transformers import Gemma3TextConfig, ModernBertConfig, Qwen3Config

    if arch == "modernbert":  # no grouped key/value heads; local/global attention alternate (every 3rd global)
        return ModernBertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=FFN,
                                num_hidden_layers=layers, num_attention_heads=HIDDEN // HEAD_DIM,
                                max_position_embeddings=72, local_attention=4, global_attn_every_n_layers=3,
                                pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
                                initializer_range=0.2, **extra)
    common = dict(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                  max_position_embeddings=72, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                  initializer_range=0.2, use_cache=False, **extra)
    if arch == "qwen3":
        return Qwen3Config(**common)
    # EmbeddingGemma: bidirectional attention, sliding-window layers with a small window here
    return Gemma3TextConfig(**common, sliding_window=4, use_bidirectional_attention=True,
                            query_pre_attn_scalar=HEAD_DIM)


def make_modern_model_dir(out: Path, arch: str, seed: int = 0, padding_side: str | None = None,
                          heads: int = HEADS, layers: int = LAYERS, **extra) -> Path:
    """Save a random ``arch`` model + a word-piece tokenizer to ``out`` (decoders pad on the left, like
    Qwen3-Embedding, unless ``padding_side`` says otherwise; decoders get ``heads`` query heads over
    ``KV_HEADS`` key/value heads; ``extra`` config fields, e.g. ``layer_types``, override the defaults)."""
    from transformers import AutoModel, AutoTokenizer

    out = Path(out)
    make_tokenizer(out)
    side = padding_side or ("right" if arch == "modernbert" else "left")
    tok = AutoTokenizer.from_pretrained(out, padding_side=side)  # an init argument, so it is saved
    tok.save_pretrained(out)
    torch.manual_seed(seed)
    model = AutoModel.from_config(modern_config(arch, len(tok), layers=layers, heads=heads, **extra))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:  # the norms start at 1 (or 0 for Gemma's 1 + w): spread them too
                param.add_(0.3 * torch.randn_like(param))
    model.save_pretrained(out)
    return out
