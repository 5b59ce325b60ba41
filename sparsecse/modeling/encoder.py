"""Load a Hugging Face encoder, pool it into sentence embeddings, encode text, save it back.

Pooling is always explicit and recorded: ``cls`` (the model's pooler output, i.e. CLS through the
pretrained dense+tanh), ``cls_before_pooler`` (the raw CLS hidden state), ``mean`` (mask-aware
mean of the last hidden states) or ``last`` (the last non-padding token's hidden state, whichever
side the tokenizer pads: decoder embedders such as Qwen3-Embedding). Left out, it comes from the model directory's own
sparsecse/sentence-transformers config, else ``cls_before_pooler``; ``pooling_source`` says which.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from sparsecse.artifacts.exported_model import exported_format
from sparsecse.errors import SparseCSEError
from sparsecse.modeling import register_auto_classes
from sparsecse.artifacts.remote_code import allow_code, trusting_remote_code
from sparsecse.modeling.st_dense import read_dense, write_sentence_transformers_config
from sparsecse.artifacts.model_names import (DEFAULT_MODEL_NAME, MODELS_ENV, default_model_path,  # noqa: F401
                                             model_search_path, resolve_model)
from sparsecse.artifacts.model_dir import SPARSECSE_CONFIG, read_model_config, write_model_config  # noqa: F401
from sparsecse.modeling.pooling import last_token
from sparsecse.modeling.adapters import get_adapter  # validates the architecture before loading weights
from sparsecse.modeling.cpu_features import has_native_bf16 as cpu_has_native_bf16

POOLINGS = ("cls", "cls_before_pooler", "mean", "last")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


def check_tokenizer_files(path: str) -> None:
    """A local model directory must ship its tokenizer: without one, transformers builds an empty
    tokenizer that maps every word to [UNK] and the model still "works", with meaningless results."""
    if os.path.isdir(path) and not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        raise SparseCSEError(f"The model directory {path} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); "
                             "copy them from the model it came from.")


def check_device(device: str | torch.device | None) -> torch.device | None:
    """The device named by ``device`` (None stays None), refused in one sentence when this machine
    does not have it."""
    if device is None or isinstance(device, torch.device) and device.type == "cpu":
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise SparseCSEError(f"Unknown device {device!r}; use cpu, cuda or cuda:N.") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise SparseCSEError(f"Device {device!r} was asked for, but CUDA is not available on this machine.")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise SparseCSEError(f"Device {device!r} does not exist; this machine has "
                                 f"{torch.cuda.device_count()} CUDA device(s).")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise SparseCSEError(f"Device {device!r} was asked for, but MPS is not available on this machine.")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise SparseCSEError(f"Unsupported device {device!r}; use cpu, cuda or cuda:N.")
    return parsed


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device asked for (checked), else CUDA where there is one, else the CPU."""
    if device is not None:
        return check_device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def encoding_device(encoder, device: str | torch.device | None = None):
    """``encoder`` on ``device`` for the block (None: cuda when available, else cpu), then back where it was.

    Evaluation that only encodes (dev scores, eval sets) runs on the GPU this way, while the same encoder,
    loaded on the CPU, is timed there on the engine a target names. An encoder that is not a torch
    :class:`SentenceEncoder` (an exported graph) stays as it is.

    Args:
        encoder: the encoder.
        device: where it encodes inside the block.
    """
    if not isinstance(encoder, SentenceEncoder):
        yield encoder
        return
    home, target = encoder.device, pick_device(device)
    if home == target or (target.type == home.type and target.index is None):
        yield encoder
        return
    encoder.to(target)
    try:
        yield encoder
    finally:
        encoder.to(home)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def configured_pooling(model_dir: str) -> tuple[str | None, str | None]:
    """(pooling, where it came from) as the model directory itself declares it, or (None, None)."""
    root = Path(model_dir)
    own = read_model_config(root)
    if own.get("pooling") in POOLINGS:
        return own["pooling"], SPARSECSE_CONFIG
    modules = _read_json(root / "modules.json") or []
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            cfg = _read_json(root / module.get("path", "") / "config.json") or {}
            if cfg.get("pooling_mode_lasttoken") or cfg.get("pooling_mode") == "lasttoken":
                return "last", "sentence-transformers pooling config"
            if cfg.get("pooling_mode") in ("mean", "cls"):  # sentence-transformers >= 6 writes one key
                return ("mean" if cfg["pooling_mode"] == "mean" else "cls_before_pooler",
                        "sentence-transformers pooling config")
            if cfg.get("pooling_mode_mean_tokens"):
                return "mean", "sentence-transformers pooling config"
            if cfg.get("pooling_mode_cls_token"):
                return "cls_before_pooler", "sentence-transformers pooling config"
    return None, None


def configured_max_length(model_dir: str) -> int | None:
    """The maximum length a model directory configures (sparsecse's config, else sentence-transformers'), or None."""
    root = Path(model_dir)
    for cfg, key in ((read_model_config(root), "max_length"),
                     (_read_json(root / "sentence_bert_config.json"), "max_seq_length")):
        if cfg and cfg.get(key):
            return int(cfg[key])
    return None


class SentenceEncoder(nn.Module):
    """A transformer plus an explicit pooling; ``forward`` maps tokenized input to embeddings."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        pooling: str,
        max_length: int = 128,
        source: str | None = None,
        pooling_source: str = "argument",
        extra_config: dict | None = None,
        dense: nn.Linear | None = None,
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise SparseCSEError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = int(max_length)
        self.source = source
        self.pooling_source = pooling_source
        self.extra_config = dict(extra_config or {})
        self.dense = dense  # a sentence-transformers Dense projection after pooling (2_Dense), or None
        if pooling == "cls" and getattr(model, "pooler", None) is None:
            raise SparseCSEError("Pooling 'cls' needs a model with a pooler layer; use cls_before_pooler or mean.")

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        name_or_path: str | os.PathLike | None = None,
        pooling: str | None = None,
        max_length: int | None = None,
        device: str | torch.device | None = None,
        trust_remote_code: bool | None = None,
        **model_kwargs,
    ) -> "SentenceEncoder":
        """``trust_remote_code``: let a directory with its own Python code (``auto_map``) run it; None
        keeps the current consent (:mod:`sparsecse.artifacts.remote_code`). sparsecse's own shrunk directories
        never need it."""
        with trusting_remote_code(trust_remote_code):
            return cls._load(name_or_path, pooling, max_length, device, **model_kwargs)

    @classmethod
    def _load(cls, name_or_path, pooling, max_length, device, **model_kwargs) -> "SentenceEncoder":
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        path = resolve_model(name_or_path)
        check_device(device)
        if os.path.isdir(path) and exported_format(path):  # written by `sparsecse export`: no torch model
            raise SparseCSEError(f"{path} is an exported {exported_format(path)} model, which only encodes "
                                 "(load it with sparsecse.load_encoder); masks, training, shrinking and saving "
                                 "need the torch model directory it was exported from.")
        register_auto_classes()  # idempotent; sparsecse's own model types load with the installed code
        trust = allow_code(path)
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        except Exception as exc:
            raise SparseCSEError(f"Cannot load a model config from {path} ({_first_line(exc)}).") from None

        get_adapter(config)
        check_tokenizer_files(path)
        try:
            model = AutoModel.from_pretrained(path, config=config, trust_remote_code=trust, **model_kwargs)
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        except Exception as exc:
            raise SparseCSEError(f"Cannot load the model or tokenizer from {path} ({_first_line(exc)}).") from None
        source = "argument"
        if pooling is None:
            pooling, source = configured_pooling(path)
            if pooling is None:
                pooling, source = "cls_before_pooler", "default (no pooling config in the model directory)"
        if max_length is None:
            max_length = configured_max_length(path) or min(
                int(getattr(tokenizer, "model_max_length", 512) or 512), 512
            )
        own = read_model_config(path)
        enc = cls(model, tokenizer, pooling, max_length, source=str(path), pooling_source=source,
                  extra_config={k: v for k, v in own.items() if k not in ("pooling", "max_length")},
                  dense=read_dense(path) if os.path.isdir(path) else None)
        enc.eval()
        return enc.to(pick_device(device))

    # ------------------------------------------------------------------ properties
    @property
    def config(self):
        """The backbone's transformers config."""
        return self.model.config

    @property
    def device(self) -> torch.device:
        """The device its weights are on."""
        return next(self.model.parameters()).device

    @property
    def dim(self) -> int:
        """The sentence embedding's size (the Dense projection's output where there is one)."""
        return int(self.dense.out_features) if self.dense is not None else self.hidden_size

    @property
    def hidden_size(self) -> int:
        """The backbone's hidden size."""
        return int(self.model.config.hidden_size)

    # ------------------------------------------------------------------ forward
    def tokenize(self, sentences: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """The padded, truncated batch of ``sentences`` as tensors on the encoder's device.

        Args:
            sentences: the sentences.
            max_length: the truncation (default: the encoder's).

        Returns:
            The tokenizer's tensors.
        """
        batch = self.tokenizer(
            list(sentences),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_length,
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    def transformer_outputs(self, **features):
        """The backbone's outputs (last_hidden_state, pooler_output where present)."""
        return self.model(**features, return_dict=True)

    def pool(self, outputs, attention_mask: torch.Tensor) -> torch.Tensor:
        """The sentence vectors of a batch, by the encoder's pooling.

        Args:
            outputs: the backbone's outputs.
            attention_mask: the batch's mask.

        Returns:
            [batch, hidden] sentence vectors.
        """
        if self.pooling == "cls":
            return outputs.pooler_output
        hidden = outputs.last_hidden_state
        if self.pooling == "cls_before_pooler":
            return hidden[:, 0]
        if self.pooling == "last":
            return last_token(hidden, attention_mask)
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)

    def forward(self, input_ids=None, attention_mask=None, **features) -> torch.Tensor:
        """The sentence embeddings of a tokenized batch (pooled, then the dense layer where the model has one)."""
        if attention_mask is None:
            raise ValueError("attention_mask is required")
        outputs = self.transformer_outputs(input_ids=input_ids, attention_mask=attention_mask, **features)
        pooled = self.pool(outputs, attention_mask)
        return pooled if self.dense is None else self.dense(pooled.to(self.dense.weight.dtype))

    # ------------------------------------------------------------------ inference
    @torch.inference_mode()
    def encode(
        self,
        sentences: Iterable[str],
        batch_size: int | None = None,
        show_progress: bool = False,
        normalize: bool = False,
        convert_to_numpy: bool = True,
        desc: str = "encoding",
        precision: str = "fp32",
        max_tokens: int | None = None,
    ):
        """Embed sentences: each distinct sentence once, no autograd, in batches of near-equal length.

        All distinct sentences are tokenized up front and sorted by token count, so a batch pads to
        almost nothing. A batch holds at most ``batch_size`` sentences (default 128 on CPU, 512 on a GPU) and at most
        ``max_tokens`` padded tokens (default: batch_size x 64, which keeps long batches small).
        ``precision`` "bf16"/"fp16" runs the model under autocast (fast on GPUs; on CPUs without
        native bf16 it is slower than fp32); embeddings come back as float32 either way.
        """
        sentences = list(sentences)
        unique = list(dict.fromkeys(sentences))
        if batch_size is None:
            batch_size = DEFAULT_BATCH_SIZE["cuda" if self.device.type == "cuda" else "cpu"]
        batch_size = int(batch_size)
        if batch_size < 1:
            raise SparseCSEError(f"The batch size must be at least 1, not {batch_size}.")
        max_tokens = int(max_tokens or batch_size * 64)
        autocast = _autocast(self.device, precision)
        was_training = self.training
        self.eval()
        from tqdm.auto import tqdm

        emb_unique = torch.empty(len(unique), self.dim)
        bar = tqdm(total=len(unique), desc=desc, disable=not show_progress, unit="sent", leave=False)
        try:
            for idx, batch in padded_batches(self.tokenizer, unique, self.max_length, batch_size, max_tokens, "pt"):
                batch = batch.to(self.device)
                with autocast:
                    emb_unique[idx] = self(**batch).float().cpu()
                bar.update(len(idx))
        finally:
            bar.close()
            self.train(was_training)
        position = {s: i for i, s in enumerate(unique)}
        emb = emb_unique[torch.tensor([position[s] for s in sentences], dtype=torch.long)]
        if normalize:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return emb.numpy() if convert_to_numpy else emb

    # ------------------------------------------------------------------ saving
    def save(self, out_dir: str | os.PathLike, extra_config: dict | None = None) -> Path:
        """Write a Hugging Face + sentence-transformers directory (no atomicity: callers wrap it)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out, safe_serialization=True)
        self.tokenizer.save_pretrained(out)
        cfg = {**self.extra_config, **(extra_config or {}), "pooling": self.pooling, "max_length": self.max_length}
        write_model_config(out, cfg)
        write_sentence_transformers_config(out, self.pooling, self.hidden_size, self.max_length,
                                           dense=self.dense)
        return out


DEFAULT_BATCH_SIZE = {"cpu": 128, "cuda": 512}  # larger GPU batches keep the device busy
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_CHOICES = (*PRECISIONS, "auto")


def resolve_precision(precision: str, device: str | torch.device | None = None) -> str:
    """``auto`` -> bf16 on a CUDA GPU that supports it or a CPU with native bf16, else fp32."""
    if precision not in PRECISION_CHOICES:
        raise SparseCSEError(f"Unknown precision {precision!r}; choose one of {', '.join(PRECISION_CHOICES)}.")
    if precision != "auto":
        return precision
    target = pick_device(device)
    if target.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if target.type == "cpu" and cpu_has_native_bf16() else "fp32"


def padded_batches(tokenizer, sentences: Sequence[str], max_length: int, batch_size: int, max_tokens: int,
                   return_tensors: str) -> Iterator[tuple[list[int], Any]]:
    """``sentences`` tokenized once and cut into padded batches of near-equal length, longest first
    (peak memory shows at once): yields (the batch's row indices into ``sentences``, the padded batch)."""
    features = tokenizer(list(sentences), truncation=True, max_length=max_length) if len(sentences) else {}
    lengths = [len(ids) for ids in features.get("input_ids", [])]
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    for idx in length_batches(order, lengths, batch_size, max_tokens):
        rows = {key: [values[i] for i in idx] for key, values in features.items()}
        yield idx, tokenizer.pad(rows, return_tensors=return_tensors)


def length_batches(order: Sequence[int], lengths: Sequence[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Cut ``order`` (indices sorted by length, longest first) into batches of at most ``batch_size``
    items and ``max_tokens`` padded tokens (always at least one item)."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= batch_size or (len(current) + 1) * longest > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _autocast(device: torch.device, precision: str):
    precision = resolve_precision(precision, device)
    if PRECISIONS[precision] is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=PRECISIONS[precision])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def embeddings_to_numpy(x) -> np.ndarray:
    """``x`` as a NumPy array (a tensor detached and moved to the CPU)."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
