"""Model cards in sentence-transformers' layout: a recipe's card has every section, its figures are the result
files' (transfer differences recomputed here from the per-fold and per-item results), and its Usage snippet runs
as written; the cards of shrink, train and rewind outputs parse and say what was removed; a card never prints
None or nan and leaves out what it does not know; the recipe's evaluation tasks are checked; peak memory is
measured in a fresh process; the frontier benchmark's transfer pieces."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from sparsecse.cards.citations import CITATIONS
from sparsecse.cards.facts import read_front_matter
from sparsecse.cards.model_card import MODEL_PLACEHOLDER, card_sections, render_card, usage_code
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.card import TRANSFER_RESULTS
from sparsecse.recipes.runner import run_recipe
from sparsecse.recipes.spec import load_recipe
from tests.helpers import load_benchmark, make_mask, quick, random_sentences
from tests.test_recipes import tiny_recipe
from tests.tiny import make_tiny_model_dir
from sparsecse.shrinking.shrink import ShrinkConfig

ALL_SECTIONS = ["Model Details", "Usage", "Evaluation", "Compression", "Training Details", "Framework Versions",
                "Citation"]
TRANSFER = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")


INPUT_CARD = "---\nlanguage: en\nlicense: apache-2.0\ntags:\n- sentence-transformers\n---\n\n# A tiny input model\n"


def run_usage(card: str, model_dir) -> str:
    """Execute the card's Usage snippet with the model directory where the card says to put it."""
    code = usage_code(card)
    assert code.count(MODEL_PLACEHOLDER) == 1
    done = subprocess.run([sys.executable, "-c", code.replace(MODEL_PLACEHOLDER, str(model_dir))],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def assert_clean(card: str) -> None:
    words = card.replace("(", " ").replace(")", " ").replace(",", " ").split()
    assert "None" not in words and "nan" not in words and "null" not in card


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory, fake_senteval):
    tmp = tmp_path_factory.mktemp("card_recipe")
    teacher = make_tiny_model_dir(tmp / "teacher", "bert", seed=5, init_range=0.2)
    student = make_tiny_model_dir(tmp / "student", "bert", seed=1, init_range=0.2)
    (student / "README.md").write_text(INPUT_CARD)  # the input model's own card: its language and license carry over
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(96, seed=4)) + "\n")
    recipe = tiny_recipe(tmp, teacher)
    result = run_recipe(str(recipe), str(student), corpus, tmp / "run", data_dir=fake_senteval,
                        overrides={"evaluation.speed": True, "evaluation.compare_with": str(teacher)},
                        show_progress=False)
    return result


def test_a_recipes_card_has_every_section_and_the_result_files_figures(recipe_run):
    card = (recipe_run.model / "README.md").read_text()
    assert card_sections(card) == ALL_SECTIONS
    for sub in ("### Semantic textual similarity", "### Transfer tasks (SentEval)"):
        assert sub in card
    assert_clean(card)
    meta = read_front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "sparsecse", "pruned", "distilled"} <= set(meta["tags"])
    results = meta["model-index"][0]["results"]
    assert [r["task"]["type"] for r in results] == ["semantic-similarity"] * 7 + ["text-classification"] * 7

    saved = json.loads((recipe_run.model / TRANSFER_RESULTS).read_text())
    reference = json.loads((recipe_run.out / "eval" / f"reference_{TRANSFER_RESULTS}").read_text())
    accuracy = {r["dataset"]["name"]: r["metrics"][0]["value"] for r in results if r["task"]["type"] != "semantic-similarity"}
    assert accuracy == {t: round(saved["scores"][t] / 100, 6) for t in TRANSFER}
    table = {line.split("|")[1].strip(): line for line in card.split("### Transfer tasks")[1].split("\n\n")[2].splitlines()[2:]}
    for task in TRANSFER:
        mine, ref = saved["details"][task], reference["details"][task]
        if "fold_acc" in mine:  # the paired difference, fold by fold, computed here
            diff = float(np.mean(np.subtract(mine["fold_acc"], ref["fold_acc"])))
            assert len(mine["fold_acc"]) == 5  # the recipe's default: SentEval's fast settings
            assert f"{mine['acc']:.2f} ± {mine['fold_std']:.2f} (folds)" in table[task]
        else:  # the same test items: the difference of the two accuracies
            diff = 100 * (np.mean(mine["correct"]) - np.mean(ref["correct"]))
            assert f"{mine['acc']:.2f} [{mine['ci'][0]:.2f}, {mine['ci'][1]:.2f}]" in table[task]
        assert f"| {diff:+.2f}" in table[task], (task, table[task])
    assert f"**{saved['avg_transfer']:.2f}**" in card

    compression = card.split("## Compression")[1].split("\n## ")[0]
    config = json.loads((recipe_run.model / "config.json").read_text())
    rows = [line for line in compression.splitlines() if line.startswith("| ") and "/" in line]
    assert [int(r.split("|")[2].split("/")[0]) for r in rows] == [len(h) for h in config["kept_heads"]]
    assert "Encode speed-up over" in compression and "Peak memory while encoding" in compression
    assert "VmHWM" in compression and "Weight files" in compression
    training = card.split("## Training Details")[1].split("\n## ")[0]
    assert "`tiny`" in training and "Corpus sentences:** 96" in training and "compress --recipe" in training
    steps = sum(s.get("steps") or 0 for s in recipe_run.stages)
    assert f"**Steps:** {steps}" in training
    for key in ("sparsecse", "sentence-bert", "distillation", "kprune", "senteval"):
        assert CITATIONS[key][1].split("{")[1].split(",")[0] in card
    assert "shen2022structural" not in card and "kozlov2020neural" not in card  # no speed target, no int8


def test_a_recipes_card_carries_the_inputs_metadata_and_names_its_frameworks(recipe_run):
    card = (recipe_run.model / "README.md").read_text()
    meta = read_front_matter(card)
    assert list(meta)[:2] == ["language", "license"]  # sentence-transformers' order
    assert meta["language"] == "en" and meta["license"] == "apache-2.0"
    assert "base_model" not in meta  # the input is a directory of the user's own: no hub id, no machine path
    versions = card.split("## Framework Versions")[1].split("\n## ")[0]
    for package in ("sentence-transformers", "tokenizers", "transformers", "torch"):
        assert f"- {package}: " in versions, versions
    command = card.split("```bash\nsparsecse compress")[1].split("\n```")[0]
    assert str(recipe_run.out.parent) not in command and "--model path/to/student" in command


def test_a_recipes_usage_snippet_runs_as_written(recipe_run):
    card = (recipe_run.model / "README.md").read_text()
    printed = run_usage(card, recipe_run.model)
    dim = SentenceEncoder.load(recipe_run.model, device="cpu").dim
    assert printed.splitlines()[0] == f"(2, {dim})"
    assert f"(2, {dim})" in usage_code(card)


@pytest.fixture(scope="module")
def written_models(tmp_path_factory):
    """A shrunk, a trained and a rewound model directory, each as its command writes it."""
    from accelerate.state import AcceleratorState

    from sparsecse.shrinking.shrink import shrink
    from sparsecse.training.api import train
    from sparsecse.training.rewind import rewind

    AcceleratorState._reset_state(True)  # the recipe's bf16 stages (where the CPU runs bf16) set it for the process
    tmp = tmp_path_factory.mktemp("card_models")
    source = make_tiny_model_dir(tmp / "source", "bert", seed=2)
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(48, seed=2)) + "\n")
    trained = train(source, corpus, tmp / "trained", objective="simcse", **quick(max_steps=3))
    mask_path, mask = make_mask(tmp, trained.out)
    shrunk = shrink(model=trained.out, mask=mask_path, out=tmp / "shrunk", config=ShrinkConfig(reconstruct=corpus,
        reconstruct_sentences=16))
    rewound = rewind(mask_path, corpus, tmp / "rewound", **quick(max_steps=2))
    return {"source": source, "trained": trained, "shrunk": shrunk, "rewound": rewound, "mask": mask}


@pytest.mark.parametrize("kind", ["shrunk", "trained", "rewound"])
def test_cards_of_shrink_train_and_rewind_outputs_parse(kind, written_models):
    out = written_models[kind].out
    card = (out / "README.md").read_text()
    meta = read_front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert "model-index" not in meta  # nothing was evaluated
    # the source is a directory of the user's own: no hub id for base_model, and its path is not printed
    assert "base_model" not in meta and str(written_models["source"]) not in card
    assert f"- **Base model:** `path/to/{written_models['source'].name}`" in card
    assert_clean(card)
    expected = {"shrunk": ["Model Details", "Usage", "Compression", "Framework Versions", "Citation"],
                "trained": ["Model Details", "Usage", "Training Details", "Framework Versions", "Citation"],
                "rewound": ["Model Details", "Usage", "Compression", "Training Details", "Framework Versions",
                            "Citation"]}[kind]
    assert card_sections(card) == expected
    assert "**Maximum sequence length:** 64 tokens" in card and "**Output dimension:** 32" in card
    assert ("trust_remote_code=True" in usage_code(card)) == (kind != "trained")
    if kind != "trained":  # the heads and neurons the mask removed, layer by layer
        mask = written_models["mask"]
        rows = [r for r in card.split("## Compression")[1].splitlines() if r.startswith("| ") and "/" in r]
        heads = [4 - int(r.split("|")[2].split("/")[0]) for r in rows]
        neurons = [48 - int(r.split("|")[3].split("/")[0]) for r in rows]
        assert heads == mask.heads_pruned_per_layer() and neurons == mask.neurons_pruned_per_layer()
    if kind == "shrunk":
        assert "kwon2022fast" in card  # it was reconstructed
    else:
        result = written_models[kind]
        assert f"**Steps:** {result.steps}" in card and "**Losses:** simcse" in card and "gao2021simcse" in card


def test_a_shrunk_models_usage_snippet_runs_as_written(written_models):
    out = written_models["shrunk"].out
    assert run_usage((out / "README.md").read_text(), out).splitlines()[0] == "(2, 32)"


def test_a_card_leaves_out_what_it_does_not_know():
    card = render_card({"details": {}})
    assert card_sections(card) == ["Model Details", "Usage", "Citation"]
    assert_clean(card)
    nan = float("nan")
    card = render_card({"details": {"output_dim": None, "max_seq_length": 128}, "base_model": None,
                        "evaluation": {"sts": {"STS12": nan, "STS13": 80.0}, "sts_avg": nan, "stsb_dev": None,
                                       "transfer": {"MR": {"acc": nan}}, "mteb": [{"task": "X", "main_score": None}]},
                        "compression": {"layers": [], "parameters": None, "file_size_bytes": None,
                                        "target": {"speedup": 2.0, "max_drop": None, "engine": "onnx int8",
                                                   "batch_size": 32, "cpu_features": ["avx512_vnni"], "met": False,
                                                   "measured_speedup": 1.87, "latency_ms": {"p50": 3.0, "p95": None},
                                                   "throughput": nan, "params": 11_000_000, "file_size_bytes": None,
                                                   "candidates_table": "candidates.csv", "candidates_plot": None}},
                        "training": {"steps": None}, "versions": {"torch": None}})
    assert_clean(card)
    assert card_sections(card) == ["Model Details", "Usage", "Evaluation", "Compression", "Citation"]
    assert "| STS13 | 80.00 |" in card and "STS12" not in card.split("---\n", 2)[2] and "Transfer" not in card
    assert "Asked for a 2x speed-up on onnx int8, batch 32: **not met**." in card
    assert "**Measured speed-up:** 1.87x" in card and "Latency" not in card and "Throughput" not in card
    assert "**Parameters:** 11.00 M" in card and "**Candidates:** `candidates.csv`" in card
    assert [r["dataset"]["name"] for r in read_front_matter(card)["model-index"][0]["results"]] == ["STS13"]


def test_the_users_sets_and_mteb_tasks_are_reported():
    user = {"name": "pairs.tsv", "kind": "positives", "metric": "mrr@10", "score": 61.25, "ci": [58.0, 64.5], "n": 200,
            "recall@1": 50.5, "mrr@10": 61.25}
    card = render_card({"details": {}, "evaluation": {"test_set": user,
                                                      "mteb": [{"task": "SciFact", "main_score": 0.6125}]}})
    assert "| test | pairs.tsv | positives | mrr@10 | 61.25 [58.00, 64.50] | 200 | 50.50 | 61.25 |" in card
    assert "| SciFact | 0.6125 |" in card and "muennighoff2023mteb" in card
    values = {r["dataset"]["name"]: r["metrics"][0]["value"] for r in read_front_matter(card)["model-index"][0]["results"]}
    assert values == {"pairs.tsv": 0.6125, "SciFact": 0.6125}


@pytest.mark.parametrize("tasks, message", [(["sts", "mteb"], "task groups out of sts, transfer"),
                                            ([], "task groups"), ("sts", "must be a list"),
                                            (["sts", "sts"], "distinct")])
def test_a_recipes_evaluation_tasks_are_checked(tasks, message, tmp_path):
    recipe = tiny_recipe(tmp_path, tmp_path)
    with pytest.raises(SparseCSEError, match=message):
        load_recipe(str(recipe), {"evaluation.tasks": tasks})
    # which figures are computed makes no other model: a resumed run may change them
    assert load_recipe(str(recipe), {"evaluation.tasks": ["sts"]}).digest() == load_recipe(str(recipe)).digest()
    assert load_recipe(str(recipe)).evaluation.tasks == ["sts", "transfer"]


def test_peak_memory_is_measured_in_a_fresh_process(tmp_path):
    from sparsecse.evaluation.memory import peak_encode_memory

    model = make_tiny_model_dir(tmp_path / "m", "bert")
    peak = peak_encode_memory(model, random_sentences(40), batch_size=8)
    assert 0 < peak["runtime_rss_bytes"] <= peak["loaded_rss_bytes"] <= peak["peak_rss_bytes"]
    assert peak["peak_rss_bytes"] > peak["runtime_rss_bytes"]  # this process's own high-water mark (VmHWM): loading
    # a model adds to it; a peak equal to the runtime's ("0.0 KiB above the runtime") was the parent's inherited one
    assert "VmHWM" in peak["method"]
    assert peak["encode_extra_bytes"] == peak["peak_rss_bytes"] - peak["loaded_rss_bytes"]
    assert peak["sentences"] == 40 and "40 sentences in batches of 8" in peak["method"]
    with pytest.raises(SparseCSEError, match="failed"):
        peak_encode_memory(tmp_path / "missing", ["a"])


def test_peak_memory_of_the_fresh_process_does_not_inherit_the_callers(tmp_path):
    """getrusage's ru_maxrss survives execve: a child of a 2 GiB process would report 2 GiB before it loads."""
    import numpy as np

    from sparsecse.evaluation.memory import peak_encode_memory

    model = make_tiny_model_dir(tmp_path / "m", "bert")
    held = np.ones(2 * 2 ** 30 // 8)  # written, so resident in this process
    peak = peak_encode_memory(model, random_sentences(8), batch_size=8)
    assert held[-1] == 1.0
    assert peak["runtime_rss_bytes"] < 1.5 * 2 ** 30, peak


@pytest.fixture(scope="module")
def frontier():
    yield from load_benchmark("frontier")


def test_frontier_transfer_rows_pair_every_row_with_l3_and_dense(frontier):
    rng = np.random.default_rng(0)

    def record(shift, folds_below=False):
        tasks = {}
        for t in TRANSFER:
            if t in ("SST2", "TREC", "MRPC"):
                correct = (rng.random(400) < 0.8 + shift).astype(int).tolist()
                tasks[t] = {"acc": 100 * float(np.mean(correct)), "ci": [0.0, 1.0], "correct": correct}
            else:
                folds = (np.array([80.0, 81, 79, 82, 80]) + (shift * 100 if folds_below else rng.normal(0, 1, 5)))
                tasks[t] = {"acc": float(folds.mean()), "fold_std": float(folds.std(ddof=1)),
                            "fold_acc": folds.tolist()}
        return {"transfer": tasks, "avg_transfer": float(np.mean([d["acc"] for d in tasks.values()]))}

    records = {frontier.DENSE_LABEL: record(0.0, folds_below=True), frontier.L3_LABEL: record(0.0, folds_below=True),
               "worse": record(-0.15, folds_below=True)}
    rows = {r["label"]: r for r in frontier.transfer_rows(records, seed=0)}
    worse = rows["worse"]
    assert worse["loses_to_l3"] == list(TRANSFER) and worse["loses_to_dense"] == list(TRANSFER)
    assert "vs_l3" not in rows[frontier.L3_LABEL] and "vs_dense" in rows[frontier.L3_LABEL]
    assert worse["vs_l3"]["MR"]["diff"] == pytest.approx(-15.0)
    mrpc = records["worse"]["transfer"]["MRPC"]["acc"] - records[frontier.L3_LABEL]["transfer"]["MRPC"]["acc"]
    assert worse["vs_l3"]["MRPC"]["diff"] == pytest.approx(mrpc)
    lines = frontier.transfer_markdown(list(rows.values()), fasttest=True)
    assert any(line.startswith("| worse |") and line.endswith("| MR, CR, SUBJ, MPQA, SST2, TREC, MRPC | "
                                                               "MR, CR, SUBJ, MPQA, SST2, TREC, MRPC |") for line in lines)
    assert frontier.loses({"diff": -1.0, "folds_agree": "4/5"}) is False
    assert frontier.loses({"diff": -1.0, "ci": [-2.0, 0.1]}) is False
    assert not math.isnan(worse["avg_diff_l3"])


def test_frontier_transfer_only_runs_on_existing_model_dirs(frontier, tmp_path, fake_senteval):
    model = make_tiny_model_dir(tmp_path / "tiny", "bert")
    l3 = make_tiny_model_dir(tmp_path / "l3", "bert", seed=3)
    work = tmp_path / "work"
    from sparsecse.shrinking import shrink as shrink_module

    original = shrink_module.save_model_dir  # the dense row's directory: a tiny model stands in for L6
    frontier_save = frontier.save_dense
    try:
        frontier.save_dense = lambda d: original(SentenceEncoder.load(model, device="cpu"), d) if not d.is_dir() else None
        assert frontier.main(["--transfer-only", "--work", str(work), "--l3", str(l3), "--model", f"mine={model}",
                              "--data-dir", str(fake_senteval)]) == 0
    finally:
        frontier.save_dense = frontier_save
    saved = json.loads((work / "frontier-transfer.json").read_text())
    assert [r["label"] for r in saved["rows"]] == [frontier.DENSE_LABEL, frontier.L3_LABEL, "mine"]
    assert saved["rows"][2]["vs_dense"]["SST2"]["diff"] == pytest.approx(0.0)  # the same weights as dense
    assert (work / "frontier-transfer.md").read_text().count("\n| mine |") == 2
    assert not (work / "frontier.md").exists()  # nothing timed, no STS table


def test_the_l3_prune_recipes_card_on_a_tiny_model_has_every_section(tmp_path, fake_senteval):
    """The shipped l3-prune-0.8 (one prune stage, no training), its model swapped for a tiny one."""
    model = make_tiny_model_dir(tmp_path / "model", "bert", seed=4, init_range=0.2)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(64, seed=5)) + "\n")
    result = run_recipe("l3-prune-0.8", str(model), corpus, tmp_path / "run", data_dir=fake_senteval,
                        overrides={"prune.reconstruct_sentences": 32, "evaluation.bootstrap": 50,
                                   "evaluation.compare_with": str(model)}, show_progress=False)
    card = (result.model / "README.md").read_text()
    assert card_sections(card) == ALL_SECTIONS
    assert_clean(card)
    assert "### Transfer tasks (SentEval)" in card and "| **average (7 tasks)** |" in card
    assert "**Recipe:** `l3-prune-0.8`" in card and "Losses" not in card and "kwon2022fast" in card
    assert read_front_matter(card)["sparsecse_recipe"] == "l3-prune-0.8"
    assert run_usage(card, result.model).splitlines()[0] == "(2, 32)"
    # the recipe compares with its own input (as l3-prune-0.8 does with paraphrase-MiniLM-L3-v2): timed once, not
    # against itself; a directory of the user's own has no hub id and its path is not printed
    speed = next(line for line in card.splitlines() if line.startswith("- **Encode speed-up over"))
    assert speed.startswith("- **Encode speed-up over `path/to/model`:**") and len(re.findall(r"\d\.\d\dx", speed)) == 1
    assert "base_model" not in read_front_matter(card)
    command = card.split("The command that rebuilds it:")[1].split("```bash\n")[1].split("\n```")[0]
    assert str(tmp_path) not in command and "--model path/to/model --corpus path/to/corpus.txt" in command


def test_the_target_that_compress_speedup_records_is_rendered():
    target = {"speedup_target": 2.0, "max_drop": None, "engine": "torch-fp32", "batch_size": 32, "speedup": 1.9412,
              "met": False, "dev_set": "STS-B dev", "dev_score": 84.5, "reference_dev": 86.25, "drop": 1.75,
              "latency_ms": {"p50": 12.31, "p95": 14.52}, "reference_latency_ms": {"p50": 23.68, "p95": 27.04},
              "throughput": 1304.2, "reference_throughput": 672.0, "params": 15_300_000, "file_size_bytes": 61_200_000,
              "cpu_features": ["avx2", "avx512_vnni"], "candidates_table": "candidates.csv",
              "candidates_plot": "candidates.png"}
    card = render_card({"details": {}, "compression": {"target": target}})
    target_text = card.split("### Target")[1].split("\n## ")[0]
    assert "Asked for a 2x speed-up on torch-fp32, batch 32: **not met**." in target_text
    assert "**Measured speed-up:** 1.94x (torch-fp32, batch 32)" in target_text
    assert "**Dev score:** 84.50 against the input model's 86.25 on STS-B dev (drop 1.75)" in target_text
    assert "**Latency p50 / p95 of one sentence (batch 1):** 12.3 / 14.5 ms (input model: 23.7 / 27.0 ms)" in target_text
    assert "**Throughput at batch 32:** 1304.2 sentences/s (input model: 672.0)" in target_text
    assert "**File size:** 58.4 MiB" in target_text and "**CPU features:** avx2 avx512_vnni" in target_text
    assert "`candidates.csv`, plotted in `candidates.png`" in target_text
    assert_clean(card)


def test_a_card_does_not_time_the_input_model_against_itself(tmp_path, minilm_dir):
    """l3-prune-0.8 compares with paraphrase-MiniLM-L3-v2, its own input: no second, meaningless 1.0x (the
    default model's package is needed: skipped without it)."""
    from sparsecse.recipes.final_figures import _same_model

    assert _same_model("all-MiniLM-L6-v2", str(minilm_dir))
    assert not _same_model("all-MiniLM-L6-v2", str(make_tiny_model_dir(tmp_path / "m", "bert")))
