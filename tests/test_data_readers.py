import pytest

from sparsecse.data import (
    STS_YEARS,
    read_binary_task,
    read_mrpc,
    read_sick,
    read_sst2,
    read_sts_benchmark,
    read_sts_subset,
    read_sts_year,
    read_trec,
)
from sparsecse.data.text import read_lines
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.config import EvaluationConfig



def _write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


# ------------------------------------------------------------------ STS
def test_sts_subset_skips_empty_gold_lines_and_tolerates_extra_columns(tmp_path):
    inputs = _write(tmp_path / "in.txt", "a b\tc d\tsrc1\tsrc2\ne f\tg h\tsrc\tsrc\ni j\tk l\n")
    gold = _write(tmp_path / "gs.txt", "4.5\n\n1\n")
    pairs = read_sts_subset(inputs, gold)
    assert [(p.s1, p.s2, p.score) for p in pairs] == [("a b", "c d", 4.5), ("i j", "k l", 1.0)]


def test_sts_subset_keeps_trailing_empty_gold_lines_aligned(tmp_path):
    inputs = _write(tmp_path / "in.txt", "a\tb\nc\td\ne\tf\n")
    gold = _write(tmp_path / "gs.txt", "3\n\n\n")
    assert len(read_sts_subset(inputs, gold)) == 1


def test_sts_subset_malformed_line_names_file_and_line(tmp_path):
    inputs = _write(tmp_path / "in.txt", "a\tb\nno tab here\n")
    gold = _write(tmp_path / "gs.txt", "3\n2\n")
    with pytest.raises(SparseCSEError, match=r"in\.txt:2"):
        read_sts_subset(inputs, gold)
    _write(tmp_path / "in.txt", "a\tb\nc\td\n")
    _write(tmp_path / "gs.txt", "3\nhigh\n")
    with pytest.raises(SparseCSEError, match=r"gs\.txt:2: the gold score 'high' is not a number"):
        read_sts_subset(inputs, gold)


def test_sts_subset_line_count_mismatch(tmp_path):
    inputs = _write(tmp_path / "in.txt", "a\tb\nc\td\n")
    gold = _write(tmp_path / "gs.txt", "3\n")
    with pytest.raises(SparseCSEError, match="2 lines but its gold file"):
        read_sts_subset(inputs, gold)


def test_sts_years_read_every_subset(fake_senteval):
    for task, (_, subsets) in STS_YEARS.items():
        data = read_sts_year(fake_senteval, task)
        assert list(data) == list(subsets)
        # the fixture adds one unscored pair to each STS15/16 subset; it must be dropped
        assert all(len(pairs) == 8 for pairs in data.values())


def test_missing_task_directory_names_task_and_directory(tmp_path):
    (tmp_path / "STS").mkdir()
    with pytest.raises(SparseCSEError) as err:
        read_sts_year(tmp_path, "STS14")
    assert "STS14" in str(err.value) and str(tmp_path / "STS" / "STS14-en-test") in str(err.value)
    with pytest.raises(SparseCSEError, match="MR data is missing"):
        read_binary_task(tmp_path, "MR")


def test_sick_splits_crlf_and_header(fake_senteval):
    test = read_sick(fake_senteval, "test")  # written with CRLF line endings
    assert len(test) == 20 and not test[0].s2.endswith("\r")
    assert read_sick(fake_senteval, "dev") == read_sick(fake_senteval, "trial")
    with pytest.raises(SparseCSEError, match="Unknown SICK split"):
        read_sick(fake_senteval, "validation")


def test_stsb_reader_unchanged(fake_senteval):
    pairs = read_sts_benchmark(fake_senteval, "test")
    assert len(pairs) == 24 and all(0 <= p.score <= 5 for p in pairs)


# ------------------------------------------------------------------ transfer
def test_binary_tasks_skip_blank_lines_and_label_files(fake_senteval):
    for task in ("MR", "CR", "SUBJ", "MPQA"):
        examples = read_binary_task(fake_senteval, task)
        assert len(examples) == 32
        assert sum(e.label for e in examples) == 16
        assert all(e.text.endswith("good") == (e.label == 1) for e in examples)


def test_sst2_reader(fake_senteval, tmp_path):
    train = read_sst2(fake_senteval, "train")
    assert len(train) == 40 and {e.label for e in train} == {0, 1}
    assert train[1].text.endswith("good") and train[1].label == 1
    bad = tmp_path / "SST" / "binary"
    bad.mkdir(parents=True)
    _write(bad / "sentiment-test", "fine\t1\nno label here\n")
    with pytest.raises(SparseCSEError, match=r"sentiment-test:2"):
        read_sst2(tmp_path, "test")


def test_trec_reader_coarse_labels_and_latin1(fake_senteval, tmp_path):
    train = read_trec(fake_senteval, "train")
    assert len(train) == 60
    assert [e.label for e in train[:6]] == [0, 1, 2, 3, 4, 5]
    assert train[0].text.endswith("caf\xe9") and not train[0].text.startswith("abb")
    (tmp_path / "TREC").mkdir()
    _write(tmp_path / "TREC" / "TREC_10.label", "NUM:count How many ?\nWHAT:x why ?\n")
    with pytest.raises(SparseCSEError, match=r"TREC_10\.label:2"):
        read_trec(tmp_path, "test")


def test_mrpc_reader_bom_header_and_labels(fake_senteval, tmp_path):
    train = read_mrpc(fake_senteval, "train")
    assert len(train) == 40
    assert train[1].label == 1 and train[1].s1 == train[1].s2
    assert train[0].label == 0 and train[0].s1 != train[0].s2
    (tmp_path / "MRPC").mkdir()
    _write(tmp_path / "MRPC" / "msr_paraphrase_test.txt", "header\n1\t1\t2\tonly one sentence\n")
    with pytest.raises(SparseCSEError, match=r"msr_paraphrase_test\.txt:2"):
        read_mrpc(tmp_path, "test")


def test_read_lines_splits_on_newlines_only(tmp_path):
    path = _write(tmp_path / "f.txt", "\ufeffa\u2028b\r\nc\n\n")
    assert read_lines(path) == ["a\u2028b", "c", ""]


# ------------------------------------------------------------------ the shared data (no model)
REAL_COUNTS = {  # task directory under SENTEVAL -> (reader, expected sizes)
    **{f"STS/{t}-en-test": (lambda d, t=t: sum(map(len, read_sts_year(d, t).values())), n)
       for t, n in {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}.items()},
    "STS/STSBenchmark": (lambda d: len(read_sts_benchmark(d, "test")), 1379),
    "SICK": (lambda d: len(read_sick(d, "test")), 4927),
    "MR": (lambda d: len(read_binary_task(d, "MR")), 10662),
    "TREC": (lambda d: [len(read_trec(d, s)) for s in ("train", "test")], [5452, 500]),
    "MRPC": (lambda d: [len(read_mrpc(d, s)) for s in ("train", "test")], [4076, 1725]),
}


@pytest.mark.parametrize("task_dir", sorted(REAL_COUNTS))
def test_real_senteval_counts(senteval_dir, task_dir):
    if not (senteval_dir / task_dir).is_dir():  # a partial copy of the data (e.g. on a lent GPU machine)
        pytest.skip(f"{senteval_dir / task_dir} is absent from this machine's SentEval data")
    read, expected = REAL_COUNTS[task_dir]
    assert read(senteval_dir) == expected


# ------------------------------------------------------------------ gold scores: finite, on the task's scale
def _stsb_dir(tmp_path, rows):
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\ta man {i}\ta woman {i}" for i, score in enumerate(rows)]
    for split in ("train", "dev", "test"):
        _write(folder / f"sts-{split}.csv", "\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize("bad", ["nan", "NaN", "inf", "-inf"])
def test_non_finite_gold_scores_are_refused_with_file_and_line(tmp_path, bad):
    root = _stsb_dir(tmp_path, ["3.0", "2.5", bad])
    with pytest.raises(SparseCSEError, match=rf"sts-test\.csv:3: the gold score '{bad}' is not a finite number"):
        read_sts_benchmark(root, "test")
    inputs = _write(tmp_path / "in.txt", "a\tb\nc\td\n")
    gold = _write(tmp_path / "gs.txt", f"4\n{bad}\n")
    with pytest.raises(SparseCSEError, match=rf"gs\.txt:2: the gold score '{bad}' is not a finite number"):
        read_sts_subset(inputs, gold)
    sick = tmp_path / "SICK"
    sick.mkdir()
    _write(sick / "SICK_test_annotated.txt", f"pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta\tb\t{bad}\n")
    with pytest.raises(SparseCSEError, match=r"SICK_test_annotated\.txt:2: .* not a finite number"):
        read_sick(tmp_path, "test")


def test_non_finite_gold_score_fails_eval_instead_of_printing_nan(tmp_path, tiny_bert_dir):
    from sparsecse.evaluation import evaluate

    root = _stsb_dir(tmp_path, ["3.0", "nan", "1.0"])
    with pytest.raises(SparseCSEError, match="not a finite number"):
        evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="STSBenchmark", data_dir=root, device="cpu"))


def test_gold_scores_outside_the_scale_are_read_with_one_warning(tmp_path, capsys):
    root = _stsb_dir(tmp_path, ["3.0", "5.0", "0.0", "7.5", "-1"])
    pairs = read_sts_benchmark(root, "test")
    assert [p.score for p in pairs] == [3.0, 5.0, 0.0, 7.5, -1.0]
    err = capsys.readouterr().err
    assert err.count("Warning") == 1 and "sts-test.csv: 2 gold scores outside the task's scale 0-5" in err
    assert "first at line 4: 7.5" in err
    inputs = _write(tmp_path / "in.txt", "a\tb\nc\td\ne\tf\n")
    read_sts_subset(inputs, _write(tmp_path / "gs.txt", "4\n\n5\n"))
    assert capsys.readouterr().err == ""  # 0-5 and unscored lines: nothing to say
    read_sts_subset(inputs, _write(tmp_path / "gs2.txt", "4\n\n6\n"))
    assert "gs2.txt: 1 gold score outside the task's scale 0-5 (first at line 3: 6)" in capsys.readouterr().err
    sick = tmp_path / "SICK"
    sick.mkdir()
    _write(sick / "SICK_test_annotated.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n"
                                            "1\ta\tb\t4.5\n\n2\tc\td\t0.5\n")
    read_sick(tmp_path, "test")
    assert "SICK_test_annotated.txt: 1 gold score outside the task's scale 1-5 (first at line 4: 0.5)" \
        in capsys.readouterr().err
