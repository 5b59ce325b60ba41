"""The function every exported model computes: token ids (and attention mask, token types where the
tokenizer makes them) to ``last_hidden_state`` and ``sentence_embedding`` (the model's pooling, then L2
normalisation where its sentence-transformers config has a Normalize module). Exporters trace it
(:mod:`sparsecse.exporting`); runtimes read its named outputs.

    >>> names, inputs = example_inputs(encoder)  # doctest: +SKIP
    >>> EmbeddingGraph(encoder, names, normalize=True)(*inputs)[1].shape  # doctest: +SKIP
    torch.Size([2, 384])
"""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.modeling.encoder import SentenceEncoder

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
EMBEDDING_OUTPUT = "sentence_embedding"
OUTPUTS = ("last_hidden_state", EMBEDDING_OUTPUT)
# Traced with padding (the first two: two lengths) so the attention-mask path is in the graph; all four
# are also the sentences an export is checked on.
CHECK_SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run across a wide field of tall grass while their owner watches from the road.",
    "Stocks fell.",
    "A woman is slicing an onion in the kitchen.",
]


class EmbeddingGraph(nn.Module):
    """The encoder's backbone + pooling (+ L2 normalisation) as one function of its token inputs.

    Args:
        encoder: the torch encoder.
        input_names: the names of the positional inputs, a part of ``INPUTS`` in that order.
        normalize: whether to L2-normalise the pooled embedding.
    """

    def __init__(self, encoder: SentenceEncoder, input_names: list[str], normalize: bool):
        super().__init__()
        self.encoder = encoder
        self.input_names = input_names
        self.normalize = normalize

    def forward(self, *inputs):
        """(last hidden state, sentence embedding) of the token inputs, in ``input_names`` order."""
        features = dict(zip(self.input_names, inputs))
        outputs = self.encoder.transformer_outputs(**features)
        embedding = self.encoder.pool(outputs, features["attention_mask"])
        if self.normalize:
            embedding = nn.functional.normalize(embedding, dim=-1)
        return outputs.last_hidden_state, embedding


def example_inputs(encoder: SentenceEncoder) -> tuple[list[str], tuple[torch.Tensor, ...]]:
    """What an exporter traces ``encoder`` on: two padded sentences of different lengths.

    Returns:
        (the input names the tokenizer makes, in ``INPUTS`` order; the tensors, in that order).
    """
    batch = encoder.tokenizer(CHECK_SENTENCES[:2], padding=True, return_tensors="pt")
    names = [n for n in INPUTS if n in batch]
    return names, tuple(batch[n] for n in names)
