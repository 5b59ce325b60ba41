"""`sparsecse eval --mteb` on tiny local mteb tasks: the figures equal an independent numpy/scipy/sklearn
computation on the same embeddings; prompts, masks and exported models; bad input refused, nothing written."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.cluster import MiniBatchKMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import v_measure_score

pytest.importorskip("mteb", reason="the mteb extra is not installed (pip install 'sparsecse[mteb]')")

from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.evaluation.mteb_items import paired_difference, read_parts  # noqa: E402
from sparsecse.evaluation.mteb_local import local_task  # noqa: E402
from sparsecse.evaluation.mteb_run import evaluate_mteb, split_names  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.pruning.masks import Mask  # noqa: E402
from tests.helpers import cli, random_sentences, shrunk_dir  # noqa: E402
from tests.tiny import make_tiny_model_dir  # noqa: E402
from sparsecse.evaluation.mteb_run import MtebConfig

SEED = 42  # mteb's default task seed: its classification shuffle and clustering draws use it
DOCS = random_sentences(30, seed=3)
QUERIES = random_sentences(12, seed=4)


def write_task(directory: Path, spec: dict, **files) -> Path:
    """A local mteb task directory: task.json and one JSON Lines file per keyword."""
    directory.mkdir(parents=True)
    (directory / "task.json").write_text(json.dumps(spec))
    for name, rows in files.items():
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def retrieval_files(top_ranked: bool = False) -> dict:
    rng = random.Random(0)
    qrels = []
    for q in range(len(QUERIES)):
        for d in rng.sample(range(len(DOCS)), 3):  # graded: relevance 1 or 2, one unjudged-as-0 entry
            qrels.append({"query-id": f"q{q}", "corpus-id": f"d{d}", "score": rng.choice([0, 1, 2])})
        qrels.append({"query-id": f"q{q}", "corpus-id": f"d{(q * 7) % len(DOCS)}", "score": 1})
    files = {"corpus": [{"id": f"d{i}", "text": t} for i, t in enumerate(DOCS)],
             "queries": [{"id": f"q{i}", "text": t} for i, t in enumerate(QUERIES)], "qrels": qrels}
    if top_ranked:  # every judged document among the candidates, plus a few others
        judged = {}
        for r in qrels:
            judged.setdefault(r["query-id"], []).append(r["corpus-id"])
        files["top_ranked"] = [{"query-id": q, "corpus-ids": sorted(set(ids) | {f"d{(int(q[1:]) + j) % 30}"
                                                                              for j in range(5)})}
                               for q, ids in judged.items()]
    return files


def relevance(files: dict) -> dict[str, dict[str, int]]:
    rel: dict[str, dict[str, int]] = {}
    for r in files["qrels"]:
        rel.setdefault(r["query-id"], {})[r["corpus-id"]] = r["score"]
    return {q: d for q, d in rel.items() if any(v > 0 for v in d.values())}  # mteb drops queries with no positive


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a.astype(np.float64) @ b.astype(np.float64).T


def ranking_metrics(sims: np.ndarray, files: dict, k: int = 10) -> dict[str, dict[str, float]]:
    """Per query: nDCG@k (gain = relevance, discount log2(rank + 1)), recall@3, AP over the candidates."""
    rel = relevance(files)
    candidates = {r["query-id"]: r["corpus-ids"] for r in files.get("top_ranked", [])}
    out = {}
    for q, judged in rel.items():
        row = sims[int(q[1:])]
        docs = candidates.get(q) or [f"d{i}" for i in range(len(DOCS))]
        order = sorted(docs, key=lambda d: -row[int(d[1:])])
        gains = np.array([judged.get(d, 0) for d in order], dtype=np.float64)
        discount = 1 / np.log2(np.arange(2, len(order) + 2))
        ideal = np.sort(np.array(list(judged.values()), dtype=np.float64))[::-1][:k]
        relevant = gains > 0
        n_relevant = sum(v > 0 for v in judged.values())
        precision_at = np.cumsum(relevant) / np.arange(1, len(order) + 1)
        out[q] = {"ndcg_at_10": float((gains[:k] * discount[:k]).sum() / (ideal * discount[:len(ideal)]).sum()),
                  "recall_at_3": float(relevant[:3].sum() / n_relevant),
                  "map_at_1000": float((precision_at * relevant).sum() / n_relevant)}
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("mteb_model") / "model", init_range=0.2)


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SentenceEncoder.load(str(model_dir))


def run_eval(tmp_path, model_dir, tasks, *extra, name="e.json"):
    out = tmp_path / name
    result = cli("eval", "--model", model_dir, "--mteb", tasks, "--out", out, "--quiet", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result


def test_retrieval_figures_equal_numpy_ndcg_and_recall(tmp_path, model_dir, encoder):
    files = retrieval_files()
    ndcg_task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **files)
    recall_task = write_task(tmp_path / "rec", {"name": "TinyRecall", "type": "Retrieval",
                                                "main_score": "recall_at_3"}, **files)
    results, run = run_eval(tmp_path, model_dir, f"{ndcg_task},{recall_task}")
    expected = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    queries = sorted(expected)
    for task, metric in (("TinyRetrieval", "ndcg_at_10"), ("TinyRecall", "recall_at_3")):
        entry = results["mteb"]["tasks"][task]
        per_query = np.array([100 * expected[q][metric] for q in queries])
        assert entry["main_score"] == metric and entry["parts"][0]["ids"] == queries
        np.testing.assert_allclose(entry["parts"][0]["values"], per_query, atol=1e-6)
        assert entry["score"] == pytest.approx(per_query.mean(), abs=1e-6)
        # mteb's own result file, in its layout, holds the same figure (mteb rounds to 5 decimals)
        (path,) = (tmp_path / "e_mteb" / "results").glob(f"local__model/*/{task}.json")
        assert json.loads(path.read_text())["scores"]["test"][0]["main_score"] == pytest.approx(
            per_query.mean() / 100, abs=1e-5)
    assert 0 < results["mteb"]["tasks"]["TinyRetrieval"]["score"] < 100  # neither trivial nor degenerate
    assert "TinyRetrieval" in run.output and "ndcg_at_10" in run.output
    assert results["manifest"]["params"]["mteb"]["tasks"] == ["TinyRetrieval", "TinyRecall"]


def test_reranking_ranks_only_the_candidates(tmp_path, model_dir, encoder):
    files = retrieval_files(top_ranked=True)
    task = write_task(tmp_path / "rr", {"name": "TinyReranking", "type": "Reranking"}, **files)
    results, _ = run_eval(tmp_path, model_dir, str(task))
    expected = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    entry = results["mteb"]["tasks"]["TinyReranking"]
    assert entry["main_score"] == "map_at_1000"
    assert entry["score"] == pytest.approx(100 * np.mean([expected[q]["map_at_1000"] for q in sorted(expected)]),
                                           abs=1e-6)


def test_classification_accuracy_equals_sklearn(tmp_path, model_dir, encoder):
    rng = random.Random(1)
    train = [{"text": s, "label": rng.choice("abc")} for s in random_sentences(40, seed=5)]
    test = [{"text": s, "label": rng.choice("abc")} for s in random_sentences(25, seed=6)]
    task = write_task(tmp_path / "cls", {"name": "TinyClassification", "type": "Classification",
                                         "settings": {"n_experiments": 1, "samples_per_label": 1000}},
                      train=train, test=test)
    results, _ = run_eval(tmp_path, model_dir, str(task))
    labels = {label: i for i, label in enumerate("abc")}
    x_train, x_test = encoder.encode([r["text"] for r in train]), encoder.encode([r["text"] for r in test])
    y_train = np.array([labels[r["label"]] for r in train])
    y_test = np.array([labels[r["label"]] for r in test])
    order = list(range(len(train)))  # mteb's protocol: the training items in its seeded shuffle's order
    np.random.RandomState(SEED).shuffle(order)
    predicted = LogisticRegression(max_iter=100).fit(x_train[order], y_train[order]).predict(x_test)
    entry = results["mteb"]["tasks"]["TinyClassification"]
    np.testing.assert_allclose(entry["parts"][0]["values"], 100 * (predicted == y_test), atol=1e-6)
    assert entry["score"] == pytest.approx(100 * np.mean(predicted == y_test), abs=1e-6)


def test_sts_spearman_and_clustering_v_measure_equal_scipy_and_sklearn(tmp_path, model_dir, encoder):
    rng = random.Random(2)
    pairs = [{"sentence1": a, "sentence2": b, "score": round(rng.uniform(0, 5), 2)}
             for a, b in zip(random_sentences(30, seed=7), random_sentences(30, seed=8))]
    sts = write_task(tmp_path / "sts", {"name": "TinySTS", "type": "STS"}, test=pairs)
    texts = random_sentences(36, seed=9)
    rows = [{"text": t, "label": str(i % 3)} for i, t in enumerate(texts)]
    clustering = write_task(tmp_path / "clu", {"name": "TinyClustering", "type": "Clustering",
                                               "settings": {"n_clusters": 3, "max_documents_per_cluster": 36}},
                            test=rows)
    results, _ = run_eval(tmp_path, model_dir, f"{sts},{clustering}", "--bootstrap", "200")
    a, b = encoder.encode([p["sentence1"] for p in pairs]), encoder.encode([p["sentence2"] for p in pairs])
    similarity = np.diag(cosine(a, b))
    entry = results["mteb"]["tasks"]["TinySTS"]
    assert entry["score"] == pytest.approx(100 * spearmanr(similarity, [p["score"] for p in pairs])[0], abs=1e-6)
    np.testing.assert_allclose(entry["parts"][0]["similarity"], similarity, atol=1e-6)
    assert entry["ci"][0] < entry["score"] < entry["ci"][1]
    # mteb's clustering protocol: k-means (seeded) on draws with replacement from its seeded generator
    embeddings, labels = encoder.encode(texts), np.array([r["label"] for r in rows])
    draws, scores = random.Random(SEED), []
    for _ in range(3):
        idx = draws.choices(range(len(texts)), k=36)
        kmeans = MiniBatchKMeans(n_clusters=3, batch_size=512, init="k-means++", n_init=1, random_state=SEED)
        scores.append(v_measure_score(labels[idx], kmeans.fit_predict(embeddings[idx])))
    clustering_entry = results["mteb"]["tasks"]["TinyClustering"]
    assert clustering_entry["score"] == pytest.approx(100 * np.mean(scores), abs=1e-6)
    assert "parts" not in clustering_entry  # V-measure is not a mean over items: no per-item values


def test_query_and_document_prompts_reach_the_model(tmp_path, model_dir, encoder):
    prompted = tmp_path / "prompted"
    prompted.mkdir()
    for f in model_dir.iterdir():
        (prompted / f.name).write_bytes(f.read_bytes())
    (prompted / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "question :"}}))
    files = retrieval_files()
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **files)
    results, _ = run_eval(tmp_path, prompted, str(task), "--mteb-prompt", "document=answer :")
    expected = ranking_metrics(cosine(encoder.encode([f"question :{q}" for q in QUERIES]),
                                      encoder.encode([f"answer :{d}" for d in DOCS])), files)
    plain = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    score = results["mteb"]["tasks"]["TinyRetrieval"]["score"]
    assert score == pytest.approx(100 * np.mean([v["ndcg_at_10"] for v in expected.values()]), abs=1e-6)
    assert abs(score - 100 * np.mean([v["ndcg_at_10"] for v in plain.values()])) > 1e-3
    assert results["mteb"]["prompts"] == {"query": "question :", "document": "answer :"}


def test_a_mask_gates_the_model_for_mteb(tmp_path, model_dir, encoder):
    keep_heads = torch.ones(2, 4, dtype=torch.bool)
    keep_heads[0, :3] = False
    keep_neurons = torch.ones(2, 48, dtype=torch.bool)
    keep_neurons[1, ::2] = False
    mask = Mask(keep_heads, keep_neurons)
    mask_path = mask.save(tmp_path / "m.safetensors")
    files = retrieval_files()
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **files)
    results, _ = run_eval(tmp_path, model_dir, str(task), "--mask", mask_path)
    gates = mask.apply(encoder.model)
    try:
        expected = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    finally:
        gates.detach()
    plain = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    score = results["mteb"]["tasks"]["TinyRetrieval"]["score"]
    assert score == pytest.approx(100 * np.mean([v["ndcg_at_10"] for v in expected.values()]), abs=1e-6)
    assert abs(score - 100 * np.mean([v["ndcg_at_10"] for v in plain.values()])) > 1e-3
    assert results["mask"]["heads_pruned"] == 3 and "+mask-m" in results["mteb"]["model_name"]


def test_a_shrunk_model_scores_what_the_model_gated_by_its_mask_scores(tmp_path, model_dir):
    heads = torch.tensor([[False] * 4, [True, False, True, True]])  # the mask shrunk_dir cuts with
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[1, ::3] = False
    mask_path = Mask(heads, neurons).save(tmp_path / "m.safetensors")
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **retrieval_files())
    shrunk = shrunk_dir(model_dir, tmp_path / "shrunk")
    gated, _ = run_eval(tmp_path, model_dir, str(task), "--mask", mask_path, "--pooling", "mean", name="gated.json")
    small, _ = run_eval(tmp_path, shrunk, str(task), name="shrunk.json")
    dense, _ = run_eval(tmp_path, model_dir, str(task), "--pooling", "mean", name="dense.json")
    values = {name: np.array(r["mteb"]["tasks"]["TinyRetrieval"]["parts"][0]["values"])
              for name, r in (("gated", gated), ("shrunk", small), ("dense", dense))}
    np.testing.assert_allclose(values["shrunk"], values["gated"], atol=1e-6)
    assert np.abs(values["dense"] - values["gated"]).max() > 1e-3  # the cut changed the ranking


def test_compare_pairs_the_mteb_items_of_two_result_files(tmp_path, model_dir):
    other = make_tiny_model_dir(tmp_path / "other", init_range=0.2, seed=1)
    files = retrieval_files()
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **files)
    a, _ = run_eval(tmp_path, model_dir, str(task), name="a.json")
    b, _ = run_eval(tmp_path, other, str(task), name="b.json")
    run = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--bootstrap", "300", "--json")
    assert run.exit_code == 0, run.output
    row = json.loads(run.output)["mteb"]["TinyRetrieval"]
    score_a, score_b = a["mteb"]["tasks"]["TinyRetrieval"]["score"], b["mteb"]["tasks"]["TinyRetrieval"]["score"]
    assert row["a"] == pytest.approx(score_a) and row["b"] == pytest.approx(score_b)
    assert row["diff"] == pytest.approx(score_b - score_a) and row["ci"][0] <= row["diff"] <= row["ci"][1]
    # the paired interval is the percentile interval of per-query differences resampled together
    parts_a = read_parts(a["mteb"]["tasks"]["TinyRetrieval"]["parts"], "a")
    parts_b = read_parts(b["mteb"]["tasks"]["TinyRetrieval"]["parts"], "b")
    direct = paired_difference("TinyRetrieval", parts_a, parts_b, replicates=300, seed=0)
    assert row["ci"] == pytest.approx(direct["ci"]) and row["p"] == pytest.approx(direct["p"])
    # the same model on both sides: a zero difference and a zero-width interval
    same = paired_difference("TinyRetrieval", parts_a, parts_a, replicates=50)
    assert same["diff"] == 0 and same["ci"] == [0.0, 0.0]


def test_the_python_api_takes_task_objects(tmp_path, model_dir):
    task = local_task(write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"},
                                 **retrieval_files()))
    result = evaluate_mteb(str(model_dir), config=MtebConfig(tasks=[task]))
    assert list(result["mteb"]["tasks"]) == ["TinyRetrieval"] and result["mteb"]["results_dir"] is None
    assert split_names("STS12, MTEB(eng, v2),x") == ["STS12", "MTEB(eng, v2)", "x"]


def refused(tmp_path, *args, match: str, env=None):
    out = tmp_path / "out" / "e.json"
    run = cli("eval", *args, "--out", out, "--quiet", env=env)
    assert run.exit_code == 1, run.output
    message = [line for line in run.output.splitlines() if line.startswith("Error: ")]
    assert len(message) == 1 and match in message[0] and "Traceback" not in run.output, run.output
    assert not (tmp_path / "out").exists()  # nothing written, neither the JSON nor the mteb directory
    return message[0]


def test_bad_input_is_refused_in_one_sentence_with_nothing_written(tmp_path, model_dir):
    message = refused(tmp_path, "--model", model_dir, "--mteb", "STSBenchmarkk", match="did you mean")
    assert "'STSBenchmark'" in message
    refused(tmp_path, "--model", model_dir, "--mteb", "STS12", match="cannot be fetched offline",
            env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "empty_cache")})
    bad = write_task(tmp_path / "bad", {"name": "Bad", "type": "Retrieval"}, corpus=[{"id": "d0"}],
                     queries=[{"id": "q0", "text": "x"}], qrels=[{"query-id": "q0", "corpus-id": "d0", "score": 1}])
    refused(tmp_path, "--model", model_dir, "--mteb", bad, match="line 1 lacks text")
    (bad / "corpus.jsonl").write_text('{"id": "d0", "text": "a document"}\n')
    (bad / "queries.jsonl").write_bytes(b'{"id": "q0", "text": "caf\xe9"}\n')  # Latin-1, as the pairs files refuse it
    refused(tmp_path, "--model", model_dir, "--mteb", bad, match=":1: the local mteb task file is not valid UTF-8")
    (bad / "queries.jsonl").write_text('["q0", "x"]\n')
    refused(tmp_path, "--model", model_dir, "--mteb", bad, match=":1: each line must be a JSON object, not list")
    unknown_type = write_task(tmp_path / "odd", {"name": "Odd", "type": "Summarization"})
    refused(tmp_path, "--model", model_dir, "--mteb", unknown_type, match='"type" must be one of')
    good = write_task(tmp_path / "good", {"name": "Good", "type": "Retrieval"}, **retrieval_files())
    refused(tmp_path, "--model", model_dir, "--mteb", good, "--mteb-prompt", "noequals", match="must be NAME=TEXT")
    with pytest.raises(SparseCSEError, match="names no task"):
        evaluate_mteb(str(model_dir), config=MtebConfig(tasks=""))


@pytest.mark.parametrize("engine", ["onnx", "openvino"])
def test_exported_models_run_mteb_and_refuse_a_mask(tmp_path, model_dir, engine):
    pytest.importorskip("onnxruntime" if engine == "onnx" else "openvino")
    from sparsecse.exporting.export import export

    exported = export(model_dir, tmp_path / engine, format=engine).out
    mask = Mask(torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 48, dtype=torch.bool)).save(tmp_path / "m.safetensors")
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **retrieval_files())
    refused(tmp_path, "--model", exported, "--mteb", task, "--mask", mask, match="exported model")
    # without the mask the exported graph runs mteb and gives the torch model's figure
    exported_results, _ = run_eval(tmp_path, exported, str(task), name="exported.json")
    torch_results, _ = run_eval(tmp_path, model_dir, str(task), name="torch.json")
    assert exported_results["mteb"]["tasks"]["TinyRetrieval"]["score"] == pytest.approx(
        torch_results["mteb"]["tasks"]["TinyRetrieval"]["score"], abs=1e-6)


def test_sts_tasks_and_mteb_in_one_result_file_compare_together(tmp_path, model_dir, tiny_stsb_dir):
    other = make_tiny_model_dir(tmp_path / "other", init_range=0.2, seed=1)
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **retrieval_files())
    both = ("--tasks", "STSBenchmark", "--data-dir", tiny_stsb_dir)
    a, run = run_eval(tmp_path, model_dir, str(task), *both, name="a.json")
    b, _ = run_eval(tmp_path, other, str(task), *both, name="b.json")
    assert set(a["scores"]) == {"STSBenchmark"} and set(a["mteb"]["tasks"]) == {"TinyRetrieval"}
    assert "STSBenchmark" in run.output and "TinyRetrieval" in run.output
    compared = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--bootstrap", "100")
    assert compared.exit_code == 0, compared.output
    assert "STSBenchmark" in compared.output and "TinyRetrieval (mteb ndcg_at_10)" in compared.output
    # an mteb-only file against a model side: one sentence, since the model side cannot be evaluated alike
    only, _ = run_eval(tmp_path, model_dir, str(task), name="only.json")
    refused = cli("compare", tmp_path / "only.json", model_dir)
    assert refused.exit_code == 1 and "holds mteb figures only" in refused.output


def test_a_decoder_embedder_reads_its_query_prompt(tmp_path):
    from tests.tiny_modern import make_modern_model_dir

    decoder = make_modern_model_dir(tmp_path / "qwen3", "qwen3")
    prompt = "Instruct: find the sentence\nQuery: "
    (decoder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": prompt,
                                                                                       "document": ""}}))
    files = retrieval_files()
    task = write_task(tmp_path / "ret", {"name": "TinyRetrieval", "type": "Retrieval"}, **files)
    results, _ = run_eval(tmp_path, decoder, str(task), "--pooling", "last")
    encoder = SentenceEncoder.load(str(decoder), pooling="last")
    expected = ranking_metrics(cosine(encoder.encode([prompt + q for q in QUERIES]), encoder.encode(DOCS)), files)
    assert results["mteb"]["tasks"]["TinyRetrieval"]["score"] == pytest.approx(
        100 * np.mean([v["ndcg_at_10"] for v in expected.values()]), abs=1e-6)
    plain = ranking_metrics(cosine(encoder.encode(QUERIES), encoder.encode(DOCS)), files)
    assert abs(results["mteb"]["tasks"]["TinyRetrieval"]["score"] -
               100 * np.mean([v["ndcg_at_10"] for v in plain.values()])) > 1e-3
    assert results["pooling"] == "last" and results["mteb"]["prompts"] == {"query": prompt}
