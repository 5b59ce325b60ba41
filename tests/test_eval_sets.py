"""The user's own dev and test sets: pairs files read and refused, scored by hand and against independent paths,
and used by eval, compare, score, train and recipes."""

import csv
import hashlib
import json
import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from sparsecse.data.eval_data import load_eval_data
from sparsecse.data.pairs_files import read_pairs_file
from sparsecse.data.sts import read_sick
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.bootstrap import TaskPairs, interval, replicate_scores
from sparsecse.evaluation.eval_sets import load_eval_set, paired_difference, reciprocal_ranks
from tests.helpers import cli
from sparsecse.evaluation.config import EvaluationConfig


class FixedEncoder:
    """Returns the vector given for each sentence (an unknown sentence is a test bug)."""

    def __init__(self, vectors):
        self.vectors = {k: np.asarray(v, dtype=np.float64) for k, v in vectors.items()}
        self.calls = 0

    def encode(self, sentences, batch_size=None):
        self.calls += 1
        return np.stack([self.vectors[s] for s in sentences])


class HashEncoder:
    """A deterministic 16-dimensional vector per sentence, from its sha256 (no model)."""

    def encode(self, sentences, batch_size=None):
        return np.stack([np.random.default_rng(int(hashlib.sha256(s.encode()).hexdigest()[:12], 16)).normal(size=16)
                         for s in sentences])


def angle(degrees):
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def write_tsv(path, header, rows):
    path.write_text("\n".join("\t".join(map(str, r)) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------- positive pairs
POSITIVES_TSV = [("first question", "first answer", "near miss"),
                 ("second question", "second answer", ""),
                 ("first answer", "third answer", ""),  # this query's own text is a candidate: left out
                 ("", "", "far away")]
VECTORS = {"first question": angle(0), "first answer": angle(10), "near miss": angle(5), "second question": angle(90),
           "second answer": angle(95), "third answer": angle(40), "far away": angle(120)}


def test_positive_pairs_scored_by_hand(tmp_path):
    path = write_tsv(tmp_path / "pos.tsv", ("query", "positive", "candidate"), POSITIVES_TSV)
    dev = load_eval_set(path)
    assert (dev.kind, dev.metric, dev.data.size) == ("positives", "mrr@10", 3)
    assert dev.positive_pairs == [("first question", "first answer"), ("second question", "second answer"),
                                  ("first answer", "third answer")]
    # candidates: the 3 positives and the 2 extra sentences
    assert dev.data.candidates == ["first answer", "second answer", "third answer", "near miss", "far away"]
    # By hand, angles in degrees: query 0 ranks near miss (5) above its positive (10): rank 2. Query 90: its
    # positive at 95 is nearest: rank 1. Query "first answer" (10): its own text (0 apart) is left out, near
    # miss (5 apart) beats its positive at 40 (30 apart): rank 2 (it would be 3 with its own text in).
    result = dev.evaluate(FixedEncoder(VECTORS), replicates=200, seed=0)
    assert result["items"]["rank"] == [2, 1, 2]
    assert result["recall@1"] == pytest.approx(100 / 3)
    assert result["mrr@10"] == pytest.approx(100 * (1 / 2 + 1 + 1 / 2) / 3)
    assert result["score"] == result["mrr@10"] == dev.score(FixedEncoder(VECTORS))
    assert (result["n"], result["candidates"], result["metric"]) == (3, 5, "mrr@10")
    # three queries: every resample's MRR is a mean of three of 1/2, 1, 1/2
    lo, hi = result["mrr@10_ci"]
    assert result["ci"] == result["mrr@10_ci"] and 50 <= lo <= result["score"] <= hi <= 100
    assert 0 <= result["recall@1_ci"][0] <= result["recall@1_ci"][1] <= 100


def test_mrr_cuts_off_after_rank_ten():
    assert reciprocal_ranks(np.array([1, 2, 10, 11, 40])).tolist() == [1.0, 0.5, 0.1, 0.0, 0.0]


def test_positive_pairs_in_jsonl_and_csv_read_the_same(tmp_path):
    rows = [{"query": q, "positive": p, "candidate": c} for q, p, c in POSITIVES_TSV]
    jsonl = tmp_path / "pos.jsonl"
    jsonl.write_text("\n".join(json.dumps({k: v for k, v in r.items() if v}) for r in rows) + "\n")
    with open(tmp_path / "pos.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["query", "positive", "candidate"])
        writer.writeheader()
        writer.writerows(rows)
    tsv = read_pairs_file(write_tsv(tmp_path / "pos.tsv", ("query", "positive", "candidate"), POSITIVES_TSV))
    for other in (read_pairs_file(jsonl), read_pairs_file(tmp_path / "pos.csv")):
        assert (other.kind, other.positives, other.candidates, other.rows) == \
               (tsv.kind, tsv.positives, tsv.candidates, tsv.rows) == ("positives", tsv.positives, tsv.candidates, 4)


# ----------------------------------------------------------------------------------------- scored pairs
def scored_rows(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return [(f"left sentence {i}", f"right sentence {i}", round(float(rng.uniform(0, 10)), 3)) for i in range(n)]


def test_scored_file_is_spearman_of_cosines(tmp_path):
    rows = scored_rows()
    path = write_tsv(tmp_path / "dev.tsv", ("sentence1", "sentence2", "score"),
                     [*rows, ("an unscored left", "an unscored right", "")])
    encoder = HashEncoder()
    dev = load_eval_set(path)
    result = dev.evaluate(encoder, replicates=300, seed=4)
    # float32 embeddings (what encoders return; the set stores them so), the cosine in float64
    a, b = (encoder.encode([r[k] for r in rows]).astype(np.float32).astype(np.float64) for k in (0, 1))
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    gold = [r[2] for r in rows]
    assert result["score"] == pytest.approx(100 * spearmanr(cosines, gold)[0], abs=1e-9)
    assert result["pearson"] == pytest.approx(100 * pearsonr(cosines, gold)[0], abs=1e-9)
    assert (result["n"], result["skipped"], result["metric"]) == (40, 1, "spearman")
    # the interval is the STS tasks' bootstrap (pairs resampled, one generator per set name)
    reps = replicate_scores([cosines], TaskPairs.of(gold), 300, 4, "dev.tsv")[0]
    assert result["ci"] == pytest.approx(interval(reps))
    # positives for scoring: above 0.8 of the file's own score range
    low, high = min(gold), max(gold)
    assert dev.positive_pairs == [(r[0], r[1]) for r in rows if r[2] > low + 0.8 * (high - low)]
    assert len(dev.sentences) == 80
    manifest = dev.describe()
    assert manifest["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (manifest["size"], manifest["rows"], manifest["skipped"], manifest["kind"]) == \
           (path.stat().st_size, 41, 1, "scored")


def test_a_sick_file_scores_as_the_sick_task(senteval_dir, tmp_path):
    pairs = read_sick(senteval_dir, "test")
    with open(tmp_path / "sick_test.tsv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
        writer.writerow(("sentence1", "sentence2", "score"))
        writer.writerows((p.s1, p.s2, repr(p.score)) for p in pairs)
    task, file = load_eval_set("SICKRelatedness", "test", senteval_dir), load_eval_set(tmp_path / "sick_test.tsv")
    assert task.data.size == file.data.size == 4927
    encoder = HashEncoder()
    assert file.score(encoder) == pytest.approx(task.score(encoder), abs=1e-9)
    # SICK's own scale (1-5) and the file's observed range (1-5) give the same positives
    assert task.positive_pairs == file.positive_pairs and len(task.positive_pairs) > 100


def test_a_file_scores_as_sparsecse_eval_does(fake_senteval, tiny_bert_dir, tmp_path):
    """An independent path: evaluate()'s SICKRelatedness score of a model and the same pairs as a --test file."""
    from sparsecse.evaluation import evaluate
    from sparsecse.modeling.encoder import SentenceEncoder

    pairs = read_sick(fake_senteval, "test")
    path = write_tsv(tmp_path / "sick.tsv", ("sentence1", "sentence2", "score"),
                     [(p.s1, p.s2, repr(p.score)) for p in pairs])
    result = evaluate(str(tiny_bert_dir), config=EvaluationConfig(tasks="SICKRelatedness", data_dir=fake_senteval,
        device="cpu", test=str(path), align_uniform=False))
    assert result["eval_sets"]["test"]["score"] == pytest.approx(result["scores"]["SICKRelatedness"], abs=1e-9)
    assert "items" not in result["eval_sets"]["test"]  # kept only with keep_pairs
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    assert load_eval_set(path).score(encoder) == pytest.approx(result["scores"]["SICKRelatedness"], abs=1e-9)


def test_task_names_and_unknown_specs(tiny_stsb_dir):
    assert load_eval_set("stsbenchmark", "dev", tiny_stsb_dir).name == "STSBenchmark"
    assert load_eval_data("STSBenchmark", "dev", tiny_stsb_dir).positive_threshold == 4.0
    with pytest.raises(SparseCSEError, match=r"^The test set 'STS-C' is neither a pairs file .* nor a task "
                                             r"sparsecse knows \(STS12, STS13, .*SICKRelatedness\)\.$"):
        load_eval_set("STS-C", "test", tiny_stsb_dir, role="test")
    with pytest.raises(SparseCSEError, match=r"^The pairs file .*missing\.tsv does not exist\.$"):
        load_eval_set(tiny_stsb_dir / "missing.tsv")


# ----------------------------------------------------------------------------------------- refused files
BAD_FILES = {
    "missing_column.tsv": (b"sentence1\tscore\na\t1\nb\t2\n", r"lacks the column sentence2"),
    "words.tsv": (b"sentence1\tsentence2\tscore\na\tb\t1\nc\td\thigh\n", r":3: the score 'high' is not a number"),
    "nan.csv": (b"sentence1,sentence2,score\na,b,1\nc,d,nan\n", r":3: the score 'nan' is not a finite number"),
    "inf.jsonl": (b'{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "c", "sentence2": "d", '
                  b'"score": "inf"}\n', r":2: the score 'inf' is not a finite number"),
    "header_only.tsv": (b"sentence1\tsentence2\tscore\n", r"holds a header but no rows"),
    "empty.jsonl": (b"\n\n", r"holds no rows"),
    "nul.tsv": (b"sentence1\tsentence2\tscore\na\tb\t1\nc\x00\td\t2\n", r":3: the pairs file holds a NUL byte"),
    "latin1.tsv": (b"sentence1\tsentence2\tscore\na\tb\t1\ncaf\xe9\td\t2\n", r":3: the pairs file is not valid UTF-8"),
    "empty_sentence.csv": (b"sentence1,sentence2,score\na,b,1\n  ,d,2\n", r":3: the sentence1 is empty"),
    "short_row.tsv": (b"sentence1\tsentence2\tscore\na\tb\t1\nc\td\n", r":3: the row has 2 fields but the header has 3"),
    "one_pair.tsv": (b"sentence1\tsentence2\tscore\na\tb\t1\nc\td\t\n", r"holds 1 scored pair \(1 with an empty score "
                                                                        r"skipped\)"),
    "flat.tsv": (b"sentence1\tsentence2\tscore\na\tb\t2\nc\td\t2\n", r"every score is 2"),
    "no_query.jsonl": (b'{"query": "q", "positive": "p"}\n{"positive": "p2"}\n', r":2: the query is empty"),
    "self.tsv": (b"query\tpositive\nq\tq\n", r":2: the positive is the query itself"),
    "other.json": (b"[]", r"must end in \.tsv, \.csv, \.jsonl"),
    "no_kind.csv": (b"text,label\na,1\n", r"needs the columns sentence1, sentence2, score .* or query, positive"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_refused_in_one_sentence(name, tmp_path):
    content, message = BAD_FILES[name]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SparseCSEError, match=message) as caught:
        load_eval_set(path)
    text = str(caught.value)
    assert str(path) in text and "\n" not in text and text.endswith(".")


@pytest.mark.parametrize("name", ["words.tsv", "nul.tsv", "latin1.tsv", "empty_sentence.csv", "header_only.tsv",
                                  "missing_column.tsv", "nan.csv"])
def test_eval_refuses_bad_test_files_before_writing(name, tiny_bert_dir, tiny_stsb_dir, tmp_path):
    content, message = BAD_FILES[name]
    bad = tmp_path / name
    bad.write_bytes(content)
    out = tmp_path / "results.json"
    run = cli("eval", "--model", tiny_bert_dir, "--tasks", "STSBenchmark", "--data-dir", tiny_stsb_dir,
              "--device", "cpu", "--test", bad, "--out", out, "--quiet")
    assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1, run.output
    assert str(bad) in run.output and "Traceback" not in run.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [name]


# ----------------------------------------------------------------------------------------- eval and compare
def test_eval_writes_the_sets_and_compare_pairs_them(tiny_bert_dir, tiny_roberta_dir, tiny_stsb_dir, tmp_path):
    dev = write_tsv(tmp_path / "dev.tsv", ("query", "positive", "candidate"), POSITIVES_TSV[:2] + [
        ("a man is playing", "a man plays", "the cat sleeps")])
    test = write_tsv(tmp_path / "test.tsv", ("sentence1", "sentence2", "score"), scored_rows(30))
    outs = []
    for i, model in enumerate((tiny_bert_dir, tiny_roberta_dir)):
        out = tmp_path / f"r{i}.json"
        run = cli("eval", "--model", model, "--tasks", "STSBenchmark", "--data-dir", tiny_stsb_dir, "--device", "cpu",
                  "--dev", dev, "--test", test, "--out", out, "--quiet")
        assert run.exit_code == 0, run.output
        assert "test test.tsv: spearman" in run.output and "dev dev.tsv: mrr@10" in run.output
        outs.append(json.loads(out.read_text()))
    saved = outs[0]["eval_sets"]
    assert saved["test"]["n"] == 30 and len(saved["test"]["items"]["similarity"]) == 30
    assert len(saved["dev"]["items"]["rank"]) == 3 and saved["dev"]["set"]["kind"] == "positives"
    assert outs[0]["manifest"]["inputs"]["test_set"]["sha256"] == hashlib.sha256(test.read_bytes()).hexdigest()
    assert outs[0]["manifest"]["params"]["eval_sets"]["test"]["rows"] == 30
    run = cli("compare", tmp_path / "r0.json", tmp_path / "r1.json", "--bootstrap", 200, "--json")
    assert run.exit_code == 0, run.output
    compared = json.loads(run.output)["eval_sets"]
    direct = paired_difference(outs[0]["eval_sets"]["test"], outs[1]["eval_sets"]["test"], 200, 0)
    assert compared["test"] == direct
    assert compared["test"]["diff"] == pytest.approx(outs[1]["eval_sets"]["test"]["score"] - saved["test"]["score"])
    assert compared["dev"]["metric"] == "mrr@10" and "recall@1" in compared["dev"]
    # a model as B: it is scored on the sets the result file A names, and pairs the same way
    run = cli("compare", tmp_path / "r0.json", tiny_roberta_dir, "--data-dir", tiny_stsb_dir, "--device", "cpu",
              "--bootstrap", 200, "--json", "--quiet")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["eval_sets"] == compared


# ----------------------------------------------------------------------------------------- score and train
def test_score_on_a_dev_task_equals_scoring_that_split(tiny_bert_dir, tiny_stsb_dir):
    from sparsecse.scoring.score import ScoringConfig, score
    from sparsecse.scoring.scores import TENSORS

    by_split = score(str(tiny_bert_dir), ScoringConfig(data_dir=tiny_stsb_dir, split="dev", batch_size=4), device="cpu")
    by_dev = score(str(tiny_bert_dir), ScoringConfig(data_dir=tiny_stsb_dir, dev="STSBenchmark", batch_size=4),
                   device="cpu")
    for name in TENSORS:
        assert np.array_equal(getattr(by_split, name).numpy(), getattr(by_dev, name).numpy())
    assert by_dev.batch_sizes.tolist() == by_split.batch_sizes.tolist() and len(by_dev.batch_sizes) >= 2
    assert by_dev.manifest["params"]["dev"]["task"] == "STSBenchmark"


def test_score_cli_with_a_dev_file(tiny_bert_dir, tiny_stsb_dir, tmp_path):
    rows = scored_rows(20)
    dev = write_tsv(tmp_path / "dev.tsv", ("sentence1", "sentence2", "score"), rows)
    low, high = min(r[2] for r in rows), max(r[2] for r in rows)
    positives = sum(r[2] > low + 0.8 * (high - low) for r in rows)
    out = tmp_path / "scores.safetensors"
    run = cli("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--device", "cpu", "--dev", dev,
              "--batch-size", 2, "--out", out, "--json")
    assert run.exit_code == 0, run.output
    manifest = json.loads(out.with_suffix(".json").read_text())
    assert manifest["num_positive_pairs"] == positives >= 2
    assert manifest["params"]["dev"]["sha256"] == hashlib.sha256(dev.read_bytes()).hexdigest()
    assert manifest["params"]["uniformity_sentences"] == 40
    assert manifest["inputs"]["dev"]["path"] == str(dev.resolve())


def test_train_chooses_its_checkpoint_on_a_dev_file(tiny_bert_dir, corpus, tiny_stsb_dir, tmp_path):
    from sparsecse.modeling.encoder import SentenceEncoder
    from tests.tiny import SENTENCES

    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"query": SENTENCES[i], "positive": SENTENCES[i + 1]}) for i in range(6))
                   + "\n" + json.dumps({"candidate": SENTENCES[8]}) + "\n")
    out = tmp_path / "out"
    run = cli("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", out, "--data-dir", tiny_stsb_dir,
              "--dev", dev, "--batch-size", 8, "--max-steps", 6, "--eval-steps", 2, "--lr", "1e-3", "--device", "cpu",
              "--json", "--quiet")
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    history = manifest["history"]
    assert [h["step"] for h in history] == [2, 4, 6]
    assert result["dev_score"] == max(h["score"] for h in history) and result["stsb_dev"] is None
    assert manifest["selected"] == f"best dev set dev.jsonl (mrr@10) at step {result['best_step']}"
    assert manifest["params"]["dev_set"]["sha256"] == hashlib.sha256(dev.read_bytes()).hexdigest()
    reloaded = SentenceEncoder.load(out, device="cpu")
    assert load_eval_set(dev).score(reloaded) == pytest.approx(result["dev_score"], abs=1e-6)


def test_train_refuses_a_bad_dev_file_before_writing(tiny_bert_dir, corpus, tmp_path):
    bad = tmp_path / "dev.tsv"
    bad.write_bytes(BAD_FILES["words.tsv"][0])
    out = tmp_path / "out"
    run = cli("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", out, "--dev", bad, "--max-steps", 2,
              "--batch-size", 8, "--device", "cpu", "--quiet")
    assert run.exit_code == 1 and len(run.output.strip().splitlines()) == 1, run.output
    assert "dev.tsv:3: the score 'high' is not a number" in run.output
    assert not out.exists() and not (tmp_path / "out.partial").exists()


# ----------------------------------------------------------------------------------------- recipes
def test_recipe_data_block(tmp_path, monkeypatch):
    from sparsecse.recipes.runner import with_data
    from sparsecse.recipes.spec import Data
    from sparsecse.recipes.spec import load_recipe

    (tmp_path / "sets").mkdir()
    recipe_file = tmp_path / "sets" / "mine.yaml"
    recipe_file.write_text("name: mine\ndata: {dev: dev.tsv, test: SICKRelatedness}\n"
                           "stages:\n  - {name: prune, type: prune, keep_flops: 0.5}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: mine\nstages:\n  - {name: prune, type: prune, keep_flops: 0.5}\n")
    recipe = load_recipe(recipe_file)
    assert recipe.data.dev == str(tmp_path / "sets" / "dev.tsv") and recipe.data.test == "SICKRelatedness"
    # the dev set changes the model (checkpoints, scoring pairs), the test set only the figures
    assert recipe.digest() != load_recipe(plain).digest()
    assert recipe.digest() == load_recipe(recipe_file, {"data.test": "STS12"}).digest()
    assert load_recipe(plain).digest() == load_recipe(plain, {"data.test": "STS12"}).digest()
    monkeypatch.chdir(tmp_path)
    replaced = with_data(recipe, Data(dev="other.csv"))
    assert replaced.data.dev == str(tmp_path / "other.csv") and replaced.data.test == "SICKRelatedness"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndata: {dev: notes.txt}\nstages:\n  - {name: prune, type: prune, keep_flops: 0.5}\n")
    with pytest.raises(SparseCSEError, match=r"^The data block of the recipe .*bad.yaml: dev must be a pairs file "
                                             r"\(.tsv, .csv or .jsonl\) or a task name .*not '.*notes.txt'\.$"):
        load_recipe(bad)
    bad.write_text("name: bad\ndata: {valid: x.tsv}\nstages:\n  - {name: prune, type: prune, keep_flops: 0.5}\n")
    with pytest.raises(SparseCSEError, match=r"has no setting 'valid'; its settings are dev, test\.$"):
        load_recipe(bad)


def test_the_guides_examples_read_as_it_says(tmp_path):
    """docs/guides/your-data.md: its scored TSV (one row unscored) and its positive-pairs CSV (a candidate-only
    row) are read as the guide describes them."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "your-data.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in guide.split("```text\n")[1:]]
    (tmp_path / "dev.tsv").write_text(blocks[0], encoding="utf-8")
    (tmp_path / "dev.csv").write_text(blocks[1], encoding="utf-8")
    scored, positives = read_pairs_file(tmp_path / "dev.tsv"), read_pairs_file(tmp_path / "dev.csv")
    assert (scored.kind, len(scored.scored), scored.skipped, scored.scored[0].score) == ("scored", 2, 1, 4.8)
    assert positives.kind == "positives" and [q for q, _ in positives.positives] == [
        "how do I reset my password", "where is my invoice"]
    assert positives.positives[0][1] == "Open Settings, then Security, then Reset password."
    assert positives.candidates == ("Our office opens at nine.", "Shipping takes three to five days.")


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate keeps one mixed precision per process: the recipe's stages (bf16 where the CPU runs it) must not
    meet the full precision an earlier train() set, nor leave theirs to later tests."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


def test_a_recipe_scores_chooses_and_reports_on_its_data_block(tmp_path, fake_senteval, corpus,
                                                               fresh_accelerate_state):
    """A tiny recipe with ``data: {dev, test}``: the prune stage scores on the dev set's positive pairs, the distil
    stage keeps the checkpoint with the best dev MRR@10, and the final figures hold both sets."""
    import yaml

    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.recipes.runner import run_recipe
    from tests.tiny import SENTENCES, make_tiny_model_dir

    student = make_tiny_model_dir(tmp_path / "student", "bert", seed=1, init_range=0.2)
    (tmp_path / "sets").mkdir()
    dev = tmp_path / "sets" / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"query": SENTENCES[i], "positive": SENTENCES[i + 1]}) for i in range(8)))
    test = write_tsv(tmp_path / "sets" / "test.tsv", ("sentence1", "sentence2", "score"),
                     [(SENTENCES[i], SENTENCES[(3 * i + 1) % len(SENTENCES)], i % 5) for i in range(12)])
    recipe = tmp_path / "sets" / "mine.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "mine", "seed": 3, "data": {"dev": "dev.jsonl", "test": "test.tsv"},
        "evaluation": {"bootstrap": 50, "speed": False, "tasks": ["sts"]},
        "stages": [{"name": "prune", "type": "prune", "keep_flops": 0.6, "steps": 1, "reconstruct_sentences": 32},
                   {"name": "student", "type": "distill", "teacher": "@input", "lr": 1e-3, "batch_size": 8,
                    "max_steps": 4, "eval_steps": 2}]}))
    seen = []
    import sparsecse.scoring.score as scoring

    original = scoring.load_eval_data
    scoring.load_eval_data = lambda *a, **k: seen.append(a[0]) or original(*a, **k)
    try:
        result = run_recipe(str(recipe), str(student), corpus, tmp_path / "run", data_dir=fake_senteval,
                            show_progress=False)
    finally:
        scoring.load_eval_data = original
    assert seen and set(seen) == {str(dev)}  # the prune stage's scoring read the dev file
    figures = result.evaluation
    assert figures["dev_set"]["metric"] == "mrr@10" and figures["dev_set"]["n"] == 8
    assert figures["dev_set"]["score"] == pytest.approx(result.stages[-1]["dev_score"], abs=1e-6)
    model = SentenceEncoder.load(result.model, device="cpu")
    assert figures["test_set"]["score"] == pytest.approx(load_eval_set(test).score(model), abs=1e-9)
    assert figures["test_set"]["set"]["sha256"] == hashlib.sha256(test.read_bytes()).hexdigest()
    manifest = json.loads((result.model / "manifest.json").read_text())
    assert manifest["params"]["data"] == {"dev": str(dev), "test": str(test)}


def test_rewind_chooses_its_checkpoint_on_a_dev_file(tiny_bert_dir, corpus, tmp_path):
    from sparsecse.modeling.encoder import SentenceEncoder
    from tests.helpers import make_mask

    mask_path, _ = make_mask(tmp_path, tiny_bert_dir)
    rows = scored_rows(16)
    dev = write_tsv(tmp_path / "dev.tsv", ("sentence1", "sentence2", "score"), rows)
    out = tmp_path / "rewound"
    run = cli("rewind", "--mask", mask_path, "--init", tiny_bert_dir, "--corpus", corpus, "--out", out, "--dev", dev,
              "--batch-size", 8, "--max-steps", 4, "--eval-steps", 2, "--lr", "1e-3", "--device", "cpu", "--json",
              "--quiet")
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [h["step"] for h in manifest["history"]] == [2, 4]
    assert result["dev_score"] == max(h["score"] for h in manifest["history"])
    assert manifest["selected"] == f"best dev set dev.tsv (spearman) at step {result['best_step']}"
    assert load_eval_set(dev).score(SentenceEncoder.load(out, device="cpu")) == pytest.approx(result["dev_score"],
                                                                                             abs=1e-6)
