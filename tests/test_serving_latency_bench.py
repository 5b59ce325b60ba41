"""benchmarks/serving_latency.py --store: the timing it printed becomes one results-store entry that reads back
with its rows, CPU, threads and batch (the entry the docs' latency tables are written from)."""

from types import SimpleNamespace

import pytest

from sparsecse.reporting.store import load_store
from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def serving_latency():
    yield from load_benchmark("serving_latency")


def test_the_timing_is_stored_as_one_entry_with_its_shape(serving_latency, tmp_path):
    rows = [{"model": "all-MiniLM-L6-v2", "p50_ms": 7.3, "p95_ms": 8.5, "p50_speedup": 1.0, "p95_speedup": 1.0,
             "total_speedup": 1.0, "max_abs_diff_vs_sparsecse": 1e-7},
            {"model": "runs/x/model", "p50_ms": 3.5, "p95_ms": 4.1, "p50_speedup": 2.086, "p95_speedup": 2.073,
             "total_speedup": 2.05, "max_abs_diff_vs_sparsecse": 8e-8}]
    result = {"cpu": "a CPU", "threads": 2, "batch_size": 128, "requests": 40,
              "sentences": "128 STS-B test sentences per request",
              "loader": "sentence-transformers", "rows": rows}
    args = SimpleNamespace(store=str(tmp_path), store_id="serving-latency.test.a-cpu", batch_size=128, threads=2)
    path = serving_latency.store_entry(result, args)
    entry = load_store(tmp_path)["serving-latency.test.a-cpu"]
    assert path == tmp_path / "serving-latency.test.a-cpu.json"
    assert entry.figures["rows"] == rows and entry.figures["requests"] == 40
    assert (entry.provenance["threads"], entry.provenance["batch_size"]) == (2, 128)
    assert entry.provenance["command"].startswith("python benchmarks/serving_latency.py")
    assert entry.title.startswith("benchmarks/serving_latency.py: 128 STS-B test sentences per request")


def test_each_model_serves_its_turn_of_requests_and_the_order_rotates(serving_latency):
    assert serving_latency.schedule(["a", "b"], 3, 1) == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert serving_latency.schedule(["a", "b"], 5, 2) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3),
                                                          ("a", 2), ("a", 3), ("a", 4), ("b", 4)]


def test_served_alone_each_model_times_every_request_in_a_process_of_its_own(tmp_path, tiny_bert_dir, fake_senteval):
    import json
    import subprocess
    import sys

    from tests.helpers import shrunk_dir

    other = shrunk_dir(tiny_bert_dir, tmp_path / "other")  # custom layout: its Python files are left out of the copy
    out = tmp_path / "alone.json"
    from tests.helpers import BENCHMARKS

    run = subprocess.run([sys.executable, str(BENCHMARKS / "serving_latency.py"), "--alone", "--model", str(tiny_bert_dir),
                          str(other), "--requests", "7", "--turn", "2", "--warmup", "1", "--threads", "1",
                          "--data-dir", str(fake_senteval), "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["alone"] and "served alone by a process of its own" in result["sentences"]
    assert [r["model"] for r in result["rows"]] == [str(tiny_bert_dir), str(other)]
    assert result["rows"][0]["p50_speedup"] == 1.0 and result["rows"][1]["p50_ms"] > 0
    assert result["rows"][1]["max_abs_diff_vs_sparsecse"] < 1e-5  # the shrunk model served as sparsecse embeds it


def test_the_requests_are_the_distinct_sentences_of_the_split_asked_for(serving_latency, fake_senteval):
    import csv

    def distinct(split):
        with open(fake_senteval / "STS" / "STSBenchmark" / f"sts-{split}.csv", encoding="utf-8") as f:
            return list(dict.fromkeys(t for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                                      for t in row[5:7]))

    dev, test = serving_latency.sts_sentences(fake_senteval, "dev"), serving_latency.sts_sentences(fake_senteval)
    assert dev == distinct("dev") and test == distinct("test") and dev != test
    assert len(dev) == len(set(dev))
