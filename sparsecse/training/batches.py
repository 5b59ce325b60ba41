"""The training batches: which sentences each step takes (:class:`~sparsecse.training.batches.CorpusSampler`) and their tokens, prepared
ahead of the step (:class:`~sparsecse.training.batches.TokenizedBatches`).

The sentences of ``AHEAD_STEPS`` steps are tokenized in one call of the (Rust) tokenizer and each step's
batch is padded from those token ids, which gives exactly the tensors ``tokenizer(texts, padding=True,
truncation=True, max_length=...)`` gives. On a GPU a worker thread prepares the next step's batch in pinned
memory while the current step runs, and the copy to the device does not wait for the host; on a CPU the batch
is prepared in the step itself (a thread would only compete with the step for the cores).
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import torch

from sparsecse.errors import SparseCSEError

BUCKET_WINDOW = 64  # batches whose sentences are sorted by length together (a "mega-batch")
AHEAD_STEPS = 32  # steps whose sentences are tokenized in one tokenizer call


class CorpusSampler:
    """Global batch ``step`` = a slice of the epoch's fixed permutation; each process takes its part.

    With ``lengths`` (token counts per sentence), the epoch's sentences are the same, but each window of
    ``BUCKET_WINDOW`` batches of the permutation is sorted by length before it is cut into batches, and
    the batches are then shuffled: a batch holds sentences of similar length, so little of it is padding
    (the mega-batch bucketing of fairseq and sentence-transformers' length grouping). The order stays a
    fixed function of (seed, epoch), so a checkpoint resumes exactly.
    """

    def __init__(self, sentences: Sequence[str], batch_size: int, seed: int, rank: int = 0, world: int = 1,
                 lengths: Sequence[int] | None = None):
        if batch_size % world:
            raise SparseCSEError(f"--batch-size {batch_size} does not split evenly over {world} processes.")
        self.steps_per_epoch = len(sentences) // batch_size  # the last incomplete batch is dropped
        if self.steps_per_epoch == 0:
            raise SparseCSEError(
                f"The corpus has {len(sentences)} sentences, fewer than one batch of {batch_size}; "
                f"lower --batch-size or use a larger corpus."
            )
        if lengths is not None and len(lengths) != len(sentences):
            raise SparseCSEError(f"{len(lengths)} lengths were given for {len(sentences)} sentences.")
        self.sentences, self.batch_size, self.seed = sentences, batch_size, seed
        self.lengths = torch.as_tensor(list(lengths)) if lengths is not None else None
        self.local = batch_size // world
        self.rank = rank
        self._epoch, self._order = -1, None

    def epoch_of(self, step: int) -> int:
        """The epoch that global ``step`` falls in."""
        return step // self.steps_per_epoch

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The sentence indices of ``epoch`` in batch order (``steps_per_epoch * batch_size`` of them)."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.sentences), generator=generator)
        if self.lengths is None:
            return order
        used = order[: self.steps_per_epoch * self.batch_size]
        window = BUCKET_WINDOW * self.batch_size
        batches = []
        for start in range(0, len(used), window):
            part = used[start:start + window]
            part = part[torch.argsort(self.lengths[part], stable=True)]
            batches.extend(part.split(self.batch_size))
        shuffled = torch.randperm(len(batches), generator=generator)
        return torch.cat([batches[i] for i in shuffled.tolist()])

    def local_batch(self, step: int) -> list[str]:
        """The sentences this process embeds at ``step``."""
        epoch = self.epoch_of(step)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, self.epoch_order(epoch)
        start = (step % self.steps_per_epoch) * self.batch_size + self.rank * self.local
        return [self.sentences[i] for i in self._order[start : start + self.local].tolist()]


def pad_rows(tokenizer, rows: dict[str, list[list[int]]]) -> dict[str, torch.Tensor]:
    """Unpadded token rows (``{key: [ids per sentence]}``) padded to the longest, on the tokenizer's padding
    side, as tensors: what the tokenizer's own ``padding=True`` returns (its ``pad`` for keys other than
    input ids, attention mask, token types and special-tokens mask)."""
    fill = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0,
            "token_type_ids": getattr(tokenizer, "pad_token_type_id", 0), "special_tokens_mask": 1}
    if set(rows) - set(fill) or fill["input_ids"] is None:
        return dict(tokenizer.pad(rows, return_tensors="pt"))
    count = len(rows["input_ids"])
    width = max(map(len, rows["input_ids"]), default=0)
    left = getattr(tokenizer, "padding_side", "right") == "left"
    out = {}
    for key, values in rows.items():
        tensor = torch.full((count, width), int(fill[key]), dtype=torch.long)
        for i, ids in enumerate(values):
            if ids:
                if left:
                    tensor[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
                else:
                    tensor[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        out[key] = tensor
    return out


class TokenizedBatches:
    """Each step's local sentences and their padded batch on ``device``, tokenized ``AHEAD_STEPS`` steps at a
    time; ``prefetch`` (a GPU): the next step's batch is prepared by a worker thread while this one runs.

    Args:
        tokenizer: the student's tokenizer.
        sampler: which sentences each step takes.
        max_length: truncation, in tokens.
        device: where the batches go.
        prefetch: prepare the next batch in a thread (None: on a CUDA device).
    """

    def __init__(self, tokenizer, sampler: CorpusSampler, max_length: int, device: torch.device,
                 prefetch: bool | None = None):
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        self.prefetch = cuda if prefetch is None else bool(prefetch)
        # a fast tokenizer is not to be called from two threads at once: the worker has its own copy
        self.tokenizer = copy.deepcopy(tokenizer) if self.prefetch else tokenizer
        self.sampler, self.max_length = sampler, int(max_length)
        self.pin = cuda and torch.cuda.is_available()
        self._chunk: tuple[int, list[list[str]], list[dict[str, list[list[int]]]]] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="batches") if self.prefetch else None
        self._next: tuple[int, Future] | None = None

    def _tokenized(self, step: int) -> tuple[list[str], dict[str, list[list[int]]]]:
        first = step - step % AHEAD_STEPS
        if self._chunk is None or self._chunk[0] != first:
            texts = [self.sampler.local_batch(s) for s in range(first, first + AHEAD_STEPS)]
            flat = [t for batch in texts for t in batch]
            encoded = self.tokenizer(flat, truncation=True, max_length=self.max_length)
            rows, start = [], 0
            for batch in texts:
                rows.append({k: v[start:start + len(batch)] for k, v in encoded.items()})
                start += len(batch)
            self._chunk = (first, texts, rows)
        return self._chunk[1][step - first], self._chunk[2][step - first]

    def _prepare(self, step: int) -> tuple[list[str], dict[str, torch.Tensor]]:
        texts, rows = self._tokenized(step)
        batch = pad_rows(self.tokenizer, rows)
        if self.pin:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return texts, batch

    def get(self, step: int) -> tuple[list[str], dict[str, torch.Tensor]]:
        """The sentences of ``step`` (this process's part) and their batch on the device."""
        if self._pool is None:
            texts, batch = self._prepare(step)
        else:
            if self._next is None or self._next[0] != step:
                self._next = (step, self._pool.submit(self._prepare, step))
            texts, batch = self._next[1].result()
            self._next = (step + 1, self._pool.submit(self._prepare, step + 1))
        return texts, {k: v.to(self.device, non_blocking=self.pin) for k, v in batch.items()}

    def close(self) -> None:
        """Stop the worker thread (a batch it prepares ahead is dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._next = None, None
