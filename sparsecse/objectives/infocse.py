"""InfoCSE (Wu et al. 2022): SimCSE + λ · MLM loss of an auxiliary network fed the sentence vector.

The auxiliary network is a masked LM cut in two. Its lower ``frozen_layers`` layers (frozen, with
its embeddings) encode the masked sentence; their states at every position but the first are
detached and placed after the encoder's final [CLS] vector; ``extra_layers`` trainable transformer
layers and the MLM head then predict the masked tokens. The encoder receives the MLM gradient only
through that [CLS] vector, so reconstruction has to rely on the sentence vector.

Choices (documented in the README, "Objectives"):

- λ defaults to 1e-5 and the mask ratio to 0.40: the published scripts (caskcsg/sentemb,
  ``mlm_weight=0.00001``, ``mlm_rate=0.4``) and the paper's own ablations (Tables 7 and 8: best
  λ = 1e-5, best mask rate 40%); the paper's §4.2 text says λ = 0.005, which its Table 8 shows
  costs 5 STS-B points. The published scripts also use the BatchNorm projector (``--batchnorm``).
- The extra layers start as copies of the masked LM's top ``extra_layers`` layers (the paper's
  "without pre-training" variant); the paper pre-trains them Condenser-style first, which needs a
  Condenser checkpoint's extra head weights that a plain masked LM does not have.
- If the masked LM's width differs from the encoder's, a trainable linear map takes the sentence
  vector to the masked LM's width (the paper's encoder and auxiliary network share BERT's width).
- Masking follows BERT (80% [MASK], 10% random, 10% unchanged) over real, non-special tokens.
- The sentence vector is the final [CLS] state (``sentence_vector=cls``, before any pooler or
  projector, as the paper's "12-cls"); for a mean-pooled encoder such as all-MiniLM-L6-v2 the default
  ``auto`` uses the mean-pooled embedding instead (``pooled``), the vector that model is evaluated on.
- The MLM loss covers both dropout views, each masked independently, as the published code does
  (one cross-entropy over the masked tokens of all 2B rows).
- Training defaults follow the published scripts: lr 7e-6, 2 epochs, batch 64, length 32; the mask
  ratio is 0.40 for BERT-base and 0.30 for BERT-large (``InfoCSE-bert-large.sh``). Other backbones
  (the paper has no RoBERTa setting) take BERT-base's.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.objectives import validation
from sparsecse.objectives.base import ObjectiveOutput
from sparsecse.objectives.diffcse import ProjectionMLP
from sparsecse.objectives.losses import info_nce
from sparsecse.objectives.masked_lm import (FrozenPartsMixin, choose_positions, corrupt, load_masked_lm,
                                            mask_token_id, truncated_backbone)
from sparsecse.objectives.simcse import SimCSE, initializer_range
from sparsecse.objectives.backbones import with_backbone_defaults


class InfoCSE(FrozenPartsMixin, SimCSE):
    """InfoCSE (Wu et al. 2022): SimCSE plus the MLM loss of an auxiliary network that reconstructs the sentence from
    its vector."""
    name = "infocse"
    description = ("SimCSE + λ·MLM loss of an auxiliary network (frozen lower masked-LM layers + trainable "
                   "layers) that must reconstruct the sentence from the encoder's [CLS] (or pooled) vector.")
    paper = "Wu et al. 2022 (InfoCSE, EMNLP Findings): BERT-base STS avg 78.85 (SimCSE 76.25)"
    defaults = {"temperature": 0.05, "mlp": True, "batchnorm": True, "mlm": None, "mask_ratio": 0.40,
                "mlm_weight": 1e-5, "frozen_layers": 6, "extra_layers": 2, "sentence_vector": "auto"}
    checks = {"batchnorm": validation.flag, "mlm": validation.text, "mask_ratio": validation.fraction, "mlm_weight": validation.non_negative,
              "frozen_layers": validation.at_least(0), "extra_layers": validation.at_least(1),
              "sentence_vector": validation.one_of("auto", "cls", "pooled")}
    backbone_defaults = {"bert-large": {"mask_ratio": 0.30}}  # the published BERT-large script
    training_defaults = {"lr": 7e-6, "epochs": 2, "batch_size": 64}  # the published scripts (base and large)
    requires = {"mlm": "a masked LM with the encoder's vocabulary, by name or path; "
                       "the paper uses a BERT-base (Condenser) masked LM"}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **with_backbone_defaults(type(self), getattr(encoder, "config", None), params))
        self.mask_ratio = validation.fraction("mask_ratio", self.params["mask_ratio"])
        self.mlm_weight = validation.non_negative("mlm_weight", self.params["mlm_weight"])
        vector = validation.choice("sentence_vector", self.params["sentence_vector"], ("auto", "cls", "pooled"))
        if vector == "auto":
            vector = "pooled" if encoder.pooling == "mean" else "cls"
        self.sentence_vector = vector
        if validation.flag("batchnorm", self.params["batchnorm"]):
            self.mlp = ProjectionMLP(encoder.dim, initializer_range(encoder))
        self.mask_id = mask_token_id(encoder.tokenizer, "InfoCSE")
        self.special_ids = list(encoder.tokenizer.all_special_ids)

        mlm = load_masked_lm(self.params["mlm"], encoder, "auxiliary MLM")
        depth = len(mlm.layers())
        frozen = validation.count("frozen_layers", self.params["frozen_layers"], minimum=0)
        extra = validation.count("extra_layers", self.params["extra_layers"], minimum=1)
        if frozen > depth or extra > depth:
            raise SparseCSEError(
                f"The auxiliary MLM at {mlm.source} has {depth} layers; frozen_layers ({frozen}) and "
                f"extra_layers ({extra}) must each be at most that."
            )
        self._set_frozen("lower", truncated_backbone(mlm.backbone, slice(0, frozen), copy_layers=False))
        self.upper = truncated_backbone(mlm.backbone, slice(depth - extra, depth), copy_layers=True)
        self.mlm_head = copy.deepcopy(mlm.head)  # its own (untied) output matrix, trained
        self.sentence_map = nn.Linear(encoder.dim, mlm.hidden_size) if mlm.hidden_size != encoder.dim else None
        for p in self.parameters():
            p.requires_grad_(True)
        self.to(encoder.device)

    @property
    def lower(self) -> nn.Module:
        """The frozen lower layers of the masked LM."""
        return self.frozen_parts()["lower"]

    def mlm_loss(self, sentence_vectors: torch.Tensor, batch: dict[str, torch.Tensor]):
        """(loss, logs) of reconstructing a masked copy of ``batch`` from ``sentence_vectors`` [B, d]."""
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        masked = choose_positions(input_ids, attention_mask, self.special_ids, self.mask_ratio)
        if not masked.any():
            return sentence_vectors.sum() * 0.0, {"mlm_loss": 0.0, "mlm_acc": 0.0}
        corrupted = corrupt(input_ids, masked, self.mask_id, len(self.encoder.tokenizer), keep_or_random=True)
        with torch.no_grad():
            context = self.lower(input_ids=corrupted, attention_mask=attention_mask).last_hidden_state
        h = sentence_vectors if self.sentence_map is None else self.sentence_map(sentence_vectors)
        joined = torch.cat([h.unsqueeze(1).to(context.dtype), context[:, 1:]], dim=1)
        hidden = self.upper(inputs_embeds=joined, attention_mask=attention_mask).last_hidden_state
        logits = self.mlm_head(hidden[masked])
        targets = input_ids[masked]
        loss = F.cross_entropy(logits, targets)
        acc = float((logits.argmax(-1) == targets).float().mean())
        return loss, {"mlm_loss": float(loss.detach()), "mlm_acc": acc}

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """The contrastive loss plus the weighted reconstruction loss of a batch."""
        doubled = {k: torch.cat([v, v], 0) for k, v in batch.items()}
        outputs = self.encoder.transformer_outputs(**doubled)
        pooled = self.encoder.pool(outputs, doubled["attention_mask"])
        z1, z2 = self.project(pooled).chunk(2, dim=0)
        cl_loss, logits = info_nce(z1, z2, self.params["temperature"])
        # both views reconstruct their own masked copy, as in the published code
        sentence_vectors = outputs.last_hidden_state[:, 0] if self.sentence_vector == "cls" else pooled
        mlm, logs = self.mlm_loss(sentence_vectors, doubled)
        loss = cl_loss + self.mlm_weight * mlm
        acc = (logits.argmax(-1) == torch.arange(logits.shape[0], device=logits.device)).float().mean()
        return ObjectiveOutput(loss, {"loss": float(loss.detach()), "simcse_loss": float(cl_loss.detach()),
                                      "acc": float(acc), **logs})
