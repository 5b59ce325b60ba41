"""Distillation from the dense model (sentence-transformers' recipe for smaller models): the student's
sentence embedding is pulled to the teacher's by MSE (or 1 - cosine), optionally plus SimCSE's loss.

The teacher is the dense model a pruned student came from: ``rewind`` passes the scored model, and
``train`` on a shrunk directory finds it in the directory's lineage; ``teacher=PATH`` overrides both.
The teacher sees exactly the student's tokens (the tokenizers must match, and are checked), and each
distinct sentence is embedded by the teacher once per run: embeddings are cached by the sentence's
token ids, so later epochs and repeated sentences cost the teacher nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sparsecse.errors import SparseCSEError
from sparsecse.objectives.base import Objective, ObjectiveOutput
from sparsecse.objectives.validation import choice, non_negative, one_of, optional, text

LOSSES = ("mse", "cosine")
_PROBE = "The quick brown fox, naïvely 123 jumps; over the lazy dog's Ünïcode."


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
    from sparsecse.objectives.registry import parse_objective_args

    params = dict(objective_args) if isinstance(objective_args, dict) else parse_objective_args(objective_args)
    params.setdefault("teacher", teacher)
    return params


def check_compatible(student, teacher) -> None:
    """Refuse a teacher whose embedding size or tokenizer differs from the student's."""
    if teacher.dim != student.dim:
        raise SparseCSEError(f"The teacher {teacher.source} embeds in {teacher.dim} dimensions but the student in "
                             f"{student.dim}; distillation needs the same embedding size.")
    same_vocab = teacher.tokenizer.get_vocab() == student.tokenizer.get_vocab()
    if not same_vocab or teacher.tokenizer(_PROBE)["input_ids"] != student.tokenizer(_PROBE)["input_ids"]:
        raise SparseCSEError(f"The teacher {teacher.source} tokenizes differently from the student; "
                             "distillation needs the same tokenizer.")


class Distill(Objective):
    name = "distill"
    description = ("MSE (or 1 - cosine) between the student's and the dense teacher's sentence embeddings; "
                   "teacher embeddings cached per sentence; simcse_weight adds SimCSE's loss.")
    paper = "Reimers & Gurevych 2020 (sentence-transformers MSE distillation); Kwon et al. 2022"
    defaults = {"teacher": None, "loss": "mse", "simcse_weight": 0.0, "temperature": 0.05}
    # sentence-transformers' distillation example (model_distillation.py): MSELoss, lr 1e-4, batch 64
    training_defaults = {"lr": 1e-4, "batch_size": 64}
    checks = {"teacher": optional(text), "loss": one_of(*LOSSES), "simcse_weight": non_negative}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        choice("loss", self.params["loss"], LOSSES)
        self.params["simcse_weight"] = non_negative("simcse_weight", self.params["simcse_weight"])
        teacher = self.params["teacher"] or lineage_teacher(getattr(encoder, "extra_config", {}).get("lineage"))
        if not teacher:
            raise SparseCSEError("The distill objective needs a teacher: pass teacher=PATH in --objective-args "
                                 "(the model's lineage records no dense model).")
        from sparsecse.encoder import SentenceEncoder

        self.params["teacher"] = str(teacher)
        loaded = SentenceEncoder.load(teacher, device="cpu")
        check_compatible(encoder, loaded)
        loaded.eval()
        for p in loaded.parameters():
            p.requires_grad_(False)
        self._teacher = [loaded]  # a list, so it is neither trained nor saved with the objective
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}
        self.teacher_rows = 0  # sentences the teacher has embedded (each distinct one once)
        self.simcse = None
        if self.params["simcse_weight"] > 0:
            from sparsecse.objectives.simcse import SimCSE

            self.simcse = SimCSE(encoder, temperature=self.params["temperature"])

    @property
    def teacher(self):
        return self._teacher[0]

    @torch.no_grad()
    def teacher_embeddings(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teacher's embedding of every row, computing only rows never seen before."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        keys = [tuple(row[m.bool()].tolist()) for row, m in zip(ids.cpu(), mask.cpu())]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        todo = list({keys[i]: i for i in todo}.values())  # a sentence twice in one batch: embed it once
        if todo:
            teacher = self.teacher
            if teacher.device != ids.device:
                teacher.to(ids.device)
            rows = torch.tensor(todo, device=ids.device)
            emb = teacher(**{k: v[rows] for k, v in batch.items()}).float()
            for i, e in zip(todo, emb.cpu()):
                self._cache[keys[i]] = e
            self.teacher_rows += len(todo)
        return torch.stack([self._cache[k] for k in keys]).to(ids.device)

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        target = self.teacher_embeddings(batch)
        if self.simcse is not None:
            from sparsecse.objectives.losses import info_nce
            from sparsecse.objectives.simcse import two_views

            z1, z2 = two_views(self.encoder, batch)
            contrastive, _ = info_nce(self.simcse.project(z1), self.simcse.project(z2), self.params["temperature"])
        else:
            z1, contrastive = self.encoder(**batch), None
        student = z1.float()
        if self.params["loss"] == "mse":
            distill = F.mse_loss(student, target)
        else:
            distill = (1.0 - F.cosine_similarity(student, target, dim=-1)).mean()
        logs = {"distill_loss": float(distill.detach())}
        loss = distill
        if contrastive is not None:
            loss = distill + self.params["simcse_weight"] * contrastive
            logs["simcse_loss"] = float(contrastive.detach())
        return ObjectiveOutput(loss, logs)
