"""The card's serving table (one speed figure per shape): the grid of threads and batches, exact figures under a
fake clock, the fresh process's plumbing on a tiny model, the table on the card with the judged row marked, and no
speed-up on the card without its shape."""

import re

import pytest

from sparsecse.cards.sections import compression_section
from sparsecse.evaluation import speed
from sparsecse.targets import fresh
from sparsecse.targets.engines import to_time
from sparsecse.targets.serving import (SERVING_REQUESTS, SERVING_SENTENCES, measure_grid, profiles, rejudged,
                                      serving_grid, serving_table)
from sparsecse.targets.timing import Timing
from sparsecse.targets.spec import Shape, Target
from tests.test_target_shapes import Clock, Costly
from tests.tiny import make_tiny_model_dir


def test_the_grid_is_batch_1_the_targets_and_128_on_1_thread_all_cores_and_the_targets():
    assert serving_grid(Shape("throughput", 128, 2), cores=2) == [(1, 1), (1, 128), (2, 1), (2, 128)]
    assert serving_grid(Shape("latency-p50", 8, 4), cores=16) == [(t, b) for t in (1, 4, 16) for b in (1, 8, 128)]


def test_each_row_is_the_exact_ratio_and_latency_of_its_shape(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    sentences = [f"s{i}" for i in range(256)]
    rows = measure_grid(Costly(0.010, 0.001), Costly(0.010, 0.004), sentences, [(1, 1), (2, 128)],
                        judged=Shape("latency-p50", 2, 1))
    one, big = rows
    assert one["speedup"] == pytest.approx(0.014 / 0.011, abs=1e-4) and not one["judged"] and not big["judged"]
    assert (one["p50_ms"], one["input_p50_ms"]) == (11.0, 14.0)
    assert big["speedup"] == pytest.approx(0.522 / 0.138, abs=1e-4)  # the fixed cost fades at batch 128
    assert (big["p95_ms"], big["input_p95_ms"], big["requests"], big["spread"]) == (138.0, 522.0, 2, 0)


def test_the_cards_latency_and_throughput_are_the_tables_rows_at_the_shapes_threads(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    sentences = [f"s{i}" for i in range(256)]
    rows = measure_grid(Costly(0.010, 0.001), Costly(0.010, 0.004), sentences, [(1, 1), (1, 128), (2, 1)],
                        judged=Shape("throughput", 128, 1))
    assert (rows[1]["throughput"], rows[1]["input_throughput"]) == (round(256 / 0.276, 1), round(256 / 1.044, 1))
    mine, theirs = profiles({"rows": rows}, Shape("throughput", 128, 1))
    assert (mine["latency_ms_p50"], mine["latency_ms_p95"], theirs["latency_ms_p50"]) == (11.0, 11.0, 14.0)
    assert (mine["throughput"], theirs["throughput"]) == (rows[1]["throughput"], rows[1]["input_throughput"])


def test_the_judged_row_is_timed_like_the_others_and_its_speedup_is_the_targets_figure_alone(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    sentences = [f"s{i}" for i in range(2048)]
    rows = measure_grid(Costly(0.010, 0.001), Costly(0.010, 0.004), sentences, [(1, 1), (1, 128)],
                        judged=Shape("throughput", 128, 1))
    one, judged = rows
    assert judged["judged"] and (judged["speedup"], judged["spread"]) == (None, None)  # no second figure
    assert judged["requests"] == SERVING_SENTENCES // 128  # 4 of the target's 16 requests of 128, as any row
    assert one["requests"] == SERVING_REQUESTS and "ratios" not in one  # thinned, summed
    assert judged["throughput"] == round(512 / 0.552, 1)  # its latency and throughput are kept for the card
    rejudged({"rows": rows}, Timing.of([2.0, 2.1, 2.2]), "served alone")
    assert (judged["speedup"], judged["method"], judged["timed_again"]) == (2.1, "served alone", True)
    assert one["speedup"] == pytest.approx(0.014 / 0.011, abs=1e-4)


class Dev:
    name, sentences = "dev", [f"sentence number {i} of the dev set" for i in range(40)]

    def score(self, encoder):
        return 80.0


def test_the_target_figure_is_timed_served_alone_and_the_serving_tables_judged_row_holds_it(tmp_path, monkeypatch):
    from sparsecse.targets import report
    from sparsecse.targets.alone import ALONE
    from sparsecse.targets.statistics import MIN_ROUNDS
    from tests.test_targets import FakeClock

    monkeypatch.setattr(speed, "clock", FakeClock())
    dense = make_tiny_model_dir(tmp_path / "dense", "bert", layers=2, heads=2, ffn=16, seed=1)
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, heads=2, ffn=16, seed=1)
    target = Target(speedup=1.2, threads=1).check()
    reached = report.measure_target(target, str(dense), str(small), Dev(), tmp_path / "work", serving=True)
    judged = [r for r in reached["serving"]["rows"] if r["judged"]]
    assert len(judged) == 1 and (judged[0]["threads"], judged[0]["batch"]) == (1, 128)
    assert reached["speedup"] == judged[0]["speedup"] > 1.2 and reached["spread"] == judged[0]["spread"] == 0
    assert reached["method"] == judged[0]["method"] == ALONE and "served alone" in reached["method"]
    assert reached["interval"]["low"] <= reached["speedup"] <= reached["interval"]["high"]
    assert reached["aa"]["speedup"] == 1.0 and reached["rounds"] == MIN_ROUNDS  # a clock without noise
    assert reached["met"] and not reached["near_miss"] and reached["precision"] is None
    # whatever the interleaved table measured at that shape, its judged row is the target's one figure
    wide = report.serving_table

    def noisy(*args):
        table = wide(*args)
        next(r for r in table["rows"] if r["judged"])["ratios"] = [1.0, 1.5, 2.0, 2.5, 3.0]
        return table

    monkeypatch.setattr(report, "serving_table", noisy)
    again = report.measure_target(target, str(dense), str(small), Dev(), tmp_path / "work", serving=True)
    row = next(r for r in again["serving"]["rows"] if r["judged"])
    assert row["timed_again"] and row["speedup"] == again["speedup"] == reached["speedup"]
    assert again["spread"] == row["spread"] == 0


def test_the_serving_table_is_measured_in_a_fresh_process(tmp_path, monkeypatch):
    monkeypatch.setenv(fresh.ENV, "fresh")
    model = make_tiny_model_dir(tmp_path / "m", "bert", layers=1, heads=2, ffn=16, seed=1)
    target = Target(speedup=2.0).check()
    shape = target.shape(1)
    placed = to_time(model, target.engine, loader=shape.loader)
    table = serving_table(target, shape, placed, placed, ["a b c", "d e", "f"])
    grid = serving_grid(shape, table["cores"])
    assert [(r["threads"], r["batch"]) for r in table["rows"]] == grid
    assert [r["judged"] for r in table["rows"]] == [(t, b) == (1, 128) for t, b in grid]
    assert all((r["speedup"] is None) == r["judged"] and r["p50_ms"] > 0 for r in table["rows"])
    assert "fresh process" in table["method"] and table["metric"] == "throughput"


SPEEDUP = re.compile(r"\d+\.\d+x")


def test_the_card_has_the_serving_table_and_no_speedup_without_its_shape():
    rows = [{"threads": t, "batch": b, "speedup": 1.3 + b / 100, "spread": 0.02, "p50_ms": 5.0, "p95_ms": 6.0,
             "input_p50_ms": 7.0, "input_p95_ms": 8.0, "requests": 10, "judged": (t, b) == (2, 1)}
            for t in (1, 2) for b in (1, 128)]
    facts = {"speed": {"speedup": 2.06, "reference_speedup": 1.1, "reference": "small", "threads": 2,
                       "batch_size": 128, "engine": "torch fp32", "cpu": "x"},
             "target": {"speedup_target": 2.0, "speedup": 1.33, "spread": 0.03, "rounds": 5, "engine": "torch-fp32",
                        "batch_size": 1, "shape": {"metric": "latency-p50", "threads": 2, "batch_size": 1},
                        "latency_ms": {"p50": 5.0, "p95": 6.0}, "reference_latency_ms": {"p50": 7.0, "p95": 8.0},
                        "throughput": 300.0, "reference_throughput": 200.0,
                        "met": False, "serving": {"rows": rows, "metric": "latency-p50", "method": "timed"}}}
    card = "\n".join(compression_section(facts, "base"))
    assert "#### Serving" in card and "| 2 | 1 | 1.31x ±2% | 5.0 / 6.0 ms | 7.0 / 8.0 ms | **judged by** (latency-p50) |" in card
    assert card.count("**judged by**") == 1
    for line in card.splitlines():
        if (SPEEDUP.search(line) or " ms" in line or "sentences/s" in line) and not line.startswith("|"):
            assert "batch" in line and "threads" in line, line  # every speed figure outside the table names its shape
