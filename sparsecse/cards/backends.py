"""A stock model card's Backends section: the graphs ``sparsecse export`` wrote into the model's directory
(sentence-transformers' backend layout), how ``SentenceTransformer`` loads each, how close each comes to the torch
model's embeddings, and, where the export timed them, their speed-up over the torch model at batch 1 and 128.
Read from each backend folder's record (:func:`~sparsecse.artifacts.exported_model.backend_records`), so a second
export (OpenVINO after ONNX, say) keeps the first one's rows; the section replaces the card's own on every export.

    >>> update_card("runs/stock/model")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.exported_model import backend_records
from sparsecse.artifacts.model_dir import CARD

TITLE = "## Backends"


def _speed(rows: list[dict[str, Any]], file: str, batch: int) -> str:
    for r in rows:
        if r["file"] == file and r["batch"] == batch:
            low, high = r["interval"]
            return f"{r['speedup']:.2f}x [{low:.2f}, {high:.2f}]"
    return "—"


def load_call(fmt: str, file: str, default_file: str) -> str:
    """The ``SentenceTransformer`` arguments that load one graph: the backend, and the file where it is not the
    backend's default one."""
    call = f'backend="{fmt}"'
    return call if file == default_file else call + f', model_kwargs={{"file_name": "{file}"}}'


def backends_section(records: list[dict[str, Any]]) -> list[str]:
    """The section's markdown lines from the backend folders' records; none without records.

    Args:
        records: :func:`~sparsecse.artifacts.exported_model.backend_records` of the model directory.

    Returns:
        The lines, title first.
    """
    if not records:
        return []
    lines = [TITLE, "", "Graphs in this directory that sentence-transformers loads with no custom code "
             "(`SentenceTransformer(DIR, <arguments>)`). The cosine is the smallest between each graph's embeddings and "
             "the torch model's over a few check sentences; a speed-up is over this model in torch fp32, at batch 1 "
             "(latency p50) and batch 128 (throughput).", "",
             "| backend | graph | kind | arguments | min cosine to torch | batch 1 | batch 128 |",
             "|---|---|---|---|---:|---:|---:|"]
    timed = []
    for record in records:
        fmt = get_format(record["format"])
        verification = (record.get("manifest") or {}).get("verification") or {}
        rows = (record.get("speed") or {}).get("rows") or []
        for file, kind in record["files"].items():
            cosine = verification.get(f"{kind}_min_cosine")
            lines.append(f"| {fmt.title} | `{file}` | {kind} | `{load_call(fmt.name, file, fmt.files['fp32'])}` | "
                         f"{'—' if cosine is None else f'{cosine:.6f}'} | {_speed(rows, file, 1)} | "
                         f"{_speed(rows, file, 128)} |")
        if record.get("speed"):
            timed.append(f"- {fmt.title}: {record['speed']['method']}; {record['speed']['cpu']}.")
    return lines + [""] + (["Timed:", "", *timed, ""] if timed else [])


def put_section(card: str, section: list[str], after: str = "## Usage") -> str:
    """``card`` with its Backends section replaced by ``section`` (placed after the ``after`` section, or at the
    end of the card where it has none; removed when ``section`` is empty)."""
    lines = card.rstrip("\n").split("\n")

    def section_end(start: int) -> int:
        return next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))

    if TITLE in lines:
        start = lines.index(TITLE)
        del lines[start:section_end(start)]
    else:
        start = section_end(lines.index(after)) if after in lines else len(lines)
    lines[start:start] = section
    return "\n".join(lines).rstrip("\n") + "\n"


def update_card(model_dir: str | os.PathLike) -> Path | None:
    """Rewrite the Backends section of the card (``README.md``) of ``model_dir`` from its backend folders (the
    file replaced at once); None where the directory has no card.

    Args:
        model_dir: a stock model directory.

    Returns:
        The card's path, or None.
    """
    path = Path(model_dir) / CARD
    if not path.is_file():
        return None
    text = put_section(path.read_text(encoding="utf-8"), backends_section(backend_records(model_dir)))
    tmp = path.with_name(f".{CARD}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path

