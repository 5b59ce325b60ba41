"""The walkthrough notebook runs end to end (so it never rots), made tiny through its settings."""

from pathlib import Path

import pytest

from tests.tiny import SENTENCES

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def execute(settings: dict, monkeypatch, timeout: int = 600):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    for name, value in settings.items():
        monkeypatch.setenv(f"SPARSECSE_NB_{name}", str(value))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    return notebook


def outputs_text(notebook) -> str:
    chunks = []
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            chunks.append(out.get("text", ""))
            chunks.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(chunks)


def check(notebook, out: Path):
    text = outputs_text(notebook)
    assert "largest difference between the shrunk and the gated model's scores" in text
    assert "points computed" in text
    images = sum("image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", []))
    assert images >= 4  # the heat map and the sweep's figures
    assert (out / "sweep" / "summary.md").read_text().count("dense") >= 1
    assert (out / "rewound" / "config.json").is_file()


def test_walkthrough_on_a_tiny_model(tiny_bert_dir, tiny_stsb_dir, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 8) + "\n")
    out = tmp_path / "walkthrough"
    notebook = execute({"MODEL": tiny_bert_dir, "DATA": tiny_stsb_dir, "CORPUS": corpus, "TASKS": "STSBenchmark",
                        "SPARSITIES": "0.25", "LAMBDAS": "0.5", "MAX_BATCHES": 2, "REWIND_STEPS": 2, "OUT": out},
                       monkeypatch)
    check(notebook, out)


@pytest.mark.integration
def test_walkthrough_on_the_default_model(minilm_dir, senteval_dir, tmp_path, monkeypatch):
    out = tmp_path / "walkthrough"
    notebook = execute({"DATA": senteval_dir, "CORPUS": SHARED / "wiki" / "wiki1m_sample.txt",
                        "TASKS": "STSBenchmark", "SPARSITIES": "0.1", "LAMBDAS": "0.5", "MAX_BATCHES": 2,
                        "REWIND_STEPS": 1, "OUT": out}, monkeypatch)
    check(notebook, out)
    assert "all-MiniLM-L6-v2 (default)" in outputs_text(notebook)
