"""Tiny randomly initialised BERT / RoBERTa / DistilBERT / MPNet model directories for fast tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = """the a an of to in and is are was were be it this that on for with as by at from or not no
man woman person people dog cat child children boy girl car bus train plane horse bird fish ball
is playing eating running walking riding sitting standing cutting slicing cooking reading writing
guitar piano food onion potato tomato meat water street road field beach park house room table
small large big little young old red blue green black white two three one four five many some
quickly slowly near over under into onto man's woman's has have had will would can could said
market stocks price prices rose fell percent company year years government president minister
""".split()


def _vocab() -> list[str]:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789")
    punct = list(".,;:!?'\"-()/%$&")
    pieces = ["##" + c for c in letters]
    return special + sorted(set(WORDS)) + letters + pieces + punct


def make_tokenizer(out: Path):
    from transformers import BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    vocab_file = out / "vocab.txt"
    vocab_file.write_text("\n".join(_vocab()) + "\n")
    # transformers 5 ignores vocab_file here (it would build a 5-token vocab); pass the vocab itself
    vocab = {token: i for i, token in enumerate(vocab_file.read_text().splitlines())}
    tok = BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=64)
    tok.save_pretrained(out)
    return tok


def make_mpnet_tokenizer(out: Path):
    """An MPNet tokenizer (<s>=0, <pad>=1, </s>=2: MPNet's position ids assume padding id 1)."""
    from transformers import MPNetTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    words = [t for t in dict.fromkeys(_vocab()) if not t.startswith("[")]  # _vocab() repeats a few letters
    vocab = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "[UNK]"] + words + ["<mask>"])}
    tok = MPNetTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=64, unk_token="[UNK]")
    tok.save_pretrained(out)
    return tok


def make_tiny_model_dir(out: Path, arch: str = "bert", layers: int = 2, heads: int = 4, hidden: int = 32,
                        ffn: int = 48, seed: int = 0, pooling: str | None = None,
                        init_range: float | None = None) -> Path:
    """Save a randomly initialised encoder + tokenizer to ``out`` and return ``out``.

    ``init_range`` (the config's ``initializer_range``, 0.02 by default) 0.2 spreads the sentence
    similarities out: at 0.02 every cosine of a 2-layer model lies within about 1e-5 of 1, so float
    rounding decides their ranks."""
    from transformers import AutoModel, BertConfig, DistilBertConfig, MPNetConfig, RobertaConfig

    out = Path(out)
    tok = make_mpnet_tokenizer(out) if arch == "mpnet" else make_tokenizer(out)
    common = dict(vocab_size=len(tok), max_position_embeddings=72)
    if init_range is not None:
        common["initializer_range"] = init_range
    if arch == "bert":
        config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=ffn, **common)
    elif arch == "roberta":
        config = RobertaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                               intermediate_size=ffn, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                               type_vocab_size=1, **common)
    elif arch == "distilbert":
        config = DistilBertConfig(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=ffn, pad_token_id=0,
                                  **common)
    elif arch == "mpnet":
        config = MPNetConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                             intermediate_size=ffn, relative_attention_num_buckets=32, pad_token_id=1,
                             bos_token_id=0, eos_token_id=2, **common)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    if arch == "mpnet":  # a bias table as large as the scores, so every head's slice matters in tests
        with torch.no_grad():
            model.encoder.relative_attention_bias.weight.normal_(0.0, 1.0)
    model.save_pretrained(out, safe_serialization=True)
    if pooling:
        (out / "sparsecse_config.json").write_text(json.dumps({"pooling": pooling, "max_length": 64}))
    return out


SENTENCES = [
    "a man is playing the guitar", "a woman is slicing an onion", "the dog is running in the park",
    "two children are playing on the beach", "a cat is sitting on the table", "the bus is near the house",
    "a girl is riding a horse", "stocks rose three percent", "the president said no", "a boy is reading",
    "the company had a big year", "an old man is walking slowly", "a red car is on the road",
    "people are eating food", "the bird is over the water", "a child is cooking meat",
]


def write_stsb(root: Path, n_train: int = 48, seed: int = 0) -> Path:
    """A synthetic STS-B in SentEval's layout (tab-separated, score in column 4)."""
    import random

    rng = random.Random(seed)
    d = Path(root) / "STS" / "STSBenchmark"
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", 24), ("test", 24)):
        lines = []
        for i in range(n):
            a = rng.choice(SENTENCES)
            if i % 3 == 0:
                b, score = a.replace("a ", "one ", 1), 4.2 + rng.random() * 0.8
            else:
                b, score = rng.choice(SENTENCES), rng.random() * 4
            lines.append("\t".join(["main-captions", "MSRvid", "2012test", f"{i:04d}", f"{score:.3f}", a, b]))
        (d / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
    return Path(root)


def write_spread_stsb(root: Path) -> Path:
    """A synthetic STS-B whose test pairs are 24 different pairs of two different sentences, with
    distinct gold scores: no pair's cosine ties another's by construction (see ``similarity_gap``)."""
    d = Path(root) / "STS" / "STSBenchmark"
    d.mkdir(parents=True, exist_ok=True)
    pairs = [(SENTENCES[i], SENTENCES[(i + step) % len(SENTENCES)]) for step in (1, 5) for i in range(12)]
    lines = ["\t".join(["main-captions", "MSRvid", "2012test", f"{i:04d}", f"{(i * 7 % 24) / 4.8:.3f}", a, b])
             for i, (a, b) in enumerate(pairs)]
    for split in ("train", "dev", "test"):
        (d / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
    return Path(root)


def similarity_gap(encoder, pairs) -> float:
    """The smallest difference between two pairs' cosine similarities under ``encoder``: a score test
    on these pairs is free of rounding only when this is far above float32 rounding (~1e-7)."""
    import numpy as np

    a = encoder.encode([p.s1 for p in pairs], normalize=True)
    b = encoder.encode([p.s2 for p in pairs], normalize=True)
    return float(np.diff(np.sort((a * b).sum(1))).min())
