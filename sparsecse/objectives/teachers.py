"""The teacher of a distillation: one sentence encoder, or an ensemble of several.

``teacher=A+B`` names an ensemble. Its target for a sentence is the concatenation of the members'
L2-normalised embeddings, each scaled by 1/sqrt(k): the cosine similarity of two targets is then the
mean of the members' cosine similarities, which is how an ensemble of sentence encoders scores a pair.
Two encoders trained on different data err on different pairs, so the ensemble is better than either
(on the 7 STS tasks here: all-mpnet-base-v2 80.53 and paraphrase-MiniLM-L3-v2 78.67 alone, 81.65
together), and a student distilled from it can exceed its best member (the ensemble teacher of Hinton
et al. 2015, "Distilling the knowledge in a neural network"). ``loss=similarity`` takes the ensemble as
it is; ``mse`` needs ``teacher_dim=projection|pca`` since its size is the sum of the members'.

Each member's corpus embeddings are cached on disk on their own (:mod:`sparsecse.objectives.teacher_cache`),
so an ensemble reuses what single-teacher runs computed, and the other way round.

Example::

    teacher = Teacher("all-mpnet-base-v2+paraphrase-MiniLM-L3-v2")
    teacher.dim        # 768 + 384
    targets = teacher.embed(student.tokenize(["a man plays a guitar"]))  # token ids: same tokenizers only
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.objectives import processes, teacher_cache
from sparsecse.objectives.masked_lm import freeze
from sparsecse.objectives.teacher_precision import precision_check, teacher_encoder

SEPARATOR = "+"
_PROBE = "The quick brown fox, naïvely 123 jumps; over the lazy dog's Ünïcode."
_CACHE_FIELDS = ("key", "cache_dir", "teacher_digest", "corpus_sha256", "max_length", "pooling", "precision_check")


def teacher_names(spec: str | os.PathLike) -> list[str]:
    """The models ``spec`` names: one, or several joined by ``+`` (a path that exists is one model even
    if its name holds a ``+``)."""
    spec = str(spec).strip()
    if SEPARATOR not in spec or os.path.exists(spec):
        return [spec]
    names = [name.strip() for name in spec.split(SEPARATOR)]
    if not all(names):
        raise SparseCSEError(f"teacher={spec!r} names an empty model; join models with + as in "
                             "teacher=all-mpnet-base-v2+paraphrase-MiniLM-L3-v2.")
    if len(set(names)) != len(names):
        raise SparseCSEError(f"teacher={spec!r} names a model twice; an ensemble's members are distinct models.")
    return names


def same_tokenizer(student, teacher) -> bool:
    """Whether both encoders turn text into the same token ids (vocabulary and a probe sentence)."""
    return (teacher.tokenizer.get_vocab() == student.tokenizer.get_vocab()
            and teacher.tokenizer(_PROBE)["input_ids"] == student.tokenizer(_PROBE)["input_ids"])


def ensemble_vectors(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """One member's vectors as they are; several members' L2-normalised and joined, scaled by 1/sqrt(k)
    (cosine of two joined vectors = mean of the members' cosines)."""
    if len(parts) == 1:
        return parts[0]
    scale = len(parts) ** -0.5
    return torch.cat([F.normalize(p.float(), dim=-1) * scale for p in parts], dim=-1)


class Teacher:
    """One or several frozen sentence encoders (see the module's docstring); not an ``nn.Module``, so it
    is neither trained nor saved with the objective that holds it."""

    def __init__(self, spec: str | os.PathLike):
        self.members = [freeze(SentenceEncoder.load(name, device="cpu")) for name in teacher_names(spec)]

    @property
    def source(self) -> str:
        """The teacher's members' sources, joined as an ensemble is named."""
        return SEPARATOR.join(str(m.source) for m in self.members)

    @property
    def is_ensemble(self) -> bool:
        """Whether the teacher has several members."""
        return len(self.members) > 1

    @property
    def dim(self) -> int:
        """The width of the teacher's embeddings (its members' concatenated)."""
        return sum(m.dim for m in self.members)

    def same_tokenizer(self, student) -> bool:
        """Whether every member tokenizes as ``student`` does."""
        return all(same_tokenizer(student, m) for m in self.members)

    def single(self, what: str) -> SentenceEncoder:
        """The one member, for what needs one model (``what``, e.g. layer-wise distillation); refused for an ensemble."""
        if self.is_ensemble:
            raise SparseCSEError(f"{what} needs one teacher; teacher={self.source} is an ensemble of "
                                 f"{len(self.members)}.")
        return self.members[0]

    def set_max_length(self, max_length: int) -> None:
        """Truncate every member's input at ``max_length`` tokens."""
        for m in self.members:
            m.max_length = int(max_length)

    @torch.no_grad()
    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teacher's vectors for a tokenized batch (every member must share the student's tokenizer)."""
        device = batch["input_ids"].device
        parts = []
        for m in self.members:
            if m.device != device:
                m.to(device)
            parts.append(m(**batch).float())
        return ensemble_vectors(parts)

    def corpus_embeddings(self, sentences: Sequence[str], corpus_path: str | os.PathLike | None,
                          cache_setting: str, device: torch.device,
                          show_progress: bool, precision: str = "fp32",
                          ) -> tuple[np.ndarray, dict[str, int], dict[str, Any]]:
        """(the teacher's vectors, {sentence: row}, cache info) for a whole corpus: each member's from its
        disk cache when ``corpus_path`` is a file and ``cache_setting`` is not ``off``, else embedded in
        memory; in a data-parallel run the processes share the work (each embeds its share, process 0
        alone writes the cache). ``cache_setting``: ``auto``, a cache root, or (one teacher only) one finished cache.
        ``precision``: ``fp32``, ``bf16`` or ``int8`` (checked against fp32 on a sample, see
        :mod:`sparsecse.objectives.teacher_precision`)."""
        use_cache = corpus_path is not None and cache_setting != "off"
        explicit = use_cache and teacher_cache.is_cache(cache_setting)
        if explicit and self.is_ensemble:
            raise SparseCSEError(f"teacher_cache={cache_setting} names one finished cache, but the ensemble "
                                 f"{self.source} has one per member; pass the cache root instead.")
        if use_cache:
            rows = {s: i for i, s in reversed(list(enumerate(sentences)))}
        else:
            unique = list(dict.fromkeys(sentences))
            rows = {s: i for i, s in enumerate(unique)}
        parts, infos = [], []
        for member in self.members:
            member.to(device)
            try:
                if use_cache:
                    emb, info = teacher_cache.teacher_embeddings(
                        member, corpus_path, cache_dir=None if cache_setting == "auto" or explicit else cache_setting,
                        cache_path=cache_setting if explicit else None, show_progress=show_progress,
                        precision=precision)
                    _check_cached(emb, member, cache_setting, len(sentences))
                    infos.append({k: info.get(k) for k in _CACHE_FIELDS})
                else:
                    encode = teacher_encoder(member, precision, unique)
                    check = precision_check(member, unique, precision, False, encode) if precision != "fp32" else None
                    # each process of a data-parallel run embeds its share; every one gets them all
                    emb = np.asarray(processes.sharded(
                        lambda texts: encode(texts, show_progress=show_progress, desc="teacher embeddings"), unique),
                        dtype=np.float32)
                    infos.append({"key": None, "max_length": member.max_length, "precision_check": check})
            finally:
                member.to("cpu")
            parts.append(torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32)))
        info = infos[0] if len(infos) == 1 else {k: [i.get(k) for i in infos] for k in infos[0]}
        return ensemble_vectors(parts).numpy(), rows, info


def _check_cached(emb: np.ndarray, member: SentenceEncoder, setting: str, sentences: int) -> None:
    if emb.shape[1] != member.dim:
        raise SparseCSEError(f"The teacher-embedding cache {setting} holds {emb.shape[1]}-dimensional "
                             f"vectors, not the teacher's {member.dim}.")
    if len(emb) != sentences:
        raise SparseCSEError(f"The teacher-embedding cache holds {len(emb)} rows for a corpus of "
                             f"{sentences} sentences.")
