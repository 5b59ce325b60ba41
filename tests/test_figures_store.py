"""The results store and the docs written from it: every generated block of the README, the guides, the results
pages and the recipes' reached blocks equals what `make figures` writes from docs/results/store; a speed figure
outside a block (no entry behind it) or a hand-edited figure fails; each entry names its machine; the benchmarks and
`compress --store` write entries of the same schema."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparsecse.errors import SparseCSEError
from sparsecse.reporting.store import (PROVENANCE, Entry, check_entry, figure, load_store, machine_label, machine_slug,
                                       run_entry, write_entry)
from tests.helpers import load_benchmark
from tests.test_recipes import student_dir, teacher_dir, text, tiny_recipe  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "docs" / "results" / "store"
AVX2 = "AMD EPYC: +avx2 -avx512f -avx512_vnni -avx_vnni -avx512_bf16 -amx_tile -amx_int8 -amx_bf16 -bf16"


@pytest.fixture(scope="module")
def figures_docs():
    spec = importlib.util.spec_from_file_location("figures_docs", ROOT / "scripts" / "figures_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["figures_docs"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("figures_docs", None)


def _copy_docs(tmp_path: Path) -> Path:
    """The files `make figures` reads and writes, copied under ``tmp_path`` (the checkout stays untouched)."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(ROOT / "README.md", root / "README.md")
    for path in (ROOT / "docs").rglob("*"):
        if path.is_file() and path.suffix in (".md", ".json") and "_build" not in path.parts:
            target = root / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    shutil.copytree(ROOT / "sparsecse" / "recipes" / "shipped", root / "sparsecse" / "recipes" / "shipped")
    return root


def test_every_figure_of_the_docs_comes_from_the_store(figures_docs):
    assert figures_docs.problems() == []


def test_a_hand_edited_readme_figure_fails(figures_docs, tmp_path):
    root = _copy_docs(tmp_path)
    assert figures_docs.problems(root) == []
    readme = root / "README.md"
    text = readme.read_text()
    assert "**79.22, 2.02×**" in text
    readme.write_text(text.replace("**79.22, 2.02×**", "**79.22, 2.12×**", 1))
    assert figures_docs.problems(root) == ["README.md: the block frontier-table differs from the results store (run "
                                           "`make figures`)"]
    rewritten = figures_docs.render(readme, readme.read_text(), load_store(root / "docs/results/store"))
    assert "**79.22, 2.02×**" in rewritten


def test_a_speed_figure_outside_a_block_has_no_entry_and_fails(figures_docs, tmp_path):
    root = _copy_docs(tmp_path)
    guide = root / "docs" / "guides" / "targets.md"
    guide.write_text(guide.read_text() + "\nOn my laptop it ran 2.31x faster.\n")
    found = figures_docs.problems(root)
    assert len(found) == 1 and found[0].startswith("docs/guides/targets.md: the speed figure '2.31x' has no entry")


@pytest.mark.parametrize("sentence, kind, figure", [
    ("It reached 78.54 on the 7 STS tasks.", "score", "78.54"),
    ("The run took 18.1 min from a cold start.", "time", "18.1 min"),
    ("The classifier costs about 3-5x the other one.", "speed figure", "3-5x"),
    ("Scoring costs a ratio 1.022 of a plain backward.", "ratio", "1.022"),
])
def test_a_measured_figure_typed_into_a_guide_fails(figures_docs, tmp_path, sentence, kind, figure):
    """A score, a time, a range of speed-ups or a ratio typed into a guide outside a block has no entry behind it."""
    root = _copy_docs(tmp_path)
    guide = root / "docs" / "guides" / "recipes.md"
    guide.write_text(guide.read_text() + f"\n{sentence}\n")
    assert figures_docs.problems(root) == [f"docs/guides/recipes.md: the {kind} {figure!r} has no entry in the results "
                                           f"store (outside a generated block): {sentence}"]


def test_a_block_template_beside_its_page_gives_the_words(figures_docs, tmp_path):
    """A templated block's words live in _figures/NAME.md beside its page; its values come from the store: a changed
    template makes the page differ until `make figures` rewrites it."""
    root = _copy_docs(tmp_path)
    template = root / "docs" / "guides" / "_figures" / "targets-intro.md"
    assert "{l6_speedup}" in template.read_text() and "targets-intro" in figures_docs.TEMPLATED
    template.write_text(template.read_text().replace("No recipe to copy", "Nothing to copy"))
    assert figures_docs.problems(root) == ["docs/guides/targets.md: the block targets-intro differs from the results "
                                           "store (run `make figures`)"]
    guide = root / "docs" / "guides" / "targets.md"
    rewritten = figures_docs.render(guide, guide.read_text(), load_store(root / "docs/results/store"))
    assert "Nothing to copy, no FLOPs fraction to guess: on AMD EPYC (AVX2 only), 2 threads, 0.45 of" in \
        rewritten


def test_a_setting_in_backticks_is_not_a_measured_figure(figures_docs, tmp_path):
    root = _copy_docs(tmp_path)
    guide = root / "docs" / "guides" / "recipes.md"
    guide.write_text(guide.read_text() + "\nA busy machine is timed again after `30 s`; `--set lr=0.0001`.\n")
    assert figures_docs.problems(root) == []


def test_a_readme_figure_written_outside_a_block_fails(figures_docs, tmp_path):
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("## Documentation", "It scores 79.50 on STS.\n\n## Documentation"))
    assert figures_docs.problems(root) == ["README.md: the figure 79.50 has no entry in the results store (outside a "
                                           "generated block)"]
    assert "0.45" in figures_docs.recipe_settings(root)  # frontier-2x's budget: a setting the README may name


def test_a_block_whose_entry_is_gone_fails(figures_docs, tmp_path):
    root = _copy_docs(tmp_path)
    (root / "docs" / "results" / "store" / "f2x.amd-epyc-avx2-only.json").unlink()
    found = figures_docs.problems(root)
    assert found and all("f2x.amd-epyc-avx2-only" in f for f in found)


def test_frontier_2x_speed_figures_each_name_their_cpu(figures_docs):
    """Each speed-up the docs give frontier-2x sits in a row with its CPU and the run that timed it, both runs timed
    by the one method (the deployment table's and the recipe's own)."""
    table = figures_docs.speed_by_cpu(load_store(STORE))
    rows = {line for line in table.splitlines() if line.startswith("| frontier-2x |")}
    assert rows == {
        "| frontier-2x | AMD EPYC (AVX2 only), 2 threads | `benchmarks/deploy_speed.py` | 2.02× | — |",
        "| frontier-2x | AMD EPYC (AVX2 only), 2 threads | its recipe run (`frontier-2x`) | 2.13× | — |"}
    l3 = {line for line in table.splitlines() if line.startswith("| paraphrase-MiniLM-L3-v2 |")}
    assert "| paraphrase-MiniLM-L3-v2 | AMD EPYC (AVX2 only), 2 threads | its recipe run (`frontier-2x`) | 1.99× | — |" in l3
    over_l3 = [line for line in table.splitlines() if line.startswith("| l3-prune-0.8 |") and "recipe run" in line]
    assert over_l3 == ["| l3-prune-0.8 | AMD EPYC (AVX2 only), 2 threads | its recipe run (`l3-prune-0.8`) | — | 1.18× |"]


def test_every_entry_names_its_machine_and_how_it_was_measured():
    store = load_store(STORE)
    assert len(store) >= 20
    machines = {entry.machine for entry in store.values()}
    assert {"AMD EPYC (AVX2 only)", "Intel Xeon (AVX-512 VNNI + AMX)", "NVIDIA H100"} <= machines
    assert "unknown machine" not in machines
    for entry in store.values():
        assert set(PROVENANCE) <= set(entry.provenance), entry.id
        assert entry.provenance["command"] and entry.provenance["commit"] and entry.provenance["date"], entry.id
        assert "/work/" not in json.dumps(entry.to_dict()) and "/root/" not in json.dumps(entry.to_dict()), entry.id


@pytest.mark.parametrize("cpu, gpu, label", [
    (AVX2, None, "AMD EPYC (AVX2 only)"),
    ("AMD EPYC: +avx2 +avx512f +avx512_vnni -avx_vnni +avx512_bf16 -amx_tile", None, "AMD EPYC (AVX-512 VNNI)"),
    ("Intel(R) Xeon(R) Processor: +avx2 +avx512f +avx512_vnni +avx_vnni +amx_tile +amx_int8", None,
     "Intel Xeon (AVX-512 VNNI + AMX)"),
    ("Intel(R) Xeon(R) Processor: +avx2 +avx512f -avx512_vnni -amx_tile", None, "Intel Xeon (AVX-512)"),
    (AVX2, "NVIDIA H100", "NVIDIA H100"),
])
def test_machine_labels(cpu, gpu, label):
    assert machine_label(cpu, gpu) == label


def _entry(**provenance) -> Entry:
    prov = {"command": "python benchmarks/x.py", "commit": "abc123", "cpu": "AMD EPYC", "cpu_features": ["avx2"],
            "gpu": None, "threads": 2, "batch_size": 128, "engine": "torch-fp32", "date": "2026-11-27", **provenance}
    return Entry("bench.amd-epyc-avx2-only", "a run", {"rows": {"m": {"speedup": 1.5}}}, prov)


def test_an_entry_round_trips_and_its_figures_are_found_by_path(tmp_path):
    path = write_entry(tmp_path, _entry())
    assert path.name == "bench.amd-epyc-avx2-only.json"
    store = load_store(tmp_path)
    assert figure(store, "bench.amd-epyc-avx2-only:rows/m/speedup") == 1.5
    assert store["bench.amd-epyc-avx2-only"].machine == "AMD EPYC (AVX2 only)"
    with pytest.raises(SparseCSEError, match="has no figure rows/x/speedup"):
        figure(store, "bench.amd-epyc-avx2-only:rows/x/speedup")
    with pytest.raises(SparseCSEError, match="has no entry nope"):
        figure(store, "nope:rows")


@pytest.mark.parametrize("change, message", [
    ({"schema": 2}, "not a results store entry of schema 1"),
    ({"id": "Has Spaces"}, "the id must be"),
    ({"figures": {}}, "figures must be a non-empty mapping"),
    ({"provenance": {"command": "x"}}, "the provenance lacks commit, cpu, cpu_features"),
    ({"provenance": {k: None for k in PROVENANCE}}, "names neither a CPU nor a GPU"),
])
def test_a_bad_entry_is_refused_in_one_sentence(change, message, tmp_path):
    data = {**_entry().to_dict(), **change}
    with pytest.raises(SparseCSEError, match=message) as refused:
        check_entry(data, "x.json")
    assert str(refused.value).count(". ") == 0
    (tmp_path / "x.json").write_text(json.dumps(data))
    with pytest.raises(SparseCSEError):
        load_store(tmp_path)


def test_a_file_named_other_than_its_id_is_refused(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps(_entry().to_dict()))
    with pytest.raises(SparseCSEError, match="its file name must be bench.amd-epyc-avx2-only.json"):
        load_store(tmp_path)


def test_deploy_speed_writes_one_entry_per_run(tmp_path):
    gen = load_benchmark("deploy_speed")
    deploy_speed = next(gen)
    try:
        rows = [{"model": "dense torch fp32", "group": "dense", "speedup": 1.0, "speedup_ci": [1.0, 1.0],
                 "sentences_per_second": 400.0, "avg_sts": 78.874, "ci": [78.13, 79.5],
                 "scores": {"STSBenchmark": 82.03}},
                {"model": "f2x OpenVINO int8", "group": "f2x", "speedup": 1.90331, "speedup_ci": [1.87, 1.94],
                 "sentences_per_second": 761.3, "avg_sts": 79.2495, "ci": None, "scores": {"STSBenchmark": 83.1}}]
        args = SimpleNamespace(store=str(tmp_path), store_id="deploy.test", threads=2, batch_size=128, rounds=5,
                               model=None, small="")
        path = deploy_speed.store_entry(rows, 2552, args, ["--work", "W", "--pruned", "f2x=DIR"])
    finally:
        gen.close()
    ident = f"deploy.test.{machine_slug()}"  # the machine appended to --store-id
    entry = load_store(tmp_path)[ident]
    assert path.name == f"{ident}.json"
    assert entry.get("rows/f2x/openvino-int8/speedup") == 1.9033
    assert entry.get("rows/f2x/openvino-int8/speedup_ci") == [1.87, 1.94] and entry.get("rounds") == 5
    assert entry.get("rows/all-MiniLM-L6-v2/torch-fp32/ci") == [78.13, 79.5]  # "dense" stored by its name
    assert entry.provenance["command"] == "python benchmarks/deploy_speed.py --work W --pruned f2x=DIR"
    assert entry.provenance["engine"] == "openvino-int8,torch-fp32" and entry.provenance["batch_size"] == 128


def test_frontier_writes_its_table_as_one_entry(tmp_path):
    gen = load_benchmark("frontier")
    frontier = next(gen)
    try:
        table = [{"label": "all-MiniLM-L6-v2 dense", "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0,
                  "avg_sts": 78.8746,
                  "ci_lo": 78.13, "ci_hi": 79.5, "vs": None, "diff": None, "diff_lo": None, "diff_hi": None,
                  "parameters": 22713216, "layer_flops": 1.0},
                 {"label": "L6 f0.45 (frontier-2x)", "speedup": 2.03481, "speedup_lo": 1.98, "speedup_hi": 2.07,
                  "avg_sts": 79.2242,
                  "ci_lo": 78.5571, "ci_hi": 79.8169, "vs": "paraphrase-MiniLM-L3-v2 dense", "diff": 0.549,
                  "diff_lo": 0.2114, "diff_hi": 0.8907, "parameters": 16840000, "layer_flops": 0.45213}]
        args = SimpleNamespace(store=str(tmp_path), store_id=None, threads=2, batch_size=128, rounds=5)
        path = frontier.store_entry(table, 2552, args, ["--work", "W"])
    finally:
        gen.close()
    entry = load_store(tmp_path)[path.stem]
    assert path.stem.startswith("frontier.")
    assert entry.get("rows/L6 f0.45 (frontier-2x)/speedup") == 2.0348
    assert entry.get("rows/L6 f0.45 (frontier-2x)/speedup_ci") == [1.98, 2.07] and entry.get("rounds") == 5
    assert entry.get("rows/L6 f0.45 (frontier-2x)/paired_ci") == [0.2114, 0.8907]
    assert entry.get("rows/all-MiniLM-L6-v2 dense/versus") is None
    assert entry.provenance["engine"] == "torch-fp32" and entry.provenance["threads"] == 2


def test_a_recipe_runs_manifest_becomes_an_entry():
    manifest = {"figures": {"sts_avg": 77.97, "sts_avg_ci": [77.26, 78.63], "stsb_dev": 85.6,
                            "speed": {"speedup": 2.09, "threads": 2},
                            "target": {"engine": "torch-fp32", "batch_size": 128, "speedup": 2.08,
                                       "speedup_target": 2.0, "met": True}},
                "seconds": {"budget": 155.2, "prune": 218.0, "student": 401.0, "evaluation": 309.0}}
    entry = run_entry("t2x.here", manifest, "sparsecse compress --speedup 2.0")
    assert entry.figures["minutes"] == 18.1 and entry.figures["ci"] == [77.26, 78.63]
    assert entry.figures["target"]["speedup"] == 2.08 and entry.provenance["engine"] == "torch-fp32"
    assert entry.provenance["threads"] == 2 and entry.provenance["batch_size"] == 128
    # a target run has no separate throughput line: its target's figure (judged at its shape) stands for it
    manifest["figures"].pop("speed")
    manifest["figures"]["target"]["shape"] = {"threads": 2}
    entry = run_entry("t2x.here", manifest, "sparsecse compress --speedup 2.0")
    assert entry.figures["speedup"] == 2.08 and entry.provenance["threads"] == 2
    assert "choice" not in entry.figures["target"] and "interval" not in entry.figures["target"]
    # what the search chose and the final figure's interval go with it
    manifest["stages"] = [{"type": "budget", "keep_flops": 0.705, "layers_removed": [1, 2, 3]}, {"type": "prune"}]
    manifest["figures"]["target"]["interval"] = {"speedup": 2.08, "low": 1.94, "high": 2.17, "confidence": 0.99}
    target = run_entry("t2x.here", manifest, "sparsecse compress --speedup 2.0").figures["target"]
    assert target["choice"] == {"layers_removed": 3, "keep_flops": 0.705}
    assert target["interval"] == {"low": 1.94, "high": 2.17, "confidence": 0.99} and "repair" not in target
    # the search's confirmation of its choice, and a near miss's repair, go with it too
    manifest["stages"][0]["chosen"] = {"keep_flops": 0.705, "confirmed": 2.0696}
    manifest["figures"]["target"]["repair"] = {"keep": 0.95, "before": 1.9985, "after": 2.0606, "met": True,
                                               "recovery_kept": False, "dev_after_cut": 85.68, "model": "run/repair"}
    target = run_entry("t2x.here", manifest, "sparsecse compress --speedup 2.0").figures["target"]
    assert target["choice"] == {"layers_removed": 3, "keep_flops": 0.705, "confirmed": 2.0696}
    assert target["repair"] == {"keep": 0.95, "before": 1.9985, "after": 2.0606, "met": True, "recovery_kept": False}
    # a recipe run has no target: its throughput line names the batch it was timed at
    recipe = {"figures": {"sts_avg": 79.22, "speed": {"speedup": 2.13, "threads": 2, "batch_size": 128}},
              "seconds": {"evaluation": 60.0}, "input_name": "sentence-transformers/all-MiniLM-L6-v2"}
    entry = run_entry("f2x.here", recipe, "sparsecse compress --recipe frontier-2x")
    assert entry.provenance["batch_size"] == 128 and entry.provenance["engine"] == "torch-fp32"
    assert entry.figures["speedup_over"] == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(SparseCSEError, match="holds no figures"):
        run_entry("x", {"figures": {}}, "c")


def test_compress_store_goes_with_a_recipe_or_target(tmp_path):
    from click.testing import CliRunner

    from sparsecse.cli import main

    result = CliRunner().invoke(main, ["compress", "--keep-flops", "0.5", "--reconstruct", "c.txt",
                                       "--store", str(tmp_path / "s"), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "--store goes with --recipe or a target" in result.output
    assert not (tmp_path / "s").exists() and not (tmp_path / "o").exists()


def test_compress_store_that_is_a_file_is_refused_before_the_run(tmp_path):
    from click.testing import CliRunner

    from sparsecse.cli import main

    store = tmp_path / "store.json"
    store.write_text("{}")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a sentence\n")
    result = CliRunner().invoke(main, ["compress", "--speedup", "2.0", "--corpus", str(corpus), "--store", str(store),
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "Invalid value for '--store'" in result.output and "is a file" in result.output
    assert not (tmp_path / "o").exists()


def test_compress_store_writes_the_runs_final_measurement(tmp_path, teacher_dir, student_dir, text, fake_senteval):
    """A tiny recipe run end to end through the command line: its entry holds the figures of its card."""
    from click.testing import CliRunner

    from sparsecse.cli import main

    recipe, out, store = tiny_recipe(tmp_path, teacher_dir), tmp_path / "tiny-run", tmp_path / "store"
    result = CliRunner().invoke(main, ["compress", "--recipe", str(recipe), "--model", str(student_dir), "--corpus",
                                       str(text), "--data-dir", str(fake_senteval), "--out", str(out), "--store",
                                       str(store), "--quiet"])
    assert result.exit_code == 0, result.output
    (entry,) = load_store(store).values()
    manifest = json.loads((out / "model" / "manifest.json").read_text())
    assert entry.id.startswith("tiny-run.") and f"wrote {store / (entry.id + '.json')}" in result.output
    assert entry.figures["sts_avg"] == manifest["figures"]["sts_avg"]
    assert entry.figures["stsb_dev"] == manifest["figures"]["stsb_dev"]
    command = entry.provenance["command"]
    assert command.startswith("sparsecse compress ") and f"--recipe {recipe}" in command and "--quiet" in command
    assert entry.provenance["cpu"] and entry.provenance["date"]
