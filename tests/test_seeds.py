"""Several rewinding seeds: one row per seed, mean +- std, reuse of finished seeds, tests against the control."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from sparsecse.sweeps import run as sweep_mod
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.seeds import compare_to_control, config_name, seed_differences
from sparsecse.reporting.report import point_frame, results_table
from sparsecse.sweeps.config import RewindConfig, SweepOptions
from sparsecse.sweeps.naming import parse_seeds
from sparsecse.sweeps.run import sweep
from tests.helpers import evaluation, scoring

N_PAIRS = 300


def synthetic_pairs(task: str, seed: int, pruned: bool) -> dict:
    """Gold scores fixed per task; a seed's similarities share that seed's error, pruned models less of it."""
    gold = np.random.default_rng(len(task)).integers(0, 11, N_PAIRS) / 2
    noise = np.random.default_rng(100 + seed).normal(0, 1.5, N_PAIRS)
    own = np.random.default_rng(200 + seed + 50 * pruned).normal(0, 0.3, N_PAIRS)
    return {"similarity": gold + (0.6 if pruned else 1.0) * noise + own, "gold": gold,
            "subsets": {"all": N_PAIRS}}


class SeededEvaluator:
    """Stands in for evaluate: scores and per-pair similarities made up from the rewound model's name."""

    def __init__(self):
        self.calls = []

    def __call__(self, model, mask, tasks, data_dir, seed, **options):
        name = Path(str(model)).name if isinstance(model, (str, Path)) else "base"
        found = re.search(r"seed(\d+)$", name)
        k = int(found.group(1)) if found else 0
        pruned = not name.startswith("dense") and (mask is not None or found is not None)
        self.calls.append(name)
        pairs = {t: synthetic_pairs(t, k, pruned) for t in tasks}
        return {"scores": {t: float(spearmanr(p["similarity"], p["gold"])[0] * 100) for t, p in pairs.items()},
                "pairs": pairs}


@pytest.fixture
def seeded(monkeypatch):
    evaluator, rewinds = SeededEvaluator(), []

    def fake_rewind(mask_path, corpus, out, init=None, objective="simcse", seed=0, data_dir=None,
                    show_progress=False, **kw):
        rewinds.append((mask_path.name, seed))
        Path(out).mkdir(parents=True)

    monkeypatch.setattr(sweep_mod, "run_evaluation", evaluator)
    monkeypatch.setattr(sweep_mod, "run_rewind", fake_rewind)
    return evaluator, rewinds


def run(model, data, out, corpus, seeds=None, **kw):
    """A one-point sweep rewound with ``seeds`` (STS-B and STS12, the tests' scoring)."""
    args = dict(sparsities="0.5", lambdas="0.5", out=out, score=scoring(data),
                evaluate=evaluation(data, tasks="STSBenchmark,STS12"),
                options=SweepOptions(show_progress=False, make_report=True),
                rewind=RewindConfig(corpus=corpus, args={"max_steps": 1}, seeds=seeds))
    args.update(kw)
    return sweep(model, **args)


def test_each_seed_is_a_row_finished_seeds_are_reused_and_the_control_test_holds(tiny_bert_dir, tiny_stsb_dir,
                                                                                  tmp_path, seeded):
    evaluator, rewinds = seeded
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a man is playing\na dog runs\n")
    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, corpus, seeds="0,1")
    assert rewinds == [("mask-dense.safetensors", 0), ("mask-s0.5-l0.5.safetensors", 0),
                       ("mask-dense.safetensors", 1), ("mask-s0.5-l0.5.safetensors", 1)]
    table = pd.read_csv(out / "results.csv")
    rewound = table[table["variant"] == "rewound"]
    assert len(rewound) == 2 * 2 * 2  # (control + one point) x 2 seeds x 2 tasks
    assert sorted(rewound["seed"].unique()) == [0, 1] and table[table["variant"] == "masked"]["seed"].isna().all()
    rid = rewound["rewind_id"].iloc[0]
    assert (out / "pairs" / "rewound" / rid / "s0.5-l0.5-seed1.safetensors").is_file()

    comparisons = pd.read_csv(out / "comparisons.csv")
    avg = comparisons[comparisons["task"] == "avg_sts"].iloc[0]
    assert avg["n_seeds"] == 2 and avg["seeds_same_sign"] and avg["holds"]
    assert avg["paired_ci_low"] > 0 and avg["paired_p"] < 0.01
    summary = (out / "summary.md").read_text()
    assert "Rewound vs the retrained control, over seeds" in summary and "✓" in summary and " ± " in summary
    assert "seeds 0, 1" in summary
    assert "Pruned without retraining vs dense, paired" in summary
    assert set(pd.read_csv(out / "dense_comparisons.csv")["point"]) == {"masked/s0.5-l0.5"}
    assert (out / "figures" / "avg_sts_vs_sparsity.png").is_file()

    # a third seed: only its two rewinds and evaluations run; seeds 0 and 1 are reused
    evals = len(evaluator.calls)
    result = run(tiny_bert_dir, tiny_stsb_dir, out, corpus, seeds="0,1,2")
    assert rewinds[4:] == [("mask-dense.safetensors", 2), ("mask-s0.5-l0.5.safetensors", 2)]
    assert evaluator.calls[evals:] == ["dense-seed2", "s0.5-l0.5-seed2"]
    assert f"rewound/{rid}/s0.5-l0.5-seed1" in result.reused
    assert pd.read_csv(out / "comparisons.csv").query("task == 'avg_sts'")["n_seeds"].iloc[0] == 3


def test_per_seed_rows_aggregate_to_mean_and_std():
    points = [{"variant": "dense", "sparsity": 0.0, "lambda": None, "scores": {"STS12": 60.0}, "avg_sts": 60.0,
               "point": "dense"}]
    for k, (a, b) in enumerate([(70.0, 80.0), (72.0, 80.0), (74.0, 83.0)]):
        points.append({"variant": "rewound", "rewind_id": "simcse-x", "objective": "simcse", "seed": k,
                       "sparsity": 0.1, "lambda": 0.5, "scores": {"STS12": a, "STS13": b}, "avg_sts": (a + b) / 2,
                       "point": f"rewound/simcse-x/s0.1-l0.5-seed{k}"})
    table = results_table(points)
    assert len(table[table["variant"] == "rewound"]) == 3 * 2  # one row per seed and task
    frame = point_frame(table).set_index("point")
    row = frame.loc["rewound/simcse-x/s0.1-l0.5"]
    assert row["n_seeds"] == 3
    assert (row["STS12"], row["STS12_std"]) == (72.0, 2.0)
    assert row["STS13"] == 81.0 and row["STS13_std"] == pytest.approx(np.std([80, 80, 83], ddof=1))
    assert row["avg_sts"] == pytest.approx(76.5)
    assert frame.loc["dense", "n_seeds"] == 1 and pd.isna(frame.loc["dense", "STS12_std"])


def test_control_comparison_on_synthetic_seeds():
    tasks = ["STS12", "STSBenchmark"]

    def record(k, pruned):
        pairs = {t: synthetic_pairs(t, k, pruned) for t in tasks}
        scores = {t: float(spearmanr(p["similarity"], p["gold"])[0] * 100) for t, p in pairs.items()}
        name = f"rewound/r/{'s0.1-l0.5' if pruned else 'dense'}-seed{k}"
        return {"seed": k, "scores": scores, "avg_sts": float(np.mean(list(scores.values()))), "point": name}, pairs

    made = {(k, pr): record(k, pr) for k in range(3) for pr in (True, False)}
    stored = {rec["point"]: pairs for rec, pairs in made.values()}
    points = [made[k, True][0] for k in range(3)]
    control = [made[k, False][0] for k in range(3)]
    result = compare_to_control(points, control, tasks, stored.get, replicates=300)
    avg = result["rows"]["avg_sts"]
    assert result["seeds"] == [0, 1, 2] and avg["holds"] and avg["seeds"]["same_sign"]
    assert avg["seeds"]["mean"] == pytest.approx(avg["paired"]["diff"])  # seed-mean difference, both ways
    assert avg["point"][0] == pytest.approx(np.mean([p["avg_sts"] for p in points]))
    # the control against itself: no difference, nothing holds
    same = compare_to_control(control, control, tasks, stored.get, replicates=300)["rows"]["avg_sts"]
    assert same["paired"]["ci"] == [0.0, 0.0] and same["paired"]["p"] == 1.0 and not same["holds"]
    # without stored pairs there is no paired test, and so no claim
    blind = compare_to_control(points, control, tasks, lambda name: None, replicates=300)["rows"]["avg_sts"]
    assert blind["paired"] is None and blind["seeds"]["same_sign"] and not blind["holds"]
    # one seed never agrees "across seeds"
    assert not seed_differences({0: 2.0}, {0: 1.0})["same_sign"]
    assert seed_differences({0: 2.0, 1: 0.5}, {0: 1.0, 1: 1.0})["same_sign"] is False
    assert config_name("rewound/r/s0.1-l0.5-seed12") == "rewound/r/s0.1-l0.5"


def test_seeds_bad_input(tiny_bert_dir, tiny_stsb_dir, tmp_path, seeded):
    assert parse_seeds("0, 1,2", 5) == [0, 1, 2] and parse_seeds(None, 5) == [5]
    for bad, message in (("0,x", "comma-separated integers"), ("1,1", "repeat"), (",", "No seed")):
        with pytest.raises(SparseCSEError, match=message):
            parse_seeds(bad, 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'seeds'"):  # a RewindConfig field
        sweep(tiny_bert_dir, "0.5", "0.5", out=tmp_path / "s", seeds="0,1", options=SweepOptions(show_progress=False))
    assert not (tmp_path / "s").exists()
    from sparsecse.cli import main

    r = CliRunner().invoke(main, ["sweep", "--model", str(tiny_bert_dir), "--sparsities", "0.5", "--out",
                                  str(tmp_path / "c"), "--rewind", "--corpus", __file__, "--seeds", "0,zero"])
    assert r.exit_code == 1 and "comma-separated integers" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "c").exists()
    r = CliRunner().invoke(main, ["sweep", "--model", str(tiny_bert_dir), "--sparsities", "0.5", "--out",
                                  str(tmp_path / "d"), "--seeds", "0,1"])
    assert r.exit_code == 1 and "--seeds only apply with --rewind" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "d").exists()
