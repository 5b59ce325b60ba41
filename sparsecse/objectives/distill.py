"""Distillation from the dense model (sentence-transformers' recipe for smaller models): the student's
sentence embedding is pulled to the teacher's by MSE (or 1 - cosine), optionally plus SimCSE's loss.

The teacher is the dense model a pruned student came from: ``rewind`` passes the scored model, and
``train`` on a shrunk directory finds it in the directory's lineage; ``teacher=PATH`` overrides both.
The teacher may be any sentence encoder sparsecse loads (e.g. ``teacher=all-mpnet-base-v2``), or an
ensemble of several joined by ``+`` (``teacher=all-mpnet-base-v2+paraphrase-MiniLM-L3-v2``: the mean of
their cosine similarities; :mod:`sparsecse.objectives.teachers`).

In training, the teacher embeds the whole corpus once, up front, and its vectors are looked up by
sentence (:mod:`sparsecse.objectives.teacher_cache` keeps them on disk, keyed by the corpus digest;
``teacher_cache=off`` keeps them in memory only, ``teacher_cache=DIR`` names the cache root or one
finished cache). The teacher sees at most the training max_length tokens, like the student. Called on
a batch alone (no sentences), the objective embeds the batch's own tokens, each distinct one once.

``loss=similarity`` compares what sentence similarity uses, not coordinates: the MSE between the
student's and the teacher's in-batch cosine-similarity matrices (off the diagonal; relational
distillation, Park et al. 2019; Tung & Mori 2019). It does not change under a rotation or scaling of
either space, so a teacher of any size serves as it is (no ``teacher_dim``) and the student keeps its
own output space.

``teacher_dim`` says what happens when the teacher's embedding size differs from the student's:
``match`` (default) refuses; ``projection`` trains a linear map student -> teacher size, as
sentence-transformers' distillation does, saved with the student as a sentence-transformers Dense
module (every loader then returns the projected vectors); ``pca`` reduces the teacher's vectors to the
student's size by PCA fitted on the corpus embeddings, the student unchanged.

A teacher of another size lives in other axes than the student, so ``align=fit`` (default) starts
from where the student is: the projection begins as the least-squares map of the student's corpus
embeddings to the teacher's, and the PCA targets are turned onto the student's own axes (a scaled
rotation, orthogonal Procrustes, which keeps their cosine similarities). ``align=off`` starts the
projection at random and takes the PCA axes as they come; the student then first has to relearn its
output space, which destroys it (STS-B dev 86.6 -> 62 for paraphrase-MiniLM-L3-v2 under an MPNet teacher).

``teacher_precision``: ``fp32`` (default), ``bf16`` (autocast; about twice as fast where the CPU or GPU
runs bf16 natively, checked against fp32 on a sample of the corpus, the cosines recorded), ``int8`` (the
teacher as an OpenVINO graph quantized by NNCF, on the CPU, checked the same way; see
:mod:`sparsecse.objectives.teacher_precision`), or ``auto`` (bf16 where native, fp32 elsewhere: emulated bf16
is slower than fp32).

``layer_weight`` > 0 adds layer-wise distillation (TinyBERT, CoFi): the MSE between the student's
hidden states and the teacher's, over the real tokens, for each pair of ``layer_map`` (``auto``: student
layer i of S to teacher layer round(i*T/S), or, for a student whose whole layers were removed, each kept
layer to the teacher layer it was cut from, :func:`~sparsecse.objectives.layer_map.parse_layer_map`; or pairs ``s:t`` joined by ``/`` or ``;``, e.g.
``1:2/2:4/3:6``; layer 0 is the embedding output). It compares token by token, so it needs the
teacher's tokenizer and hidden width.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sparsecse.modeling.encoder import SentenceEncoder, pick_device, resolve_precision
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.teachers import Teacher
from sparsecse.objectives.base import Objective, ObjectiveOutput
from sparsecse.objectives.layer_map import num_layers, parse_layer_map, source_depths
from sparsecse.objectives.validation import choice, non_negative, one_of, optional, text
from sparsecse.objectives.losses import gather_with_grad, info_nce
from sparsecse.objectives.registry import parse_objective_args
from sparsecse.objectives.simcse import SimCSE
from sparsecse.objectives.simcse import two_views

LOSSES = ("mse", "cosine", "similarity")
TEACHER_DIMS = ("match", "projection", "pca")
ALIGNS = ("fit", "off")
TEACHER_PRECISIONS = ("fp32", "bf16", "int8", "auto")  # auto: bf16 where the device runs it natively
ALIGN_SAMPLE = 8192  # corpus sentences the student embeds to fit the alignment (seeded sample)


def lineage_teacher(lineage: dict[str, Any] | None) -> str | None:
    """The dense model recorded in a model directory's lineage (shrunk from, or scored), if any."""
    while lineage:
        for key in ("shrunk_from", "mask_scored_model", "scored_model"):
            if lineage.get(key):
                return str(lineage[key])
        lineage = lineage.get("parent")
    return None


def with_default_teacher(objective: str, objective_args: str | dict | None, teacher: str | None):
    """``objective_args`` with ``teacher`` filled in for the distill objective when the user gave none."""
    if objective != "distill" or teacher is None:
        return objective_args

    params = dict(objective_args) if isinstance(objective_args, dict) else parse_objective_args(objective_args)
    params.setdefault("teacher", teacher)
    return params


def pca_components(embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` principal axes (``[k, D]``, rows orthonormal) of ``embeddings`` ``[N, D]`` and the
    share of the variance each keeps. Targets are ``embeddings @ axes.T``: the axes are fitted on
    centred data but applied without centring, as sentence-transformers' PCA Dense layer does, so a
    vector's component along the mean direction is kept."""
    x = np.asarray(embeddings, dtype=np.float64)
    if len(x) <= k:
        raise SparseCSEError(f"teacher_dim=pca fits {k} axes and needs more than {k} corpus sentences, not {len(x)}.")
    x = x - x.mean(0, keepdims=True)
    _, sv, vt = np.linalg.svd(x, full_matrices=False)
    var = sv ** 2
    return vt[:k].astype(np.float32), (var[:k] / var.sum()).astype(np.float64)


def similarity_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MSE between the in-batch cosine-similarity matrices of ``student`` ``[B, d]`` and ``teacher``
    ``[B, D]`` (``d`` and ``D`` may differ), over the pairs off the diagonal."""
    s, t = F.normalize(student.float(), dim=-1), F.normalize(teacher.float(), dim=-1)
    off = ~torch.eye(len(s), dtype=torch.bool, device=s.device)
    return F.mse_loss((s @ s.T)[off], (t @ t.T)[off])


def least_squares_map(source: np.ndarray, target: np.ndarray, ridge: float = 1e-6) -> tuple[np.ndarray, np.ndarray, float]:
    """The affine map ``source @ weight.T + bias`` closest to ``target`` in squared error (``[N, d]`` to
    ``[N, D]``; a tiny ridge, relative to the data's scale, keeps it defined), and the share of the
    target's variance it explains (R²)."""
    x = np.asarray(source, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    xa = np.hstack([x, np.ones((len(x), 1))])
    gram = xa.T @ xa
    gram[np.arange(x.shape[1]), np.arange(x.shape[1])] += ridge * np.trace(gram) / len(gram)
    solution = np.linalg.solve(gram, xa.T @ y)
    residual = ((xa @ solution - y) ** 2).sum()
    r2 = 1.0 - residual / max(((y - y.mean(0)) ** 2).sum(), 1e-300)
    return solution[:-1].T.astype(np.float32), solution[-1].astype(np.float32), float(r2)


def procrustes_rotation(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """The rotation ``R`` (orthogonal) and scale ``s`` minimising ``||s * source @ R - target||`` (scaled
    orthogonal Procrustes; both ``[N, k]``): applied to vectors, it keeps their cosine similarities."""
    x = np.asarray(source, dtype=np.float64)
    u, sv, vt = np.linalg.svd(x.T @ np.asarray(target, dtype=np.float64))
    return (u @ vt).astype(np.float32), float(sv.sum() / max((x ** 2).sum(), 1e-300))


class Distill(Objective):
    """Distillation: the student learns a teacher's sentence embeddings (MSE or 1 - cosine), optionally with SimCSE's
    loss and layer targets."""
    name = "distill"
    description = ("MSE (or 1 - cosine) between the student's and a teacher's sentence embeddings; teacher "
                   "embeddings computed once per corpus and cached on disk; teacher=A+B for an ensemble; "
                   "teacher_dim=projection|pca for a teacher of another size; simcse_weight adds SimCSE's loss.")
    paper = "Reimers & Gurevych 2020 (sentence-transformers MSE distillation); Kwon et al. 2022"
    defaults = {"teacher": None, "loss": "mse", "simcse_weight": 0.0, "temperature": 0.05,
                "teacher_dim": "match", "align": "fit", "teacher_cache": "auto", "layer_weight": 0.0,
                "layer_map": "auto", "teacher_precision": "fp32"}
    # sentence-transformers' distillation example (model_distillation.py): MSELoss, lr 1e-4, batch 64
    training_defaults = {"lr": 1e-4, "batch_size": 64}
    checks = {"teacher": optional(text), "loss": one_of(*LOSSES), "simcse_weight": non_negative,
              "teacher_dim": one_of(*TEACHER_DIMS), "align": one_of(*ALIGNS), "teacher_cache": text, "layer_weight": non_negative,
              "layer_map": text, "teacher_precision": one_of(*TEACHER_PRECISIONS)}
    uses_sentences = True

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        choice("loss", self.params["loss"], LOSSES)
        choice("teacher_dim", self.params["teacher_dim"], TEACHER_DIMS)
        choice("align", self.params["align"], ALIGNS)
        self.params["simcse_weight"] = non_negative("simcse_weight", self.params["simcse_weight"])
        teacher = self.params["teacher"] or lineage_teacher(getattr(encoder, "extra_config", {}).get("lineage"))
        if not teacher:
            raise SparseCSEError("The distill objective needs a teacher: pass teacher=PATH in --objective-args "
                                 "(the model's lineage records no dense model).")
        self.params["teacher"] = str(teacher)
        loaded = Teacher(teacher)
        self.teachers = loaded  # one encoder or an ensemble; not an nn.Module, so neither trained nor saved
        self.same_tokenizer = loaded.same_tokenizer(encoder)
        self._check_dims(encoder, loaded)
        self.params["layer_weight"] = non_negative("layer_weight", self.params["layer_weight"])
        self.layer_pairs: list[tuple[int, int]] = []
        if self.params["layer_weight"] == 0 and str(self.params["layer_map"]) != "auto":
            raise SparseCSEError("layer_map takes effect only with layer_weight > 0 (layer-wise distillation).")
        if self.params["layer_weight"] > 0:
            self.layer_pairs = self._check_layers(encoder, loaded)
        self.projection, self.fresh_projection = None, False
        if self.params["teacher_dim"] == "projection":
            self.fresh_projection = encoder.dense is None
            self.projection = self._attach_projection(encoder, loaded.dim)
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}
        self._precision = "fp32"  # of the teacher's forward on a batch (embedded on demand)
        self.teacher_rows = 0  # sentences the teacher has embedded in forward (each distinct one once)
        self._table: torch.Tensor | None = None  # teacher targets per corpus row, after prepare_corpus
        self._rows: dict[str, int] = {}
        self.pca_axes: torch.Tensor | None = None
        self.teacher_info: dict[str, Any] = {"teacher_source": loaded.source, "teacher_dim": loaded.dim,
                                             "teachers": [str(m.source) for m in loaded.members],
                                             "student_dim": encoder.dim, "teacher_dim_mode": self.params["teacher_dim"],
                                             "same_tokenizer": self.same_tokenizer,
                                             "layer_weight": self.params["layer_weight"],
                                             "layer_pairs": [list(p) for p in self.layer_pairs] or None}
        self.simcse = None
        if self.params["simcse_weight"] > 0:

            self.simcse = SimCSE(encoder, temperature=self.params["temperature"])

    def _check_dims(self, student, teacher) -> None:
        mode, sd, td = self.params["teacher_dim"], student.dim, teacher.dim
        if self.params["loss"] == "similarity":
            if mode != "match":
                raise SparseCSEError("loss=similarity compares in-batch similarities, which a teacher of any size "
                                     f"has; it takes no teacher_dim={mode} (leave teacher_dim out).")
            return
        if mode == "match" and td != sd:
            raise SparseCSEError(f"The teacher {teacher.source} embeds in {td} dimensions but the student in {sd}; "
                                 "distillation needs the same embedding size (or teacher_dim=projection|pca).")
        if mode == "pca" and td < sd:
            raise SparseCSEError(f"teacher_dim=pca reduces the teacher's {td} dimensions to the student's {sd}, "
                                 "which is more; use teacher_dim=projection.")

    def _check_layers(self, student, teachers: Teacher) -> list[tuple[int, int]]:
        teacher = teachers.single("Layer-wise distillation (layer_weight)")
        if not self.same_tokenizer:
            raise SparseCSEError(f"Layer-wise distillation (layer_weight) compares hidden states token by token, "
                                 f"so it needs the student's tokenizer; the teacher {teacher.source} tokenizes "
                                 "differently.")
        if teacher.hidden_size != student.hidden_size:
            raise SparseCSEError(f"Layer-wise distillation (layer_weight) needs the same hidden width; the teacher "
                                 f"{teacher.source} has {teacher.hidden_size}, the student {student.hidden_size}.")
        return parse_layer_map(self.params["layer_map"], num_layers(student), num_layers(teacher),
                               source_depths(student))

    @staticmethod
    def _attach_projection(encoder, teacher_dim: int) -> nn.Linear:
        """The student's Dense projection to ``teacher_dim``: its own if it already has one of that
        size (a student distilled before), else a new one (nn.Linear's init, as sentence-transformers)."""
        dense = encoder.dense
        if dense is not None:
            if dense.out_features != teacher_dim:
                raise SparseCSEError(f"The student already projects to {dense.out_features} dimensions, not the "
                                     f"teacher's {teacher_dim}.")
            return dense
        dense = nn.Linear(encoder.hidden_size, teacher_dim).to(next(encoder.parameters()).device)
        encoder.dense = dense
        return dense

    @property
    def teacher(self) -> SentenceEncoder:
        """The one teacher encoder, refused for an ensemble (see ``teachers``)."""
        return self.teachers.single("Distill.teacher")

    # ------------------------------------------------------------------ teacher targets
    def prepare_corpus(self, sentences: Sequence[str], corpus_path: str | os.PathLike | None = None,
                       max_length: int | None = None, device: str | torch.device | None = None,
                       show_progress: bool = True) -> None:
        """Embed every corpus sentence with the teacher once (from the disk cache when ``corpus_path``
        is a file and teacher_cache is not off); training batches then look their targets up. With ``on_demand``
        (a time-limited run) each batch's targets are embedded when it is drawn instead, where nothing needs the
        whole corpus first (the teacher shares the student's tokenizer, runs in fp32 or bf16, and no PCA or
        projection is fitted on the corpus)."""
        if max_length is not None:
            self.teachers.set_max_length(max_length)
        device = pick_device(device)
        chosen = self.params["teacher_precision"]
        precision = chosen if chosen == "int8" else resolve_precision(chosen, device)
        if self.on_demand and self.same_tokenizer and precision in ("fp32", "bf16") and \
                self.params["teacher_dim"] != "pca" and not (self.params["align"] == "fit" and self.fresh_projection):
            self._precision = precision
            self.teacher_info.update(teacher_precision=precision, on_demand=True)
            return
        emb, rows, info = self.teachers.corpus_embeddings(sentences, corpus_path, str(self.params["teacher_cache"]),
                                                          device, show_progress, precision)
        self.teacher_info["teacher_precision"] = precision
        self.teacher_info.update(info)
        table = torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32))
        if self.params["teacher_dim"] == "pca":
            axes, kept = pca_components(emb, self.encoder.dim)
            self.pca_axes = torch.from_numpy(axes)
            table = table @ self.pca_axes.T
            self.teacher_info["pca_variance_kept"] = float(kept.sum())
        self._table, self._rows = table, rows
        if self.params["align"] == "fit" and (self.fresh_projection or self.pca_axes is not None):
            self._align(emb, max_length)

    def _align(self, teacher_emb: np.ndarray, max_length: int | None) -> None:
        """Fit a fresh projection (least squares) or turn the PCA targets (Procrustes) to the student's
        corpus embeddings, on a seeded sample of the corpus (see the module's docstring)."""
        unique = list(self._rows)
        pick = np.random.default_rng(0).permutation(len(unique))[:ALIGN_SAMPLE]
        pick.sort()
        student = self.encoder
        kept_length, kept_dense = student.max_length, student.dense
        if max_length is not None:
            student.max_length = int(max_length)
        if self.fresh_projection:
            student.dense = None  # the fit maps the pooled embedding; the new Dense is what it sets
        try:
            student_emb = student.encode([unique[i] for i in pick], convert_to_numpy=True)
        finally:
            student.max_length, student.dense = kept_length, kept_dense
        rows = np.array([self._rows[unique[i]] for i in pick])
        if self.pca_axes is not None:
            targets = self._table[rows].numpy()
            rotation, scale = procrustes_rotation(targets, student_emb)
            self.pca_axes = scale * torch.from_numpy(rotation).T @ self.pca_axes
            self._table = torch.from_numpy(np.ascontiguousarray(teacher_emb, dtype=np.float32)) @ self.pca_axes.T
            fitted = self._table[rows].numpy()
            r2 = 1.0 - ((fitted - student_emb) ** 2).sum() / ((student_emb - student_emb.mean(0)) ** 2).sum()
            self.teacher_info["align"] = {"mode": "procrustes", "sample": len(pick), "scale": scale,
                                          "student_r2": float(r2)}
        else:
            weight, bias, r2 = least_squares_map(student_emb, teacher_emb[rows])
            with torch.no_grad():
                self.projection.weight.copy_(torch.from_numpy(weight))
                self.projection.bias.copy_(torch.from_numpy(bias))
            self.teacher_info["align"] = {"mode": "least_squares", "sample": len(pick), "teacher_r2": r2}

    @torch.no_grad()
    def teacher_embeddings(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teacher's embedding of every row, computing only rows never seen before."""
        if not self.same_tokenizer:
            raise SparseCSEError(f"The teacher {self.teachers.source} tokenizes differently from the student; "
                                 "distillation on token ids alone needs the same tokenizer (training passes the "
                                 "sentences).")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        keys = [tuple(row[m.bool()].tolist()) for row, m in zip(ids.cpu(), mask.cpu())]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        todo = list({keys[i]: i for i in todo}.values())  # a sentence twice in one batch: embed it once
        if todo:
            rows = torch.tensor(todo, device=ids.device)
            with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=self._precision == "bf16"):
                emb = self.teachers.embed({k: v[rows] for k, v in batch.items()})
            if self.pca_axes is not None:
                emb = emb @ self.pca_axes.to(emb.device).T
            for i, e in zip(todo, emb.cpu()):
                self._cache[keys[i]] = e
            self.teacher_rows += len(todo)
        return torch.stack([self._cache[k] for k in keys]).to(ids.device)

    def targets(self, batch: dict[str, torch.Tensor], sentences: Sequence[str] | None) -> torch.Tensor:
        """The teacher's embeddings of a batch: from the cached table where the sentences are known, else computed.

        Args:
            batch: the tokenized batch.
            sentences: its sentences (None: compute).

        Returns:
            [batch, dim] targets.
        """
        if self._table is None or sentences is None:
            if self.params["teacher_dim"] == "pca" and self.pca_axes is None:
                raise SparseCSEError("teacher_dim=pca needs the corpus to fit the PCA on (prepare_corpus).")
            return self.teacher_embeddings(batch)
        try:
            index = torch.tensor([self._rows[s] for s in sentences])
        except KeyError as exc:
            raise SparseCSEError(f"The sentence {str(exc)[:60]} is not in the corpus the teacher embedded.") from None
        device = batch["input_ids"].device
        if device.type == "cuda":  # looked up where the step runs, the table moved there once
            if self._table.device != device:
                self._table = self._table.to(device)
            # from pinned memory the copy does not wait for the steps queued before it (pageable memory would)
            index = index.pin_memory().to(device, non_blocking=True)
        return self._table[index].to(device)

    def forward(self, batch: dict[str, torch.Tensor], sentences: Sequence[str] | None = None) -> ObjectiveOutput:
        """The distillation loss of a batch (plus SimCSE's and the layers' where asked).

        Args:
            batch: the tokenized batch.
            sentences: its sentences, to read the cached teacher embeddings.

        Returns:
            The loss and its logs.
        """
        target = self.targets(batch, sentences)
        if self.simcse is not None:

            z1, z2 = two_views(self.encoder, batch)
            contrastive, _ = info_nce(self.simcse.project(z1), self.simcse.project(z2), self.params["temperature"])
            hidden = self._student_hidden(batch)[1] if self.layer_pairs else None
        elif self.layer_pairs:
            z1, hidden = self._student_hidden(batch)
            contrastive = None
        else:
            z1, contrastive, hidden = self.encoder(**batch), None, None
        student = z1.float()
        if self.params["loss"] == "mse":
            distill = F.mse_loss(student, target)
        elif self.params["loss"] == "similarity":
            # pairs across the whole global batch in a data-parallel run (see losses.gathering)
            distill = similarity_loss(gather_with_grad(student), gather_with_grad(target))
        else:
            distill = (1.0 - F.cosine_similarity(student, target, dim=-1)).mean()
        logs = {"distill_loss": distill.detach()}  # tensors: read when the loop logs
        loss = distill
        if contrastive is not None:
            loss = distill + self.params["simcse_weight"] * contrastive
            logs["simcse_loss"] = contrastive.detach()
        if hidden is not None:
            layer = self.layer_loss(hidden, batch)
            loss = loss + self.params["layer_weight"] * layer
            logs["layer_loss"] = layer.detach()
        return ObjectiveOutput(loss, logs)

    def _student_hidden(self, batch: dict[str, torch.Tensor]):
        """The student's sentence embedding and its hidden states (one forward pass)."""
        enc = self.encoder
        outputs = enc.transformer_outputs(**batch, output_hidden_states=True)
        pooled = enc.pool(outputs, batch["attention_mask"])
        if enc.dense is not None:
            pooled = enc.dense(pooled.to(enc.dense.weight.dtype))
        return pooled, outputs.hidden_states

    def layer_loss(self, student_hidden, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean over the layer pairs of the MSE between student and teacher hidden states on real tokens."""
        teacher = self.teacher
        if teacher.device != batch["input_ids"].device:
            teacher.to(batch["input_ids"].device)
        with torch.no_grad():
            teacher_hidden = teacher.transformer_outputs(**batch, output_hidden_states=True).hidden_states
        mask = batch["attention_mask"].unsqueeze(-1).float()
        tokens = mask.sum() * student_hidden[0].shape[-1]
        losses = [(((student_hidden[s].float() - teacher_hidden[t].float()) ** 2) * mask).sum() / tokens
                  for s, t in self.layer_pairs]
        return torch.stack(losses).mean()
