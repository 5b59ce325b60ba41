"""Training batches tokenized ahead (sparsecse.training.batches): each step's batch is exactly what tokenizing its
sentences with padding gives, on either padding side, across chunk and epoch boundaries, with or without the
worker thread a GPU run uses."""

import pytest
import torch
from transformers import AutoTokenizer

from sparsecse.training.batches import AHEAD_STEPS, CorpusSampler, TokenizedBatches, pad_rows
from tests.helpers import random_sentences


@pytest.fixture(scope="module")
def tokenizers(tiny_bert_dir, tiny_roberta_dir):
    return [AutoTokenizer.from_pretrained(d) for d in (tiny_bert_dir, tiny_roberta_dir)]


def reference(tokenizer, texts, max_length):
    return dict(tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_rows_are_the_tokenizers_own_padding(tokenizers, side):
    texts = random_sentences(12, seed=3) + ["", "word " * 40]
    for tokenizer in tokenizers:
        tokenizer.padding_side = side
        rows = dict(tokenizer(texts, truncation=True, max_length=16))
        assert same(pad_rows(tokenizer, rows), reference(tokenizer, texts, 16))
        tokenizer.padding_side = "right"


@pytest.mark.parametrize("prefetch", [False, True])
def test_every_step_gets_its_sentences_tokenized_as_before(tokenizers, prefetch):
    sentences = random_sentences(40, seed=4)
    sampler = CorpusSampler(sentences, batch_size=6, seed=1, rank=1, world=2)  # 6 steps per epoch, 3 each
    batches = TokenizedBatches(tokenizers[0], sampler, 12, torch.device("cpu"), prefetch=prefetch)
    check = CorpusSampler(sentences, batch_size=6, seed=1, rank=1, world=2)
    try:
        steps = list(range(AHEAD_STEPS + 5)) + [2, 3]  # past a chunk and several epochs, then back (a resume)
        for step in steps:
            texts, batch = batches.get(step)
            assert texts == check.local_batch(step)
            assert same(batch, reference(tokenizers[0], texts, 12))
    finally:
        batches.close()
    assert batches.prefetch is prefetch
