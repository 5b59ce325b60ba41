"""Sweeps on a tiny model with a stand-in evaluator: caching, resume, refusal, summary picks."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from sparsecse.data.sts import read_sts_benchmark
from sparsecse.errors import SparseCSEError
from sparsecse.pruning.prune import PruningConfig
from sparsecse.reporting.report import best_points, results_table
from sparsecse.sweeps import run as sweep_mod
from sparsecse.sweeps.config import RewindConfig, SweepOptions
from sparsecse.sweeps.run import sweep
from tests.helpers import evaluation, scoring


class CountingEvaluator:
    """Stands in for sparsecse.evaluation.evaluate: STS-B test Spearman of the (masked) tiny model for
    every requested task (shifted per task), plus alignment/uniformity; counts its calls."""

    def __init__(self):
        self.calls = []
        self.embeddings = []  # (s1 rows, s2 rows) of every call

    def __call__(self, model, mask, tasks, data_dir, seed, **options):
        from scipy.stats import spearmanr

        from sparsecse.scoring.alignment import alignment_metric, uniformity_metric
        from sparsecse.modeling.encoder import SentenceEncoder

        encoder = model if isinstance(model, SentenceEncoder) else SentenceEncoder.load(model, device="cpu")
        pairs = read_sts_benchmark(data_dir, "test")
        gates = mask.apply(encoder.model) if mask is not None else None
        try:
            emb = encoder.encode([p.s1 for p in pairs] + [p.s2 for p in pairs], normalize=True,
                                 convert_to_numpy=False)
        finally:
            if gates is not None:
                gates.detach()
        a, b = emb[:len(pairs)], emb[len(pairs):]
        self.embeddings.append((a, b))
        rho = float(spearmanr((a * b).sum(1).numpy(), [p.score for p in pairs]).correlation * 100)
        self.calls.append((None if mask is None else (mask.heads_pruned, mask.neurons_pruned), tuple(tasks)))
        return {"scores": {t: rho + i for i, t in enumerate(tasks)},
                "alignment": float(alignment_metric(a, b)), "uniformity": float(uniformity_metric(a))}


@pytest.fixture
def evaluator(monkeypatch):
    fake = CountingEvaluator()
    monkeypatch.setattr(sweep_mod, "run_evaluation", fake)
    return fake


QUIET = SweepOptions(show_progress=False, make_report=False)
REPORTED = dataclasses.replace(QUIET, make_report=True)


def run(model, data, out, **kw):
    """A 2 x 2 sweep of ``model`` with the tests' scoring and evaluation (STS-B and STS12) unless ``kw`` says
    otherwise."""
    args = dict(sparsities="0.25,0.5", lambdas="0.25,0.75", out=out, score=scoring(data),
                evaluate=evaluation(data, tasks="STSBenchmark,STS12"), options=QUIET)
    args.update(kw)
    return sweep(model, **args)


def test_sweep_writes_every_point_and_the_report(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    out = tmp_path / "sweep"
    result = run(tiny_bert_dir, tiny_stsb_dir, out, options=REPORTED)
    assert len(evaluator.calls) == 1 + 4  # dense + 2 sparsities x 2 lambdas
    assert sorted(result.computed) == ["dense", "masked/s0.25-l0.25", "masked/s0.25-l0.75", "masked/s0.5-l0.25",
                                       "masked/s0.5-l0.75"]
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 5 * 2  # points x tasks
    assert set(table["task"]) == {"STSBenchmark", "STS12"}
    # 2 layers x 4 heads, 2 x 48 neurons: 25% removes 2 heads and 24 neurons
    row = table[(table["sparsity"] == 0.25) & (table["lambda"] == 0.25)].iloc[0]
    assert (row["heads_pruned"], row["neurons_pruned"]) == (2, 24)
    assert 0 < row["param_sparsity"] < 0.25
    assert json.loads((out / "results.json").read_text())[0]["task"] in {"STSBenchmark", "STS12"}
    assert "best avg." in (out / "summary.md").read_text()
    assert (out / "figures" / "avg_sts_vs_sparsity.png").stat().st_size > 1000
    assert (out / "masks" / "mask-s0.5-l0.75.safetensors").is_file()


def test_resume_recomputes_nothing_done(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator, monkeypatch):
    out = tmp_path / "sweep"
    real_prune_eval = sweep_mod.run_evaluation
    done = []

    def dies_on_third(*args, **kw):  # the sweep is killed during its third evaluation
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(1)
        return real_prune_eval(*args, **kw)

    monkeypatch.setattr(sweep_mod, "run_evaluation", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_bert_dir, tiny_stsb_dir, out)
    finished = sorted(p.relative_to(out / "points").as_posix() for p in (out / "points").rglob("*.json"))
    assert finished == ["dense.json", "masked/s0.25-l0.25.json"]
    assert not list(out.rglob("*.tmp"))  # nothing half-written

    monkeypatch.setattr(sweep_mod, "run_evaluation", evaluator)
    calls_before = len(evaluator.calls)
    result = run(tiny_bert_dir, tiny_stsb_dir, out)
    assert len(evaluator.calls) - calls_before == 3  # only the three unfinished points
    assert sorted(result.reused) == ["dense", "masked/s0.25-l0.25"]

    # a larger grid reuses everything finished; more tasks evaluate only the missing ones
    calls_before = len(evaluator.calls)
    result = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25,0.5,0.75")
    assert len(evaluator.calls) - calls_before == 2
    calls_before = len(evaluator.calls)
    run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.25",
        evaluate=evaluation(tiny_stsb_dir, tasks="STSBenchmark,STS12,STS13"),
        options=dataclasses.replace(QUIET, dense=False))
    assert evaluator.calls[calls_before:] == [((2, 24), ("STS13",))]
    point = json.loads((out / "points" / "masked" / "s0.25-l0.25.json").read_text())
    assert set(point["scores"]) == {"STSBenchmark", "STS12", "STS13"}
    state = json.loads((out / "sweep.json").read_text())
    assert [r["finished"] for r in state["runs"]] == [False, True, True, True]


def test_refuses_a_sweep_of_other_settings(tiny_bert_dir, tiny_roberta_dir, tiny_stsb_dir, tmp_path, evaluator):
    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5")
    with pytest.raises(SparseCSEError, match="different model or scoring settings.*model"):
        run(tiny_roberta_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5")
    with pytest.raises(SparseCSEError, match="scoring.batch_size 8 vs 16"):
        run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5",
            score=scoring(tiny_stsb_dir, batch_size=16))
    other = tmp_path / "not-a-sweep"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(SparseCSEError, match="not a sweep directory"):
        run(tiny_bert_dir, tiny_stsb_dir, other)


def test_bad_arguments_fail_before_any_work(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    with pytest.raises(SparseCSEError, match="sparsity"):
        run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "a", sparsities="0.5,1.5")
    with pytest.raises(SparseCSEError, match="corpus"):
        run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "b", rewind=RewindConfig())
    with pytest.raises(SparseCSEError, match="not in the sweep's sparsity grid"):
        run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "c", rewind=RewindConfig(corpus=__file__, sparsities="0.3"))
    assert not evaluator.calls


def test_rewinding_uses_the_best_lambda_and_is_cached(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator,
                                                      monkeypatch):
    from sparsecse.shrinking.shrink import shrink

    rewinds = []

    def fake_rewind(mask_path, corpus, out, init=None, objective="simcse", seed=0, data_dir=None,
                    show_progress=False, **kw):
        rewinds.append((mask_path.name, kw))
        shrink(tiny_bert_dir, mask_path, out)  # a pruned model directory, as rewinding writes one

    monkeypatch.setattr(sweep_mod, "run_rewind", fake_rewind)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a man is playing\na dog runs\n")
    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, rewind=RewindConfig(corpus=corpus, sparsities="0.5", args={"max_steps": 3}),
        options=REPORTED)
    table = results_table([json.loads(p.read_text()) for p in (out / "points").rglob("*.json")])
    masked = table[(table["variant"] == "masked") & (table["sparsity"] == 0.5)].drop_duplicates("lambda")
    best_lam = masked.sort_values(["avg_sts", "lambda"], ascending=[False, True]).iloc[0]["lambda"]
    assert [name for name, _ in rewinds] == ["mask-dense.safetensors", f"mask-s0.5-l{best_lam:g}.safetensors"]
    assert rewinds[0][1] == {"max_steps": 3}
    rewound = table[table["variant"] == "rewound"]
    assert sorted(rewound["sparsity"].unique()) == [0.0, 0.5]
    assert rewound["rewind_id"].str.startswith("simcse-").all()
    summary = (out / "summary.md").read_text()
    assert "pruned + rewound (simcse" in summary and "control" in summary

    n_rewinds, n_evals = len(rewinds), len(evaluator.calls)
    run(tiny_bert_dir, tiny_stsb_dir, out, rewind=RewindConfig(corpus=corpus, sparsities="0.5", args={"max_steps": 3}))
    assert (len(rewinds), len(evaluator.calls)) == (n_rewinds, n_evals)
    # other rewinding settings live beside the first ones
    run(tiny_bert_dir, tiny_stsb_dir, out,
        rewind=RewindConfig(corpus=corpus, sparsities="0.5", args={"max_steps": 4}, dense=False))
    assert len(rewinds) == n_rewinds + 1
    assert len(list((out / "rewound").iterdir())) == 2


def test_shrunk_evaluation_matches_masked(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    """The physically shrunk model embeds every sentence as the gated one does. (Not its Spearman: the
    tiny model's cosines all lie within 1e-5 of 1, so rounding decides their ranks.)"""
    run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "m", sparsities="0.5", lambdas="0.5",
        options=dataclasses.replace(QUIET, eval_mode="masked"))
    run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "s", sparsities="0.5", lambdas="0.5",
        options=dataclasses.replace(QUIET, eval_mode="shrunk"))
    assert evaluator.calls[1][0] == (4, 48) and evaluator.calls[3][0] is None  # gated vs physically removed
    (ma, mb), (sa, sb), (da, _) = evaluator.embeddings[1], evaluator.embeddings[3], evaluator.embeddings[0]
    assert torch.allclose(ma, sa, atol=1e-5) and torch.allclose(mb, sb, atol=1e-5)
    assert not torch.allclose(ma, da, atol=1e-3)  # and the pruning did change them


# ---------------------------------------------------------------------------- summary picks
def fixed_table() -> pd.DataFrame:
    """A hand-made results table: dense, two λ x three sparsities, one rewound point."""
    tasks = ["STS12", "STSBenchmark"]
    points = [{"variant": "dense", "sparsity": 0.0, "lambda": None, "scores": {"STS12": 70.0, "STSBenchmark": 80.0}}]
    grid = {(0.01, 0.5): (71.0, 80.5), (0.02, 0.5): (70.5, 82.0), (0.1, 0.5): (69.0, 79.0),
            (0.01, 0.25): (72.5, 78.0), (0.02, 0.25): (71.5, 81.5), (0.1, 0.25): (68.0, 78.5)}
    for (s, lam), (a, b) in grid.items():
        points.append({"variant": "masked", "sparsity": s, "lambda": lam, "scores": dict(zip(tasks, (a, b)))})
    points.append({"variant": "rewound", "rewind_id": "simcse-x", "objective": "simcse", "sparsity": 0.1,
                   "lambda": 0.5, "scores": {"STS12": 75.0, "STSBenchmark": 70.0}})
    for i, p in enumerate(points):
        p["point"] = f"p{i}"
        p["avg_sts"] = float(np.mean(list(p["scores"].values())))  # stands in for the 7-task average
    return results_table(points, model="m")


def test_best_points_on_a_fixed_table():
    picks = best_points(fixed_table(), ["STS12", "STSBenchmark"])
    assert picks["baseline"] == {"STS12": 70.0, "STSBenchmark": 80.0, "avg_sts": 75.0}
    best = picks["best_average"]
    # averages: (0.01,.5) 75.75, (0.02,.5) 76.25, (0.01,.25) 75.25, (0.02,.25) 76.5 <- best
    assert (best["sparsity"], best["lambda"]) == (0.02, 0.25)
    assert best["scores"]["avg_sts"] == pytest.approx(76.5)
    assert best["diff"]["avg_sts"] == pytest.approx(1.5)
    assert best["diff"]["STS12"] == pytest.approx(1.5)
    per_task = picks["best_per_task"]
    assert (per_task["STS12"]["sparsity"], per_task["STS12"]["lambda"], per_task["STS12"]["diff"]) == (0.01, 0.25, 2.5)
    assert (per_task["STSBenchmark"]["sparsity"], per_task["STSBenchmark"]["lambda"]) == (0.02, 0.5)
    assert per_task["STSBenchmark"]["diff"] == pytest.approx(2.0)
    rewound = best_points(fixed_table(), ["STS12", "STSBenchmark"], "rewound", "simcse-x")
    assert rewound["best_average"]["sparsity"] == 0.1
    assert rewound["best_per_task"]["STS12"]["diff"] == pytest.approx(5.0)


def test_best_points_ties_go_to_the_lower_sparsity():
    points = [{"variant": "dense", "sparsity": 0.0, "lambda": None, "scores": {"STS12": 1.0}, "avg_sts": 1.0},
              {"variant": "masked", "sparsity": 0.2, "lambda": 0.5, "scores": {"STS12": 3.0}, "avg_sts": 3.0},
              {"variant": "masked", "sparsity": 0.1, "lambda": 0.75, "scores": {"STS12": 3.0}, "avg_sts": 3.0},
              {"variant": "masked", "sparsity": 0.1, "lambda": 0.25, "scores": {"STS12": 3.0}, "avg_sts": 3.0}]
    for i, p in enumerate(points):
        p["point"] = f"p{i}"
    best = best_points(results_table(points), ["STS12"])["best_average"]
    assert (best["sparsity"], best["lambda"]) == (0.1, 0.25)


def test_report_rebuilds_without_recomputing(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", options=REPORTED)
    (out / "summary.md").unlink()
    for f in (out / "figures").iterdir():
        f.unlink()
    calls = len(evaluator.calls)
    from sparsecse.cli import main

    result = CliRunner().invoke(main, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert len(evaluator.calls) == calls
    assert "dense" in (out / "summary.md").read_text()
    assert {p.name for p in (out / "figures").iterdir()} >= {"avg_sts_vs_sparsity.svg", "pruned_per_layer.png",
                                                             "alignment_uniformity.png", "head_importance_l0.5.png"}
    bad = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert bad.exit_code == 1 and "is not a sweep directory" in bad.output


def test_sweep_cli(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    from sparsecse.cli import main

    out = tmp_path / "sweep"
    args = ["sweep", "--model", str(tiny_bert_dir), "--sparsities", "0.25:0.5:0.25", "--lambdas", "0.5",
            "--tasks", "STSBenchmark", "--out", str(out), "--data-dir", str(tiny_stsb_dir), "--score-batch-size", "8",
            "--max-batches", "2", "--device", "cpu", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout.strip().splitlines()[-1])
    assert reply["computed"] == 3 and reply["reused"] == 0
    assert reply["best_average"]["sparsity"] in (0.25, 0.5)
    again = json.loads(CliRunner().invoke(main, args).stdout.strip().splitlines()[-1])
    assert again["computed"] == 0 and again["reused"] == 3
    bad = CliRunner().invoke(main, args[:-1] + ["--sparsities", "0.5:0.1:0.1"])
    assert bad.exit_code == 1 and "Error:" in bad.output and "Traceback" not in bad.output


def test_shrunk_evaluation_needs_a_shrinkable_architecture(tmp_path, tiny_stsb_dir, evaluator):
    from tests.tiny import make_tiny_model_dir

    distil = make_tiny_model_dir(tmp_path / "distil", "distilbert")
    with pytest.raises(SparseCSEError, match="'distilbert' models do not support"):
        run(distil, tiny_stsb_dir, tmp_path / "sweep", options=dataclasses.replace(QUIET, eval_mode="shrunk"))
    assert not (tmp_path / "sweep").exists() and not evaluator.calls


def test_budget_points_next_to_sparsities_and_alone(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    out = tmp_path / "sweep"
    result = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", keep_flops="0.9,0.7",
                 options=REPORTED)
    assert sorted(result.computed) == ["budget/f0.7-l0.5", "budget/f0.9-l0.5", "dense", "masked/s0.25-l0.5"]
    point = json.loads((out / "points" / "budget" / "f0.7-l0.5.json").read_text())
    assert point["keep_flops"] == 0.7 and point["kept_flops_ratio"] <= 0.7 and point["sparsity"] is None
    assert (out / "masks" / "mask-f0.7-l0.5.safetensors").is_file()
    table = pd.read_csv(out / "results.csv")
    assert set(table[table["variant"] == "budget"]["keep_flops"]) == {0.7, 0.9}
    again = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities=None, lambdas="0.5", keep_flops="0.7")
    assert again.computed == [] and sorted(again.reused) == ["budget/f0.7-l0.5", "dense"]


@pytest.mark.parametrize("kw,message", [(dict(sparsities=None), "needs --sparsities, --keep-flops or both"),
                                        (dict(keep_flops="0,0.5"), "must lie in")])
def test_budget_sweep_bad_input(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator, kw, message):
    with pytest.raises(SparseCSEError, match=message):
        run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "sweep", **kw)
    assert not (tmp_path / "sweep").exists()


def _mask_file(out, name):
    from sparsecse.pruning.masks import Mask

    return Mask.load(out / "masks" / f"mask-{name}.safetensors")


def test_budget_points_default_to_fisher_and_the_criterion_is_part_of_the_fingerprint(
        tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    from sparsecse.pruning.prune import prune

    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", keep_flops="0.7")
    budget, sparse = _mask_file(out, "f0.7-l0.5"), _mask_file(out, "s0.25-l0.5")
    assert (budget.manifest["criterion"], budget.manifest["keep_one_head"]) == ("fisher", False)
    assert (sparse.manifest["criterion"], sparse.manifest["keep_one_head"]) == ("abs_grad", True)
    expected = prune(out / "scores.safetensors", lam=0.5, keep_flops=0.7, config=PruningConfig(criterion="fisher"))
    assert torch.equal(budget.head_mask, expected.head_mask) and torch.equal(budget.neuron_mask, expected.neuron_mask)
    # another criterion or keep-one-head rule is another sweep; the same settings resume
    for kw in (dict(prune=PruningConfig(criterion="abs_grad")), dict(prune=PruningConfig(keep_one_head=True))):
        with pytest.raises(SparseCSEError, match="different model or scoring settings.*pruning"):
            run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", keep_flops="0.7", **kw)
    again = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities=None, lambdas="0.5", keep_flops="0.7")
    assert again.computed == []


def test_a_sweep_directory_without_a_recorded_criterion_resumes_as_abs_grad(tiny_bert_dir, tiny_stsb_dir, tmp_path,
                                                                           evaluator):
    out = tmp_path / "sweep"
    run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5")
    state = json.loads((out / "sweep.json").read_text())  # as written before the criterion was recorded
    state["fingerprint"]["pruning"] = {"scope": "global", "keep_one_head": True}
    (out / "sweep.json").write_text(json.dumps(state))
    with pytest.raises(SparseCSEError, match="different model or scoring settings.*criterion"):
        run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", prune=PruningConfig(criterion="fisher"))
    resumed = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities="0.25", lambdas="0.5", keep_flops="0.7")
    assert resumed.computed == ["budget/f0.7-l0.5"]
    assert _mask_file(out, "f0.7-l0.5").manifest["criterion"] == "abs_grad"


def test_sweep_cli_criterion_and_keep_one_head(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    from sparsecse.cli import main

    out = tmp_path / "sweep"
    args = ["sweep", "--model", str(tiny_bert_dir), "--sparsities", "0.25", "--keep-flops", "0.7", "--lambdas", "0.5",
            "--tasks", "STSBenchmark", "--out", str(out), "--data-dir", str(tiny_stsb_dir), "--score-batch-size", "8",
            "--max-batches", "2", "--device", "cpu", "--criterion", "layer_norm", "--keep-one-head", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    for name in ("f0.7-l0.5", "s0.25-l0.5"):
        manifest = _mask_file(out, name).manifest
        assert (manifest["criterion"], manifest["keep_one_head"]) == ("layer_norm", True)
    assert (_mask_file(out, "f0.7-l0.5").head_mask.sum(1) >= 1).all()
    bad = CliRunner().invoke(main, [a if a != "layer_norm" else "fisher" for a in args])
    assert bad.exit_code == 1 and "different model or scoring settings" in bad.output and "Traceback" not in bad.output


def test_reconstructed_budget_points(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(p.s1 for p in read_sts_benchmark(tiny_stsb_dir, "train")) + "\n")
    out = tmp_path / "sweep"
    result = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities=None, lambdas="0.5", keep_flops="0.7",
                 reconstruct=str(corpus), options=REPORTED)
    recon = [name for name in result.computed if name.startswith("reconstructed/")]
    assert len(recon) == 1 and recon[0].endswith("/f0.7-l0.5")
    point = json.loads((out / "points" / f"{recon[0]}.json").read_text())
    assert point["variant"] == "reconstructed" and point["keep_flops"] == 0.7
    assert point["reconstruct_id"] == recon[0].split("/")[1]
    budget_emb, recon_emb = evaluator.embeddings[-2][0], evaluator.embeddings[-1][0]
    assert not torch.allclose(budget_emb, recon_emb)  # the refit changed the kept units' weights
    table = pd.read_csv(out / "results.csv")
    assert set(table["variant"]) == {"dense", "budget", "reconstructed"}
    again = run(tiny_bert_dir, tiny_stsb_dir, out, sparsities=None, lambdas="0.5", keep_flops="0.7",
                reconstruct=str(corpus))
    assert again.computed == [] and recon[0] in again.reused


def test_reconstruct_needs_budget_points(tiny_bert_dir, tiny_stsb_dir, tmp_path, evaluator):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a sentence\n")
    with pytest.raises(SparseCSEError, match="add --keep-flops"):
        run(tiny_bert_dir, tiny_stsb_dir, tmp_path / "sweep", sparsities="0.25", reconstruct=str(corpus))
    assert not (tmp_path / "sweep").exists()
