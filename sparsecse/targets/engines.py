"""Put a model directory on the engine a target is measured on: the torch model in fp32 on the CPU, the torch
model on the GPU under bf16 autocast (fp16 where the GPU lacks bf16), or an ONNX or OpenVINO copy exported into a
work directory (int8 calibrated on the corpus)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.export import export
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.targets.fresh import OnDisk
from sparsecse.targets.spec import GPU_ENGINE, engines


class GpuEncoder:
    """A torch encoder on the GPU under autocast whose ``encode`` returns only once the GPU is done (the clock
    reads after a synchronize).

    Args:
        encoder: a :class:`~sparsecse.modeling.encoder.SentenceEncoder` on a CUDA device.
        precision: ``bf16`` or ``fp16``.
    """

    def __init__(self, encoder: SentenceEncoder, precision: str):
        self.encoder, self.precision = encoder, precision
        self.tokenizer, self.max_length = encoder.tokenizer, encoder.max_length

    def encode(self, sentences, batch_size: int = 128, **kwargs):
        """Embeddings of ``sentences`` (as :meth:`~sparsecse.modeling.encoder.SentenceEncoder.encode`), the GPU synchronized after."""
        import torch

        out = self.encoder.encode(sentences, batch_size=batch_size, precision=self.precision, **kwargs)
        torch.cuda.synchronize(self.encoder.device)
        return out


def check_engine(engine: str) -> None:
    """One sentence when ``engine`` cannot run here (``torch-cuda`` without a CUDA GPU)."""
    if engine == GPU_ENGINE:
        import torch

        if not torch.cuda.is_available():
            raise SparseCSEError(f"The engine {GPU_ENGINE} times on a CUDA GPU, and this machine has none (torch "
                                 "sees no CUDA device); choose torch-fp32 or an exported engine.")


def check_runnable(target) -> None:
    """What a checked :class:`~sparsecse.targets.spec.Target` needs from this machine, by whichever road its
    settings came (``--engine`` or ``--set target.engine``, ...): its engine runs here and its timing sentences
    file holds UTF-8 sentences (one sentence naming ``--timing-sentences FILE`` otherwise)."""
    check_engine(target.engine)
    if target.timing_sentences is not None:
        try:
            read_corpus(target.timing_sentences)
        except SparseCSEError as exc:
            raise SparseCSEError(str(exc).replace("The corpus ", "--timing-sentences ", 1)) from None


def gpu_precision() -> str:
    """bf16 where the GPU supports it, else fp16."""
    import torch

    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def exported_copy(model_dir: str | os.PathLike, engine: str, work: str | os.PathLike | None,
                  calibration: str | os.PathLike | None = None, seed: int = 0) -> Path | None:
    """``model_dir`` exported for ``engine`` into ``work`` (replaced if present); None for a torch engine.

    Args:
        model_dir: a dense or shrunk model directory (or a model name).
        engine: a key of :func:`~sparsecse.targets.spec.engines`.
        work: where the exported copy is written (required for every engine but the torch ones).
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.
    """
    spec = engines()[engine]
    if spec is None:
        return None
    if work is None:
        raise ValueError(f"The engine {engine} needs a work directory for its exported copy.")
    work = Path(work)
    if work.exists():
        shutil.rmtree(work)
    fmt, quantize = spec
    config = ExportConfig(format=fmt, quantize=quantize, calibration=str(calibration) if quantize else None,
                          calibration_seed=seed)
    export(str(model_dir), str(work), config=config)
    return work


def on_engine(model_dir: str | os.PathLike, engine: str, work: str | os.PathLike | None = None,
              calibration: str | os.PathLike | None = None, seed: int = 0, threads: int | None = None,
              loader: str = "sparsecse"):
    """An encoder (``.encode(sentences, batch_size=...)``) running ``model_dir`` on ``engine``.

    Args:
        model_dir: a dense or shrunk model directory (or a model name).
        engine: a key of :func:`~sparsecse.targets.spec.engines`.
        work: where an exported copy is written (required for every engine but ``torch-fp32``); replaced if present.
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.
        threads: an exported graph's runtime threads (None: torch's; torch engines take theirs while timing).
        loader: what loads a ``torch-fp32`` model (:attr:`~sparsecse.targets.spec.Target.loader`).

    Returns:
        The torch :class:`~sparsecse.modeling.encoder.SentenceEncoder` (fp32, CPU), a :class:`GpuEncoder`, or the
        exported graph's runtime encoder.
    """
    placed = to_time(model_dir, engine, work, calibration, seed, threads, loader)
    return placed.load() if isinstance(placed, OnDisk) else placed


def to_time(model_dir: str | os.PathLike, engine: str, work: str | os.PathLike | None = None,
            calibration: str | os.PathLike | None = None, seed: int = 0, threads: int | None = None,
            loader: str = "sparsecse"):
    """What a timing (:mod:`sparsecse.targets.timing`) takes for ``model_dir`` on ``engine``: the directory it
    loads in a fresh process (:class:`~sparsecse.targets.fresh.OnDisk`: the torch model on the CPU, or its
    exported copy in ``work``), or, on the GPU, a :class:`GpuEncoder` (arguments as :func:`on_engine`)."""
    check_engine(engine)
    if engine == GPU_ENGINE:
        return GpuEncoder(SentenceEncoder.load(model_dir, device="cuda"), gpu_precision())
    copy = exported_copy(model_dir, engine, work, calibration, seed)
    if copy is not None:
        return OnDisk(str(copy.resolve()), threads)
    path = resolve_model(model_dir)
    return OnDisk(os.path.abspath(path) if os.path.isdir(path) else str(path), loader=loader)
