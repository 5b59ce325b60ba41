"""Every figure is written as a non-empty PNG and SVG, with what it should show."""

import numpy as np
import pytest

from sparsecse.reporting import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_written(paths, stem):
    assert sorted(p.name for p in paths) == sorted([stem + ".png", stem + ".svg"])
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 2000
        assert data.startswith(PNG_MAGIC) if p.suffix == ".png" else b"<svg" in data[:2000]
    assert not list(paths[0].parent.glob("*.tmp"))
    return {p.suffix: p.read_bytes() for p in paths}


CURVES = {"λ=0.25": ([0.01, 0.02, 0.2], [70.0, 71.0, 60.0]), "λ=0.5": ([0.01, 0.02, 0.2], [70.5, 70.0, 58.0])}


def test_score_vs_sparsity(tmp_path):
    files = check_written(plots.score_vs_sparsity(CURVES, tmp_path / "avg", baseline=70.2,
                                                  markers={"rewound (simcse)": ([0.02], [72.0])}), "avg")
    svg = files[".svg"].decode()
    for text in ("λ=0.25", "λ=0.5", "dense", "rewound (simcse)", "20%"):
        assert text in svg  # legend and categorical sparsity ticks


def test_tasks_vs_sparsity_small_multiples(tmp_path):
    per_task = {t: CURVES for t in ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]}
    files = check_written(plots.tasks_vs_sparsity(per_task, tmp_path / "tasks", {t: 65.0 for t in per_task}),
                          "tasks")
    svg = files[".svg"].decode()
    assert all(t in svg for t in per_task)


def test_alignment_uniformity(tmp_path):
    points = [{"alignment": 0.2, "uniformity": -2.0, "avg_sts": 70.0, "label": "dense", "kind": "dense"},
              {"alignment": 0.25, "uniformity": -2.2, "avg_sts": 68.0, "label": "10%", "kind": "masked"},
              {"alignment": 0.3, "uniformity": -1.9, "avg_sts": 72.0, "label": "", "kind": "rewound"},
              {"alignment": None, "uniformity": None, "avg_sts": 1.0, "label": "skipped", "kind": "masked"}]
    svg = check_written(plots.alignment_uniformity(points, tmp_path / "au"), "au")[".svg"].decode()
    assert "10%" in svg and "skipped" not in svg and "average STS" in svg


def test_alignment_uniformity_without_values_still_draws(tmp_path):
    svg = check_written(plots.alignment_uniformity([{"avg_sts": 1.0}], tmp_path / "au"), "au")[".svg"].decode()
    assert "no alignment/uniformity recorded" in svg


def test_pruned_per_layer(tmp_path):
    points = {"2%, λ=0.5": ([0, 1, 0, 1, 0, 0], [3, 10, 20, 40, 60, 50]),
              "30%, λ=0.5": ([2, 3, 4, 2, 5, 6], [300, 250, 270, 290, 310, 345])}
    svg = check_written(plots.pruned_per_layer(points, tmp_path / "layers", 12, 1536), "layers")[".svg"].decode()
    assert "2%, λ=0.5" in svg and "of 1536" in svg


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_head_importance_heatmap_still_works(tmp_path, suffix):
    scores = np.random.default_rng(0).random((6, 12))
    pruned = np.zeros((6, 12), dtype=bool)
    pruned[2, 3] = True
    out = plots.head_importance_heatmap(scores, tmp_path / f"heat{suffix}", pruned=pruned, title="Heads")
    assert out == tmp_path / f"heat{suffix}" and out.stat().st_size > 2000
