"""A teacher's sentence embeddings for a whole corpus, computed once and kept on disk.

Long distillation spends most of its teacher time embedding the same corpus again in every run; this
module embeds each distinct sentence of a corpus once and stores the result under
``<cache root>/teacher_embeddings/<key>/``. The key is a digest of the corpus file's sha256, the
teacher's weights and config digest, its max_length, pooling and whether vectors are normalised, so a
changed corpus or teacher never meets stale vectors. Work is written in chunks (each file atomic, in
a fixed length-sorted order), so a killed run continues where it stopped; the finished matrix is
``embeddings.npy`` beside ``meta.json``.

Example::

    emb, info = teacher_embeddings("all-mpnet-base-v2", "train_sentences.txt")
    emb.shape  # (len(read_corpus("train_sentences.txt")), 768), rows in the corpus reader's order
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsecse.data.corpus import read_corpus
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import hash_path, sha256_file
from sparsecse.artifacts.locks import FileLock
from sparsecse.artifacts.model_store import cache_root
from sparsecse.objectives import processes
from sparsecse.objectives.teacher_precision import PRECISIONS, Encode, precision_check, teacher_encoder

FORMAT = 1
META = "meta.json"
FINAL = "embeddings.npy"
CHUNK_SENTENCES = 4096  # sentences per resumable chunk file (read when a cache is computed)
LOCK_WAIT_S = 6 * 3600.0  # another process computing the same vectors: wait for it rather than race


def default_cache_dir() -> Path:
    """Where teacher embeddings are cached by default."""
    return cache_root() / "teacher_embeddings"


def teacher_digest(path: str) -> str:
    """sha256 over a local model directory's weights/config/tokenizer files; a hub name is looked up
    in the local Hugging Face cache (no network)."""
    if not os.path.isdir(path):
        try:
            from huggingface_hub import snapshot_download

            path = snapshot_download(path, local_files_only=True)
        except Exception:
            raise SparseCSEError(f"Cannot find the teacher {path} on disk to fingerprint it for the "
                                 "embedding cache; pass a model directory.") from None
    return hash_path(path)


def cache_key(corpus_sha256: str, digest: str, max_length: int, pooling: str, normalize: bool,
              precision: str = "fp32") -> str:
    """The key of a teacher-embeddings cache file: what the embeddings depend on, hashed.

    Args:
        corpus_sha256: the corpus file's hash.
        digest: the teacher's digest.
        max_length: the truncation.
        pooling: the teacher's pooling.
        normalize: whether the embeddings are normalised.
        precision: the teacher's precision (fp32 keeps the keys of older caches).

    Returns:
        24 hex characters.
    """
    fields = {"format": FORMAT, "corpus_sha256": corpus_sha256, "teacher_digest": digest,
              "max_length": int(max_length), "pooling": pooling, "normalize": bool(normalize)}
    if precision != "fp32":  # fp32 caches keep the keys they had before precisions existed
        fields["precision"] = precision
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _save_atomic(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_meta(path: Path, meta: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _read_meta(directory: Path) -> dict | None:
    try:
        return json.loads((directory / META).read_text())
    except (OSError, ValueError):
        return None


def is_cache(path: str | os.PathLike) -> bool:
    """Whether ``path`` is one cache (its directory or its embeddings file), not a cache root."""
    path = Path(path)
    return (path.is_file() and path.name == FINAL) or (path / META).is_file()


def load_cached(cache_path: str | os.PathLike, corpus_path: str | os.PathLike,
                corpus_sha256: str | None = None, digest: str | None = None) -> tuple[np.ndarray, dict]:
    """A finished cache the user points at explicitly (its directory or its ``embeddings.npy``),
    refused unless it was computed for exactly this corpus file (and this teacher, given its
    ``digest``)."""
    directory = Path(cache_path)
    if directory.is_file():
        directory = directory.parent
    meta = _read_meta(directory)
    if meta is None or not (directory / FINAL).is_file():
        raise SparseCSEError(f"{cache_path} is not a finished teacher-embedding cache (no {META} or {FINAL}).")
    corpus_sha256 = corpus_sha256 or sha256_file(corpus_path)
    if meta.get("corpus_sha256") != corpus_sha256:
        raise SparseCSEError(f"The teacher-embedding cache {cache_path} was computed for another corpus "
                             f"(sha256 {str(meta.get('corpus_sha256'))[:12]}…, not {corpus_sha256[:12]}… "
                             f"of {corpus_path}); it cannot be used.")
    if digest is not None and meta.get("teacher_digest") != digest:
        raise SparseCSEError(f"The teacher-embedding cache {cache_path} was computed by another teacher "
                             f"({meta.get('teacher_source')}); it cannot be used.")
    emb = np.load(directory / FINAL)
    if emb.shape != (meta["sentences"], meta["dim"]):
        raise SparseCSEError(f"The teacher-embedding cache {cache_path} is damaged (shape {emb.shape}, "
                             f"expected {(meta['sentences'], meta['dim'])}).")
    return emb, {**meta, "cache_dir": str(directory), "computed_sentences": 0}


def teacher_embeddings(
    teacher: str | os.PathLike | SentenceEncoder,
    corpus_path: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    normalize: bool = False,
    device: str | torch.device | None = None,
    show_progress: bool = True,
    cache_path: str | os.PathLike | None = None,
    precision: str = "fp32",
) -> tuple[np.ndarray, dict[str, Any]]:
    """The teacher's embedding of every sentence of ``corpus_path`` (rows in :func:`~sparsecse.data.corpus.read_corpus`'s
    order, float32 ``[N, D]``) and an info dict (``key``, ``cache_dir``, ``corpus_sha256``,
    ``teacher_digest``, ``computed_sentences``, ...).

    ``teacher``: a model directory, a hub name, a name ``sparsecse models install`` knows, or a loaded
    :class:`~sparsecse.modeling.encoder.SentenceEncoder` (its ``source`` directory is fingerprinted). ``cache_dir`` defaults to
    ``<sparsecse cache>/teacher_embeddings``. ``cache_path`` names one finished cache explicitly; it
    is refused when it was computed for another corpus. ``max_length`` defaults to the teacher's.
    ``precision``: ``fp32``, ``bf16`` (autocast) or ``int8`` (an OpenVINO graph quantized by NNCF), see
    :mod:`sparsecse.objectives.teacher_precision`: a seeded sample is then embedded in fp32 too, the cosines are
    recorded in the info (``precision_check``), and the precision is refused below its bound.
    """
    if precision not in PRECISIONS:
        raise SparseCSEError(f"The teacher precision must be one of {', '.join(PRECISIONS)}, not {precision!r}.")
    sentences = read_corpus(corpus_path)  # refuses a missing or empty corpus
    corpus_sha256 = sha256_file(corpus_path)
    source = str(teacher.source) if isinstance(teacher, SentenceEncoder) else resolve_model(teacher)
    digest = teacher_digest(source)
    if cache_path is not None:
        return load_cached(cache_path, corpus_path, corpus_sha256, digest)
    if isinstance(teacher, SentenceEncoder):
        encoder = teacher
    else:
        encoder = SentenceEncoder.load(source, max_length=max_length, device=device)
    if max_length is not None:
        encoder.max_length = int(max_length)
    key = cache_key(corpus_sha256, digest, encoder.max_length, encoder.pooling, normalize, precision)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = directory / key
    unique_count = len(dict.fromkeys(sentences))
    meta = {"format": FORMAT, "key": key, "corpus": str(Path(corpus_path).resolve()),
            "corpus_sha256": corpus_sha256, "teacher": str(teacher if not isinstance(teacher, SentenceEncoder)
                                                           else source),
            "teacher_source": source, "teacher_digest": digest, "max_length": encoder.max_length,
            "pooling": encoder.pooling, "normalize": bool(normalize), "sentences": len(sentences),
            "unique_sentences": unique_count, "dim": encoder.dim, "chunk_sentences": int(CHUNK_SENTENCES),
            "precision": precision}
    if processes.active():
        return _shared_by_processes(encoder, sentences, directory, meta, batch_size, normalize, show_progress,
                                    int(CHUNK_SENTENCES))
    directory.parent.mkdir(parents=True, exist_ok=True)
    # One process computes a key at a time; another asking for the same vectors waits, then reads them.
    lock = FileLock(directory.parent / f"{meta['key']}.lock")
    lock.wait(timeout=LOCK_WAIT_S, poll=2.0)
    try:
        return _cached_or_computed(encoder, sentences, directory, meta, batch_size, normalize, show_progress,
                                   int(CHUNK_SENTENCES))
    finally:
        lock.release()


def _finished(directory: Path, meta: dict, sentences: int, dim: int) -> tuple[np.ndarray, dict] | None:
    """The finished cache in ``directory`` if it matches ``meta``; else None (a stale one is removed)."""
    old = _read_meta(directory)
    if old is not None and any(old.get(k) != meta[k] for k in ("corpus_sha256", "teacher_digest", "max_length",
                                                                "pooling", "normalize", "sentences", "dim",
                                                                "chunk_sentences")):
        shutil.rmtree(directory)  # left by something else under this key: never mix it with this run
        old = None
    if old is not None and old.get("complete") and (directory / FINAL).is_file():
        emb = np.load(directory / FINAL)
        if emb.shape == (sentences, dim):
            return emb, {**old, "cache_dir": str(directory), "computed_sentences": 0}
    return None


def _start(encoder: SentenceEncoder, unique: list[str], directory: Path, meta: dict, normalize: bool,
           encode: Encode) -> dict:
    """Open an unfinished cache (chunks kept from a killed run); ``meta`` with the precision check."""
    (directory / "chunks").mkdir(parents=True, exist_ok=True)
    if meta.get("precision", "fp32") != "fp32":
        meta = {**meta, "precision_check": precision_check(encoder, unique, meta["precision"], normalize, encode)}
    _write_meta(directory / META, {**meta, "complete": False})
    return meta


def _finish(sentences: list[str], unique: list[str], unique_emb: np.ndarray, directory: Path, meta: dict,
            write: bool = True) -> tuple[np.ndarray, dict]:
    """The corpus-order matrix from the distinct sentences' vectors; written (``write``) as the finished cache."""
    position = {s: i for i, s in enumerate(unique)}
    emb = unique_emb[np.fromiter((position[s] for s in sentences), dtype=np.int64, count=len(sentences))]
    meta = {**meta, "complete": True, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if write:
        _save_atomic(directory / FINAL, emb)
        _write_meta(directory / META, meta)
        shutil.rmtree(directory / "chunks", ignore_errors=True)
    return emb, meta


def _cached_or_computed(encoder: SentenceEncoder, sentences: list[str], directory: Path, meta: dict,
                        batch_size: int | None, normalize: bool, show_progress: bool,
                        chunk_sentences: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The finished cache in ``directory`` if it matches ``meta``; else compute it (resuming chunks)."""
    unique = list(dict.fromkeys(sentences))
    found = _finished(directory, meta, len(sentences), encoder.dim)
    if found is not None:
        return found
    encode = teacher_encoder(encoder, meta["precision"], unique)
    meta = _start(encoder, unique, directory, meta, normalize, encode)
    unique_emb, computed = _embed_in_chunks(encoder, unique, directory / "chunks", batch_size, normalize,
                                            show_progress, chunk_sentences, encode)
    emb, meta = _finish(sentences, unique, unique_emb, directory, meta)
    return emb, {**meta, "cache_dir": str(directory), "computed_sentences": computed}


def _shared_by_processes(encoder: SentenceEncoder, sentences: list[str], directory: Path, meta: dict,
                         batch_size: int | None, normalize: bool, show_progress: bool,
                         chunk_sentences: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The cache in a data-parallel run: process 0 holds the lock, reads a finished cache or opens the
    directory; every process embeds its share of each missing chunk; process 0 alone writes the chunks and
    the finished matrix, once. Every process returns the whole matrix. An error on process 0 (e.g. bf16
    refused) is raised on every process, so none waits for the others."""
    unique = list(dict.fromkeys(sentences))
    lock, found, error, encode = None, None, None, None
    state: dict[str, Any] = {}
    if processes.is_main():
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(directory.parent / f"{meta['key']}.lock")
            lock.wait(timeout=LOCK_WAIT_S, poll=2.0)
            found = _finished(directory, meta, len(sentences), encoder.dim)
            if found is None:
                encode = teacher_encoder(encoder, meta["precision"], unique)
            state = {"finished": True} if found is not None else {"meta": _start(encoder, unique, directory, meta,
                                                                                 normalize, encode)}
        except Exception as exc:  # noqa: BLE001 - told to the other processes, then raised
            error, state = exc, {"error": str(exc)}
    try:
        state = processes.broadcast_object(state)
        if error is not None:
            raise error
        if "error" in state:
            raise SparseCSEError(state["error"])
        if state.get("finished"):
            if found is not None:
                return found
            return _finished(directory, meta, len(sentences), encoder.dim) or _missing(directory)
        meta = state["meta"]
        if encode is None:  # the other processes build theirs (an int8 graph from the same seeded sample)
            encode = teacher_encoder(encoder, meta["precision"], unique)
        unique_emb, computed = _embed_in_chunks(encoder, unique, directory / "chunks", batch_size, normalize,
                                                show_progress, chunk_sentences, encode)
        emb, meta = _finish(sentences, unique, unique_emb, directory, meta, write=processes.is_main())
        processes.barrier()  # the finished cache is on disk before any process goes on
        return emb, {**meta, "cache_dir": str(directory), "computed_sentences": computed}
    finally:
        if lock is not None:
            lock.release()


def _read_chunk(path: Path, rows: int, dim: int) -> np.ndarray | None:
    """A chunk file a run left, if it is whole (``rows`` x ``dim``)."""
    if not path.is_file():
        return None
    try:
        block = np.load(path)
    except (OSError, ValueError):
        return None
    return block if block.shape == (rows, dim) else None


def _missing(directory: Path):
    raise SparseCSEError(f"The teacher-embedding cache {directory} is finished on the first process but not "
                         "visible to this one; OUT and the cache must be on a filesystem every process shares.")


@torch.inference_mode()
def _embed_in_chunks(encoder: SentenceEncoder, unique: list[str], chunk_dir: Path, batch_size: int | None,
                     normalize: bool, show_progress: bool, chunk_sentences: int,
                     encode: Encode) -> tuple[np.ndarray, int]:
    """Embed ``unique`` longest first, chunk by chunk; chunks already on disk are read back. In a
    data-parallel run every process embeds its share of each chunk and process 0 writes it."""
    from tqdm.auto import tqdm

    tokens = encoder.tokenizer(unique, truncation=True, max_length=encoder.max_length)["input_ids"]
    lengths = [len(ids) for ids in tokens]
    order = sorted(range(len(unique)), key=lambda i: (-lengths[i], i))  # fixed chunks, so a rerun resumes
    chunks = [order[start:start + chunk_sentences] for start in range(0, len(order), chunk_sentences)]
    paths = [chunk_dir / f"chunk-{k:06d}.npy" for k in range(len(chunks))]
    # which chunks a killed run left behind: process 0 looks, so every process agrees
    done = processes.broadcast_object([k for k, idx in enumerate(chunks) if _read_chunk(paths[k], len(idx), encoder.dim)
                                       is not None] if processes.is_main() else None)
    out = np.empty((len(unique), encoder.dim), dtype=np.float32)
    computed = 0
    bar = tqdm(total=len(unique), desc="teacher embeddings", unit="sent", disable=not show_progress,
               dynamic_ncols=True)

    def embed(texts: list[str]) -> np.ndarray:
        return encode(texts, batch_size=batch_size, normalize=normalize, show_progress=show_progress, desc="chunk")

    try:
        for k, idx in enumerate(chunks):
            block = _read_chunk(paths[k], len(idx), encoder.dim) if k in done else None
            if block is None:
                if k in done:
                    _missing(chunk_dir)
                block = np.asarray(processes.sharded(embed, [unique[i] for i in idx]), dtype=np.float32)
                if processes.is_main():
                    _save_atomic(paths[k], block)
                computed += len(idx)
            out[idx] = block
            bar.update(len(idx))
    finally:
        bar.close()
    return out, computed
