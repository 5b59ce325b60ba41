"""eval --bootstrap / --out result files and compare A B on tiny models and the miniature SentEval data."""

import json

import pytest

import sparsecse
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import STS_TASKS
from tests.tiny import make_tiny_model_dir
from tests.helpers import cli


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_other"), "bert", seed=1)


@pytest.fixture(scope="module")
def result_files(tiny_bert_dir, other_model, fake_senteval, tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    for name, model in (("a", tiny_bert_dir), ("b", other_model)):
        r = cli("eval", "--model", model, "--data-dir", fake_senteval, "--quiet", "--device", "cpu", "--out",
                root / f"{name}.json")
        assert r.exit_code == 0, r.output
    return root / "a.json", root / "b.json"


def test_eval_bootstrap_is_deterministic_and_brackets_the_score(tiny_bert_dir, fake_senteval):
    args = ("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS12,STSBenchmark",
            "--bootstrap", 200, "--json", "--quiet", "--device", "cpu")
    first, again = json.loads(cli(*args).stdout), json.loads(cli(*args).stdout)
    boot = first["bootstrap"]
    assert boot == again["bootstrap"] and boot["replicates"] == 200 and boot["seed"] == 0
    for task, (lo, hi) in boot["tasks"].items():
        assert lo < first["scores"][task] < hi
    assert boot["avg"][0] < first["avg_sts"] < boot["avg"][1]
    assert "pairs" not in first  # per-pair arrays go to --out, not to stdout
    other = json.loads(cli(*args, "--bootstrap-seed", 1).stdout)["bootstrap"]
    assert other["tasks"]["STS12"] != boot["tasks"]["STS12"]
    table = cli(*[x for x in args if x != "--json"]).stdout
    assert "95% interval (200 bootstrap replicates, seed 0)" in table and "STS avg" in table


def test_result_file_records_pairs_and_the_data_fingerprint(result_files, fake_senteval):
    written = json.loads(result_files[0].read_text())
    assert written["data"]["tasks"] == list(STS_TASKS)
    stsb = written["pairs"]["STSBenchmark"]
    assert len(stsb["similarity"]) == len(stsb["gold"]) == written["data"]["pairs"]["STSBenchmark"]
    assert sum(written["pairs"]["STS16"]["subsets"].values()) == 5 * 8  # unscored pairs skipped
    assert len(written["data"]["sha256"]["STS12"]) == 64


def test_a_model_against_itself_is_exactly_zero(tiny_bert_dir, fake_senteval, result_files):
    same = sparsecse.compare(tiny_bert_dir, tiny_bert_dir, config=sparsecse.ComparisonConfig(data_dir=fake_senteval,
        replicates=200, device="cpu"))
    for row in [*same["tasks"].values(), same["avg_sts"]]:
        assert row["diff"] == 0.0 and row["ci"] == [0.0, 0.0] and row["p"] == 1.0
    # a model against its own result file: the stored similarities are the same numbers
    mixed = sparsecse.compare(result_files[0], tiny_bert_dir, config=sparsecse.ComparisonConfig(
        data_dir=fake_senteval, replicates=200, device="cpu"))
    assert mixed["avg_sts"]["ci"] == [0.0, 0.0] and mixed["avg_sts"]["p"] == 1.0


def test_compare_result_files_table_and_json(result_files):
    a, b = result_files
    as_json = cli("compare", a, b, "--bootstrap", 300, "--json")
    assert as_json.exit_code == 0, as_json.output
    payload = json.loads(as_json.stdout)
    assert list(payload["tasks"]) == list(STS_TASKS) and payload["replicates"] == 300
    scores_a, scores_b = (json.loads(p.read_text())["scores"] for p in (a, b))
    for task, row in payload["tasks"].items():
        assert row["a"] == scores_a[task] and row["b"] == scores_b[task]
        assert row["diff"] == pytest.approx(scores_b[task] - scores_a[task])
        assert row["ci"][0] <= row["ci"][1] and 0 < row["p"] <= 1
    assert "paired bootstrap" in payload["test"]
    # B - A is A - B negated, with the same p (the same resamples)
    swapped = json.loads(cli("compare", b, a, "--bootstrap", 300, "--json").stdout)
    assert swapped["avg_sts"]["diff"] == pytest.approx(-payload["avg_sts"]["diff"])
    assert swapped["avg_sts"]["p"] == payload["avg_sts"]["p"]
    table = cli("compare", a, b, "--bootstrap", 300).stdout.splitlines()
    assert table[0].split()[:4] == ["task", "A", "B", "B"] and table[8].startswith("STS avg")
    subset = json.loads(cli("compare", a, b, "--tasks", "STS13,SICK-R", "--bootstrap", 50, "--json").stdout)
    assert list(subset["tasks"]) == ["STS13", "SICKRelatedness"]


def test_refuses_result_files_of_other_data_or_tasks(tiny_bert_dir, fake_senteval, result_files, tmp_path):
    a, _ = result_files
    fewer = tmp_path / "fewer.json"
    assert cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS12,STS13", "--quiet",
               "--device", "cpu", "--out", fewer).exit_code == 0
    r = cli("compare", a, fewer)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.count("\n") == 1 and "different data or tasks" in r.output and "tasks STS12" in r.output
    edited = json.loads(a.read_text())
    edited["data"]["sha256"]["STS14"] = "0" * 64
    other = tmp_path / "other-data.json"
    other.write_text(json.dumps(edited))
    with pytest.raises(SparseCSEError, match="different STS14 sentences or gold scores"):
        sparsecse.compare(a, other)


def test_compare_bad_input_is_one_line_error(tiny_bert_dir, fake_senteval, result_files, tmp_path):
    a, b = result_files
    not_json = tmp_path / "notes.json"
    not_json.write_text("hello")
    transfer_only = tmp_path / "trec.json"
    assert cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "TREC", "--fasttest",
               "--quiet", "--device", "cpu", "--out", transfer_only).exit_code == 0
    cases = [
        (("compare", a, b, "--tasks", "STS12,TREC"), "not on TREC"),
        (("compare", a, b, "--mask-a", a), "--mask-a gates a model"),
        (("compare", not_json, b), "is not a JSON result file"),
        (("compare", transfer_only, b), "holds no per-pair STS similarities"),
        (("compare", a, tiny_bert_dir, "--mask-b", tmp_path / "none.safetensors"), "does not exist"),
        (("compare", a, b, "--bootstrap", 0), "Invalid value"),
        (("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "MR", "--bootstrap", 10),
         "report the spread of their folds"),  # TREC, SST2 and MRPC take --bootstrap (issue 39)
    ]
    for args, message in cases:
        r = cli(*args)
        assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, (args, r.output)


@pytest.mark.integration
def test_all_minilm_on_stsb_interval_and_self_comparison(minilm_dir, senteval_dir, tmp_path):
    out = tmp_path / "minilm.json"
    r = cli("eval", "--model", minilm_dir, "--data-dir", senteval_dir, "--tasks", "STSBenchmark", "--bootstrap", 200,
            "--quiet", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    payload = json.loads(r.stdout)
    lo, hi = payload["bootstrap"]["tasks"]["STSBenchmark"]
    assert lo < payload["scores"]["STSBenchmark"] < hi and 0.5 < hi - lo < 10  # 1379 pairs: a few points wide
    same = sparsecse.compare(out, out, config=sparsecse.ComparisonConfig(replicates=200))
    assert same["avg_sts"]["ci"] == [0.0, 0.0] and same["avg_sts"]["p"] == 1.0
