"""One timing method behind every speed figure: a model's speed-up on its card and in the benchmarks' tables is
the same number (:func:`sparsecse.targets.report.stsb_speedups`, the targets' interleaved rounds), and the
best-of-repeats timing the benchmarks used is gone (timing replaced by the latency model of tests/test_targets.py)."""

import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparsecse.evaluation import speed
from sparsecse.recipes import final_figures
from sparsecse.targets import timing
from sparsecse.targets.timing import ROUNDS
from tests.helpers import load_benchmark
from tests.test_targets import FIXED, VARIABLE, fake_clock  # noqa: F401,F811  (fixture)
from tests.tiny import make_tiny_model_dir

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def frontier():
    yield from load_benchmark("frontier")


@pytest.fixture(scope="module")
def deploy_speed():
    yield from load_benchmark("deploy_speed")


def test_a_models_speed_up_is_one_number_on_its_card_and_in_the_benchmarks(tmp_path, fake_senteval, fake_clock,  # noqa: F811
                                                                          frontier, deploy_speed):
    dense = make_tiny_model_dir(tmp_path / "dense", "bert", layers=2, heads=4, ffn=48, seed=2, init_range=0.2)
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, heads=4, ffn=48, seed=3, init_range=0.2)
    card = final_figures.measure_speed(str(dense), str(small), None, fake_senteval, False)
    assert card["speedup"] == pytest.approx(1 / (FIXED + VARIABLE * 0.5), abs=1e-4)  # half the layers' FLOPs
    args = SimpleNamespace(data_dir=fake_senteval, batch_size=128, threads=2, rounds=ROUNDS)
    rows = [SimpleNamespace(model_dir=str(dense), kind="dense"), SimpleNamespace(model_dir=str(small), kind="x")]
    timings, _ = frontier.time_rows(rows, {}, args)
    assert round(timings[1].speedup, 4) == card["speedup"] and timings[1].rounds == ROUNDS
    deployed = [{"model": f"{name} torch fp32", "model_dir": str(path), "source": str(path), "file": None,
                 "precision": "fp32"} for name, path in (("dense", dense), ("small", small))]
    deploy_speed.time_rows(deployed, args)
    assert round(deployed[1]["speedup"], 4) == card["speedup"] and deployed[0]["speedup"] == 1.0
    low, high = deployed[1]["speedup_ci"]
    assert low <= deployed[1]["speedup"] <= high


def test_every_speed_benchmark_times_through_the_targets_method_and_no_second_one_is_left():
    for name in ("frontier", "compression", "deploy_speed", "shrink_speed"):
        source = (BENCHMARKS / f"{name}.py").read_text()
        assert "stsb_speedups(" in source, name
        assert "best_times" not in source and "process_time" not in source and "cpu_speedup" not in source, name
    assert not hasattr(speed, "interleaved_best_times") and not hasattr(speed, "time_encode")
    assert "stsb_speedups(" in inspect.getsource(final_figures.measure_speed)
    assert not hasattr(timing, "latency_profile") and not hasattr(timing, "latency_profiles")


def test_no_module_times_a_model_by_its_best_of_several_repeats():
    """The card's latency and throughput come from interleaved rounds too (the serving table's rows); a best-of
    timing anywhere in the package or the benchmarks is a second method."""
    root = Path(__file__).resolve().parents[1]
    sources = sorted((root / "sparsecse").rglob("*.py")) + sorted(BENCHMARKS.glob("*.py"))
    best_of = re.compile(r"min\((?:speed\.)?clock\(|best of (?:\d|repeats|rounds|\{|``)|repeats: int"
                         r"|best\w*\[[^]]+\] = (?:min|max)\(|(?:min|max)\(\w*times\)|: min\(v\) for")
    offenders = [f"{path.relative_to(root)}:{n}" for path in sources
                 for n, line in enumerate(path.read_text().splitlines(), 1) if best_of.search(line)]
    assert offenders == []


def test_no_stored_figure_and_no_guide_is_timed_best_of():
    """An entry timed best of several runs holds ``repeats``; the one timing holds ``rounds``. None is left, and
    "best of N" typed in the README or a guide outside a generated block fails too."""
    import json

    root = Path(__file__).resolve().parents[1]
    best_of = re.compile(r"best of \d")
    stored = sorted(path.stem for path in (root / "docs" / "results" / "store").glob("*.json")
                    if "repeats" in json.loads(path.read_text())["figures"])
    assert stored == []
    block = re.compile(r"<!-- BEGIN figures: (\S+) -->.*?<!-- END figures: \1 -->", re.S)
    pages = [root / "README.md", *sorted((root / "docs" / "guides").glob("*.md"))]
    typed = [f"{page.relative_to(root)}:{n}" for page in pages
             for n, line in enumerate(block.sub("", page.read_text()).splitlines(), 1) if best_of.search(line)]
    assert typed == []
