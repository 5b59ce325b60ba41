"""Stock-layout models loaded with no sparsecse and no remote code, checked against sparsecse's own embeddings.

For each model directory: its ``config.json`` (the family's ``model_type``, no ``auto_map``), its Python files (none),
its shape (layers, FFN width, heads); then a fresh process that never imports sparsecse loads it with transformers'
``AutoModel`` and sentence-transformers, both with ``trust_remote_code=False``
(:func:`sparsecse.serving.plain_process.load_plainly`), and embeds STS-B test sentences; the largest absolute
difference to sparsecse's embeddings of the same sentences, both L2-normalised, must be at most ``--tolerance``.

Example::

    python benchmarks/plain_load.py --model runs/l6-stock-lat1.6/model runs/l3-stock-1.5/model \\
        --store docs/results/store --store-id plain-load.stock
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsecse.data.sts import read_sts_benchmark  # noqa: E402
from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry  # noqa: E402
from sparsecse.serving.plain_process import load_plainly  # noqa: E402

SENTENCES = 256


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def check(model_dir: Path, sentences: list[str], embeddings: Path) -> dict:
    """One model's row: its config facts, the plain process's class, and the largest difference to sparsecse
    (``embeddings``: the file the plain process writes)."""
    config = json.loads((model_dir / "config.json").read_text())
    row = {"model": str(model_dir), "model_type": config.get("model_type"), "auto_map": "auto_map" in config,
           "python_files": sorted(p.name for p in model_dir.glob("*.py")), "layers": config.get("num_hidden_layers"),
           "ffn": config.get("intermediate_size"), "heads": config.get("num_attention_heads"),
           "sentences": len(sentences)}
    try:
        line, theirs = load_plainly(model_dir, sentences, embeddings)
    except SparseCSEError as exc:  # a custom-layout model: no class without its remote code
        return {**row, "auto_model_class": None, "sparsecse_imported": None, "max_abs_diff": None,
                "error": str(exc).splitlines()[-1][-300:]}
    model_class, imported = line.split()
    ours = SentenceEncoder.load(model_dir, device="cpu").encode(sentences)
    return {**row, "auto_model_class": model_class, "sparsecse_imported": imported == "True",
            "max_abs_diff": float(np.abs(unit(np.asarray(theirs, dtype=np.float64))
                                         - unit(np.asarray(ours, dtype=np.float64))).max())}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", required=True, help="stock model directories")
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--store", default=None, metavar="DIR", help="also write the rows as one results-store entry")
    parser.add_argument("--store-id", default="plain-load", metavar="ID", help="the entry's id, less the machine")
    args = parser.parse_args(argv)
    pairs = read_sts_benchmark(args.data_dir, "test")
    sentences = list(dict.fromkeys(s for p in pairs for s in (p.s1, p.s2)))[:SENTENCES]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [check(Path(m), sentences, Path(tmp) / f"{i}.npy") for i, m in enumerate(args.model)]
    for r in rows:
        ok = (not r["auto_map"] and not r["python_files"] and r["sparsecse_imported"] is False
              and r["max_abs_diff"] <= args.tolerance)
        r["passed"] = ok
        loaded = (f"max |sentence-transformers - sparsecse| {r['max_abs_diff']:.1e}" if r["max_abs_diff"] is not None
                  else f"not loaded: {r['error']}")
        print(f"{r['model']}: {r['model_type']} ({r['auto_model_class']}), {r['layers']} layers, FFN {r['ffn']}, "
              f"auto_map {r['auto_map']}, Python files {len(r['python_files'])}, sparsecse imported "
              f"{r['sparsecse_imported']}; {loaded}: {'passed' if ok else 'FAILED'}")
    if args.store:
        entry = Entry(f"{args.store_id}.{machine_slug()}", "benchmarks/plain_load.py: stock models loaded by "
                      "transformers and sentence-transformers in a process that never imports sparsecse, "
                      "trust_remote_code=False", {"rows": rows, "tolerance": args.tolerance},
                      provenance(command_line("benchmarks/plain_load.py", argv or sys.argv[1:]), threads=None,
                                 batch_size=None, engine=None))
        print(f"wrote {write_entry(args.store, entry)}")
    if not all(r["passed"] for r in rows):
        raise SystemExit(1)
    return rows


if __name__ == "__main__":
    main()
