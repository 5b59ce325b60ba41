"""Bad input on the command line and in the Python API (issue 16): every case ends in one sentence,
before any model is loaded, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch

from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.registry import available_objectives, get_objective
from sparsecse.sweeps.config import RewindConfig, SweepOptions
from tests.helpers import cli, evaluation, scoring
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.training.config import TrainingConfig


def one_sentence_error(result, *fragments):
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------- objective parameters
@pytest.mark.parametrize("args, fragment", [
    ("temperature=abc", "temperature must be a number"),
    ("temperature=0", "temperature must be positive"),
    ("temperature=nan", "finite"),
    ("temperature=-1", "temperature must be positive"),
    ("mlp=3", "mlp must be true or false"),
])
def test_objective_args_checked_before_the_model_loads(tmp_path, corpus, args, fragment):
    # the model does not exist: a check that ran after loading it would report that instead
    result = cli("train", "--model", tmp_path / "no-such-model", "--corpus", corpus, "--out", tmp_path / "o",
                     "--objective-args", args)
    one_sentence_error(result, fragment)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


@pytest.mark.parametrize("name, params, fragment", [
    ("diffcse", {"generator": "g", "mask_ratio": 1.5}, "mask_ratio"),
    ("diffcse", {"generator": 3}, "generator"),
    ("infocse", {"mlm": "m", "extra_layers": 0}, "extra_layers"),
    ("infocse", {"mlm": "m", "sentence_vector": "max"}, "sentence_vector"),
    ("input_noise", {"sigma": "big"}, "sigma"),
    ("noise_negatives", {"num_samples": 2.5}, "num_samples"),
    ("weight_perturbation", {"fgsm": "yes"}, "fgsm"),
])
def test_each_objective_declares_its_parameter_checks(name, params, fragment):
    with pytest.raises(SparseCSEError, match=fragment):
        get_objective(name).check_params(params)


def test_every_builtin_objective_checks_every_parameter_and_accepts_its_defaults():
    for name, cls in available_objectives().items():
        if cls.__module__.startswith("sparsecse."):
            assert set(cls.parameter_checks()) == set(cls.defaults), name
            required = {key: "x" for key in cls.requires}
            assert cls.check_params(required) == {**cls.defaults, **required}


def test_non_finite_learning_rate_is_refused_before_loading(tmp_path, corpus):
    result = cli("train", "--model", tmp_path / "none", "--corpus", corpus, "--out", tmp_path / "o",
                     "--lr", "inf", "--max-steps", "1")
    one_sentence_error(result, "lr")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


# ---------------------------------------------------------------------------------- shared fixtures
@pytest.fixture(scope="module")
def score_file(tiny_bert_dir, tiny_stsb_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("robust") / "scores.safetensors"
    result = cli("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--batch-size", 8,
                     "--max-batches", 2, "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def mask_file(score_file):
    out = score_file.with_name("mask.safetensors")
    assert cli("prune", "--scores", score_file, "--sparsity", 0.25, "--out", out).exit_code == 0
    return out


def blocked_parent(tmp_path):
    """An --out whose parent is a file: impossible to create, for root too."""
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile" / "out"


# ---------------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_outputs_get_the_permissions_a_normal_write_gives(tmp_path, umask, file_mode, dir_mode):
    from sparsecse.artifacts.files import atomic_dir, atomic_file, save_tensors

    old = os.umask(umask)
    try:
        with atomic_file(tmp_path / "f.txt") as tmp:
            tmp.write_text("x")
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "inner.txt").write_text("y")
        save_tensors(tmp_path / "t.safetensors", {"a": torch.zeros(2)}, {"kind": "test"})
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "f.txt") == file_mode
    assert mode(tmp_path / "d") == dir_mode and mode(tmp_path / "d" / "inner.txt") == file_mode
    assert mode(tmp_path / "t.safetensors") == file_mode and mode(tmp_path / "t.json") == file_mode


# ---------------------------------------------------------------------------------- outputs vs inputs
def test_prune_refuses_to_write_over_its_score_file(score_file):
    before = score_file.read_bytes()
    result = cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", score_file, "--overwrite")
    one_sentence_error(result, "would overwrite the score file")
    assert score_file.read_bytes() == before


def test_train_refuses_out_equal_to_model(tiny_bert_dir, corpus):
    result = cli("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", tiny_bert_dir, "--overwrite")
    one_sentence_error(result, "would overwrite the model")
    assert (tiny_bert_dir / "config.json").is_file()


def test_shrink_and_eval_refuse_out_equal_to_an_input(tiny_bert_dir, mask_file, tmp_path):
    one_sentence_error(cli("shrink", "--model", tiny_bert_dir, "--mask", mask_file, "--out", tiny_bert_dir,
                               "--overwrite"), "would overwrite the model")
    one_sentence_error(cli("eval", "--model", tiny_bert_dir, "--mask", mask_file, "--out", mask_file,
                               "--overwrite"), "would overwrite the mask")


# ---------------------------------------------------------------------------------- impossible --out
def test_every_command_checks_its_destination_first(tiny_bert_dir, tiny_stsb_dir, score_file, mask_file, corpus,
                                                     tmp_path, monkeypatch):
    import sparsecse.evaluation as evaluation

    monkeypatch.setattr(evaluation, "evaluate", lambda **kw: pytest.fail("evaluated before checking --out"))
    bad = blocked_parent(tmp_path)
    commands = [
        ("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", bad),
        ("prune", "--scores", score_file, "--sparsity", 0.1, "--out", bad),
        ("eval", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", bad),
        ("shrink", "--model", tiny_bert_dir, "--mask", mask_file, "--out", bad),
        ("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", bad),
        ("rewind", "--mask", mask_file, "--corpus", corpus, "--out", bad),
        ("sweep", "--model", tiny_bert_dir, "--sparsities", 0.1, "--data-dir", tiny_stsb_dir, "--out", bad),
    ]
    for args in commands:
        one_sentence_error(cli(*args), "is a file, not a directory")
    assert {p.name for p in tmp_path.iterdir()} == {"afile"}  # the corpus fixture lives in its own directory


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only directories")
def test_read_only_parent_is_refused(tmp_path):
    from sparsecse.artifacts.destinations import check_destination

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(SparseCSEError, match="not writable"):
        check_destination(locked / "out")


# ---------------------------------------------------------------------------------- JSON, sidecars, heat maps
def test_json_never_contains_bare_nan(tmp_path):
    from sparsecse.artifacts.files import dumps_json, write_json

    obj = {"a": float("nan"), "b": [1.0, float("inf")], "c": torch.tensor(float("nan")), "d": 2.5}
    assert json.loads(dumps_json(obj)) == {"a": None, "b": [1.0, None], "c": None, "d": 2.5}
    write_json(tmp_path / "x.json", obj)
    assert "NaN" not in (tmp_path / "x.json").read_text()


def test_eval_json_output_is_strict_json(tiny_bert_dir, tmp_path, monkeypatch):
    import sparsecse.evaluation as evaluation

    fake = {"model": "m", "pooling": "mean", "tasks": ["STSBenchmark"], "scores": {"STSBenchmark": float("nan")},
            "settings": {"data_dir": "d", "sts_aggregation": "all"}, "timing": {"total_s": 1.0}}
    monkeypatch.setattr(evaluation, "evaluate", lambda **kw: fake)
    result = cli("eval", "--model", tiny_bert_dir, "--json", "--out", tmp_path / "e.json")
    assert result.exit_code == 0, result.output
    strict = lambda text: json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))  # noqa: E731
    assert strict(result.output.splitlines()[0])["scores"]["STSBenchmark"] is None
    assert strict((tmp_path / "e.json").read_text())["scores"]["STSBenchmark"] is None


def test_an_existing_sidecar_is_not_replaced_without_overwrite(score_file, tmp_path):
    side = tmp_path / "m.json"
    side.write_text("my notes")
    result = cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", tmp_path / "m.safetensors")
    one_sentence_error(result, "m.json", "--overwrite")
    assert side.read_text() == "my notes" and not (tmp_path / "m.safetensors").exists()
    ok = cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", tmp_path / "m.safetensors",
                 "--overwrite")
    assert ok.exit_code == 0 and json.loads(side.read_text())["kind"] == "mask"


def test_heatmap_checked_before_the_mask_is_written(score_file, tmp_path):
    out = tmp_path / "m.safetensors"
    one_sentence_error(cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", out,
                               "--heatmap", tmp_path / "x.txt"), "--heatmap", ".png")
    assert not out.exists()
    (tmp_path / "h.png").write_bytes(b"precious")
    one_sentence_error(cli("prune", "--scores", score_file, "--sparsity", 0.1, "--out", out,
                               "--heatmap", tmp_path / "h.png"), "already exists")
    assert (tmp_path / "h.png").read_bytes() == b"precious" and not out.exists()


# ---------------------------------------------------------------------------------- score files
@pytest.mark.parametrize("damage, fragment", [
    (lambda t: {k: v[:0] for k, v in t.items()}, "holds no scores"),
    (lambda t: {**t, "head_grad_align": t["head_grad_align"].clone().fill_(float("nan"))}, "non-finite"),
    (lambda t: {**t, "neuron_grad_uniform": t["neuron_grad_uniform"].to(torch.int64)}, "int64"),
    (lambda t: {**t, "head_grad_uniform": t["head_grad_uniform"][:, :, :2]}, "shapes disagree"),
    (lambda t: {**t, "neuron_grad_align": t["neuron_grad_align"][0]}, "dimensions"),
])
def test_score_files_are_validated_on_load(score_file, tmp_path, damage, fragment):
    from safetensors.torch import save_file

    from sparsecse.artifacts.files import MANIFEST_KEY, load_tensors

    tensors, manifest = load_tensors(score_file)
    bad = tmp_path / "bad.safetensors"
    save_file({k: v.contiguous() for k, v in damage(tensors).items()}, str(bad),
              metadata={MANIFEST_KEY: json.dumps(manifest)})
    one_sentence_error(cli("prune", "--scores", bad, "--sparsity", 0.1, "--out", tmp_path / "m.safetensors"),
                       fragment)
    assert not (tmp_path / "m.safetensors").exists()


# ---------------------------------------------------------------------------------- devices
@pytest.mark.parametrize("device", ["foo", "cuda", "cuda:7"])
def test_bad_device_is_one_sentence_in_every_command(tiny_bert_dir, tiny_stsb_dir, mask_file, corpus, tmp_path,
                                                     device):
    tmp_path = tmp_path / "outputs"
    tmp_path.mkdir()
    if device != "foo" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    commands = [
        ("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", tmp_path / "s.safetensors"),
        ("eval", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir),
        ("shrink", "--model", tiny_bert_dir, "--mask", mask_file, "--out", tmp_path / "small"),
        ("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", tmp_path / "t"),
        ("rewind", "--mask", mask_file, "--corpus", corpus, "--out", tmp_path / "r"),
        ("sweep", "--model", tiny_bert_dir, "--sparsities", 0.1, "--out", tmp_path / "sw"),
    ]
    for args in commands:
        one_sentence_error(cli(*args, "--device", device), repr(device))
    assert list(tmp_path.iterdir()) == []


def test_bad_device_refused_by_the_python_api(tiny_bert_dir, corpus, tmp_path):
    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.training import train

    with pytest.raises(SparseCSEError, match="Unknown device"):
        SentenceEncoder.load(tiny_bert_dir, device="foo")
    with pytest.raises(SparseCSEError, match="Unknown device"):
        train(tiny_bert_dir, corpus, tmp_path / "t", config=TrainingConfig(device="foo"))


# ---------------------------------------------------------------------------------- precision
def test_auto_precision_follows_the_hardware(monkeypatch):
    import sparsecse.modeling.encoder as enc

    assert enc.cpu_has_native_bf16("flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n")
    assert enc.cpu_has_native_bf16("flags\t\t: fpu amx_bf16\n")
    assert enc.cpu_has_native_bf16("Features\t: fp asimd bf16 i8mm\n")  # ARM
    assert not enc.cpu_has_native_bf16("flags\t\t: fpu sse avx2 avx512f\n")
    monkeypatch.setattr(enc, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert enc.resolve_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(enc, "cpu_has_native_bf16", lambda cpuinfo=None: True)
    assert enc.resolve_precision("auto", "cpu") == "bf16"
    assert enc.resolve_precision("fp16", "cpu") == "fp16"
    with pytest.raises(SparseCSEError, match="Unknown precision"):
        enc.resolve_precision("int8", "cpu")


def test_eval_records_what_auto_precision_chose(tiny_bert_dir, tiny_stsb_dir, monkeypatch):
    import sparsecse.modeling.encoder as enc
    from sparsecse.evaluation import evaluate

    monkeypatch.setattr(enc, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    result = evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="STSBenchmark", data_dir=tiny_stsb_dir,
        precision="auto", device="cpu", align_uniform=False))
    assert result["settings"]["precision"] == "fp32"


# ---------------------------------------------------------------------------------- models and masks
def test_model_directory_without_tokenizer_is_refused(tiny_bert_dir, tiny_stsb_dir, tmp_path):
    import shutil

    from sparsecse.modeling.encoder import TOKENIZER_FILES

    bare = tmp_path / "bare"
    shutil.copytree(tiny_bert_dir, bare)
    for name in os.listdir(bare):
        if name in TOKENIZER_FILES or "token" in name:
            (bare / name).unlink()
    one_sentence_error(cli("eval", "--model", bare, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark"),
                       "no tokenizer files")


def test_shrink_and_eval_take_the_model_from_the_mask(tiny_bert_dir, tiny_stsb_dir, mask_file, tmp_path):
    result = cli("shrink", "--mask", mask_file, "--out", tmp_path / "small", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lineage"]["shrunk_from"] == str(tiny_bert_dir)
    result = cli("eval", "--mask", mask_file, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark", "--json",
                     "--no-align-uniform", "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == str(tiny_bert_dir)


def test_a_mask_whose_model_is_gone_is_refused(mask_file, tmp_path):
    from sparsecse.pruning.masks import Mask

    mask = Mask.load(mask_file)
    mask.manifest["model"] = str(tmp_path / "gone")
    moved = tmp_path / "moved.safetensors"
    mask.save(moved)
    one_sentence_error(cli("shrink", "--mask", moved, "--out", tmp_path / "small"), "no longer exists",
                       "--model")
    mask.manifest.pop("model")
    mask.save(moved, overwrite=True)
    one_sentence_error(cli("shrink", "--mask", moved, "--out", tmp_path / "small"), "--model")


def test_eval_refuses_an_empty_task_name():
    one_sentence_error(cli("eval", "--tasks", "STS12,,STS13"), "empty item")


# ---------------------------------------------------------------------------------- training runs
def test_failed_check_in_train_leaves_no_partial_directory(tiny_bert_dir, corpus, tmp_path):
    from sparsecse.training import train

    out = tmp_path / "t"
    with pytest.raises(SparseCSEError, match="fewer than one batch"):  # the corpus holds 160 sentences
        train(tiny_bert_dir, corpus, out, config=TrainingConfig(batch_size=256, max_steps=2, eval_steps=0,
            show_progress=False, device="cpu"))
    assert not out.exists() and not (tmp_path / "t.partial").exists()


def test_weights_that_become_non_finite_are_never_saved(tiny_bert_dir, corpus, tmp_path):
    from sparsecse.training import train

    out = tmp_path / "t"  # 1e39 is a finite float64 but overflows float32 weights in one step
    with pytest.raises(SparseCSEError, match="weights became non-finite"):
        train(tiny_bert_dir, corpus, out, config=TrainingConfig(batch_size=8, lr=1e39, max_steps=1, eval_steps=0,
            show_progress=False, device="cpu"))
    assert not out.exists() and not (tmp_path / "t.partial").exists()


def test_interrupt_names_resume_when_a_checkpoint_is_kept(tmp_path):
    from sparsecse.training.api import _after_failure
    from sparsecse.training.rundir import RunDir

    run_dir = RunDir(tmp_path / "out")
    run_dir.path.mkdir()
    with pytest.raises(KeyboardInterrupt, match="nothing to resume.*run the same command again"):
        _after_failure(run_dir, True, KeyboardInterrupt())  # no checkpoint yet: nothing worth keeping
    assert not run_dir.path.exists()
    run_dir.path.mkdir()
    run_dir.write_checkpoint(5, lambda tmp: (tmp / "state.txt").write_text("x"))
    with pytest.raises(KeyboardInterrupt, match="--resume"):
        _after_failure(run_dir, True, KeyboardInterrupt())
    assert run_dir.latest_checkpoint() is not None


def test_cli_interrupt_message_comes_from_the_command(monkeypatch, tiny_bert_dir, tmp_path):
    import sparsecse.evaluation as evaluation

    def interrupted(**kw):
        raise KeyboardInterrupt("Interrupted; the run so far is kept in X.partial: rerun with --resume")

    monkeypatch.setattr(evaluation, "evaluate", interrupted)
    result = cli("eval", "--model", tiny_bert_dir)
    assert result.exit_code == 130 and "--resume" in result.output and "nothing half-written" not in result.output


def test_rewind_checks_the_recorded_initial_checkpoint(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path):
    import shutil

    from sparsecse.pruning.masks import Mask
    from sparsecse.training import train
    from sparsecse.training.rewind import resolve_init

    init = tmp_path / "init"
    shutil.copytree(tiny_bert_dir, init)
    trained = train(init, corpus, tmp_path / "trained", config=TrainingConfig(batch_size=8, max_steps=1, eval_steps=0,
        show_progress=False, device="cpu", lr=1e-4)).out
    mask = Mask.full(2, 4, 48)
    mask.manifest = {"kind": "mask", "model": str(trained)}
    assert resolve_init(mask, None)[0] == str(init)
    (init / "config.json").write_text((init / "config.json").read_text() + "\n")  # changed after training
    with pytest.raises(SparseCSEError, match="has changed since"):
        resolve_init(mask, None)
    assert resolve_init(mask, str(init))[0] == str(init)  # --init: the user's explicit choice


# ---------------------------------------------------------------------------------- the command line
def test_help_does_not_cut_command_descriptions():
    from sparsecse.cli import COMMANDS

    result = cli("--help")
    commands = result.output.split("Commands:", 1)[1]
    assert result.exit_code == 0 and "..." not in commands
    flat = " ".join(commands.split())
    for name in COMMANDS:
        command = main.get_command(None, name)
        if command is not None:
            first = " ".join(command.help.split("\n\n")[0].split())
            assert first in flat, name


# one convention: each flag spelled and meant the same wherever it applies
FLAGS = {
    "train": {"--json", "--seed", "--device", "--quiet", "--overwrite"},
    "rewind": {"--json", "--seed", "--device", "--quiet", "--overwrite"},
    "score": {"--json", "--seed", "--device", "--quiet", "--overwrite"},
    "eval": {"--json", "--seed", "--device", "--quiet", "--overwrite", "--precision", "--fasttest"},
    "sweep": {"--json", "--seed", "--device", "--quiet", "--overwrite", "--precision", "--fasttest"},
    "shrink": {"--json", "--device", "--overwrite"},
    "prune": {"--json", "--overwrite"},
    "objectives": {"--json"},
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_sibling_commands_share_their_flags(name):
    from sparsecse.cli import options

    command = main.get_command(None, name)
    opts = {o: p for p in command.params for o in p.opts}
    assert FLAGS[name] <= set(opts), FLAGS[name] - set(opts)
    shared = {"--json": options.json_option, "--seed": options.seed_option, "--device": options.device_option,
              "--quiet": options.quiet_option, "--overwrite": options.overwrite_option,
              "--precision": options.precision_option, "--fasttest": options.fasttest_option}
    for flag in FLAGS[name]:
        reference = shared[flag](lambda: None).__click_params__[0]
        assert opts[flag].help == reference.help, (name, flag)


# ---------------------------------------------------------------------------------- sweeps
class SlowEvaluator:
    def __call__(self, model, mask, tasks, data_dir, seed, **options):
        return {"scores": {t: 50.0 for t in tasks}}


def test_sweep_checks_rewinding_settings_before_scoring(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path):
    out = tmp_path / "sweep"
    base = ("sweep", "--model", tiny_bert_dir, "--sparsities", 0.25, "--lambdas", 0.5, "--data-dir", tiny_stsb_dir,
            "--out", out)
    one_sentence_error(cli(*base, "--rewind", "--corpus", corpus, "--objective-args", "temperature=0"),
                       "temperature must be positive")
    one_sentence_error(cli(*base, "--rewind", "--corpus", corpus, "--objective", "nope"), "Unknown objective")
    one_sentence_error(cli(*base, "--rewind", "--corpus", tmp_path / "none.txt"), "none.txt")
    one_sentence_error(cli(*base, "--rewind", "--corpus", corpus, "--lr", "nan"), "lr")
    one_sentence_error(cli(*base, "--lr", "1e-5"), "--lr only apply with --rewind")
    one_sentence_error(cli(*base, "--batch-size", 8), "--score-batch-size")
    one_sentence_error(cli(*base, "--corpus", corpus, "--no-rewind-dense"), "--corpus", "--rewind-dense")
    assert not out.exists()


def quick_sweep(data) -> dict:
    """``sweep``'s keywords for a quick sweep of the tiny model: one scoring batch, STS-B only, no report."""
    return dict(score=scoring(data, max_batches=1), evaluate=evaluation(data),
                options=SweepOptions(show_progress=False, make_report=False))


def _sweep_in_subprocess(model, data, out, barrier, name):
    import subprocess
    import sys

    code = f"""
import json, os, sys, time
import torch
torch.set_num_threads(1)
from sparsecse import EvaluationConfig, ScoringConfig, SweepOptions
from sparsecse.sweeps import run as sweeping
class Slow:
    def __call__(self, model, mask, tasks, data_dir, seed, **options):
        time.sleep(1.0)
        return {{"scores": {{t: 50.0 for t in tasks}}}}
sweeping.run_evaluation = Slow()
open({str(barrier)!r} + ".{name}", "w").close()
while len([f for f in os.listdir({str(barrier.parent)!r}) if f.startswith("ready.")]) < 2:
    time.sleep(0.05)
r = sweeping.sweep({str(model)!r}, "0.1,0.2,0.3,0.4", "0.5", {str(out)!r},
                   score=ScoringConfig(data_dir={str(data)!r}, batch_size=8, max_batches=1),
                   evaluate=EvaluationConfig(tasks="STSBenchmark", data_dir={str(data)!r}, device="cpu"),
                   options=SweepOptions(show_progress=False, make_report=False))
print(json.dumps({{"computed": r.computed, "reused": r.reused, "busy": r.busy}}))
"""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"})


def test_a_sweep_directory_being_created_by_another_process_is_waited_for(tmp_path):
    """The other process holds the sweep lock and has only its temporary file in ``out``: the directory is
    waited for, not refused as foreign (the race two processes splitting a sweep once lost)."""
    import threading

    from sparsecse.artifacts.locks import FileLock
    from sparsecse.sweeps.directory import open_sweep_dir

    out = tmp_path / "sweep"
    out.mkdir()
    print_ = {"model": "m", "scoring": {"seed": 0}}
    lock = FileLock(out / "sweep.json.lock")
    lock.wait()
    (out / ".sweep.json.partial").write_text("{")
    opened = {}

    def open_it():
        try:
            opened["state"] = open_sweep_dir(out, print_)
        except SparseCSEError as err:
            opened["error"] = err

    other = threading.Thread(target=open_it)
    other.start()
    other.join(timeout=1.0)
    assert other.is_alive() and not opened, "the second opener did not wait for the lock"
    (out / ".sweep.json.partial").unlink()
    (out / "sweep.json").write_text(json.dumps({"fingerprint": print_, "runs": ["first"]}))
    lock.release()
    other.join(timeout=30)
    assert opened.get("state", {}).get("runs") == ["first"], opened
    with pytest.raises(SparseCSEError, match="different model or scoring settings"):
        open_sweep_dir(out, {**print_, "model": "other"})
    assert open_sweep_dir(out, {**print_, "model": "other"}, overwrite=True)["runs"] == []
    assert sorted(p.name for p in out.iterdir()) == ["sweep.json"]


def test_two_processes_split_a_sweep(tiny_bert_dir, tiny_stsb_dir, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    barrier = tmp_path / "sync" / "ready"
    barrier.parent.mkdir()
    procs = [_sweep_in_subprocess(tiny_bert_dir, tiny_stsb_dir, out, barrier, n) for n in ("a", "b")]
    replies = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        replies.append(json.loads(stdout.strip().splitlines()[-1]))
    a, b = (set(r["computed"]) for r in replies)
    every = {"dense"} | {f"masked/s{s}-l0.5" for s in ("0.1", "0.2", "0.3", "0.4")}
    assert not a & b, "a point was computed twice"
    assert a | b | set(replies[0]["reused"]) | set(replies[1]["reused"]) == every
    assert a and b, "both processes took part"
    assert not list(out.rglob("*.lock"))
    assert len(json.loads((out / "sweep.json").read_text())["runs"]) == 2
    # a later run finds every point (the skipped ones were finished by the other process)
    from sparsecse.sweeps import run as sweeping

    monkeypatch.setattr(sweeping, "run_evaluation", SlowEvaluator())
    again = sweeping.sweep(tiny_bert_dir, "0.1,0.2,0.3,0.4", "0.5", out, **quick_sweep(tiny_stsb_dir))
    assert set(again.reused) == every and not again.computed


def test_stale_locks_are_taken_over(tmp_path):
    import socket
    import subprocess
    import sys
    import time

    from sparsecse.artifacts.locks import FileLock

    path = tmp_path / "p.json.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = socket.gethostname()
    cases = [({"pid": dead.pid, "host": here, "started": time.time()}, True),  # holder on this host died
             ({"pid": os.getppid(), "host": here, "started": time.time()}, False),  # alive
             ({"pid": 1, "host": "elsewhere", "started": time.time() - 2 * 86400}, True),  # too old
             ({"pid": 1, "host": "elsewhere", "started": time.time()}, False)]  # another machine, recent
    for holder, stale in cases:
        path.write_text(json.dumps(holder))
        lock = FileLock(path)
        assert lock.acquire() is stale, holder
        if stale:
            assert lock.holder()["pid"] == os.getpid()
            lock.release()
            assert not path.exists()
    path.unlink()


def test_sweep_never_keeps_non_finite_scores(tiny_bert_dir, tiny_stsb_dir, tmp_path, monkeypatch):
    from sparsecse.sweeps import run as sweeping

    monkeypatch.setattr(sweeping, "run_evaluation", lambda *a, **k: {"scores": {"STSBenchmark": float("nan")}})
    out = tmp_path / "sweep"
    kw = quick_sweep(tiny_stsb_dir)
    with pytest.raises(SparseCSEError, match="non-finite"):
        sweeping.sweep(tiny_bert_dir, "0.25", "0.5", out, **kw)
    assert not (out / "points" / "dense.json").exists() and not list(out.rglob("*.lock"))
    # a point file with NaN (as an older version wrote) is evaluated again
    (out / "points").mkdir(exist_ok=True)
    (out / "points" / "dense.json").write_text('{"variant": "dense", "scores": {"STSBenchmark": NaN}}')
    monkeypatch.setattr(sweeping, "run_evaluation", SlowEvaluator())
    result = sweeping.sweep(tiny_bert_dir, "0.25", "0.5", out, **kw)
    assert "dense" in result.computed
    assert json.loads((out / "points" / "dense.json").read_text())["scores"]["STSBenchmark"] == 50.0


def test_non_finite_rewound_weights_are_discarded(tmp_path):
    from safetensors.torch import save_file

    from sparsecse.sweeps.points import _finite_weights

    save_file({"w": torch.ones(3)}, str(tmp_path / "model.safetensors"))
    assert _finite_weights(tmp_path)
    save_file({"w": torch.tensor([1.0, float("nan")])}, str(tmp_path / "model.safetensors"))
    assert not _finite_weights(tmp_path)


def test_report_on_a_damaged_sweep_is_one_sentence(tiny_bert_dir, tiny_stsb_dir, tmp_path, monkeypatch):
    from sparsecse.sweeps import run as sweeping

    monkeypatch.setattr(sweeping, "run_evaluation", SlowEvaluator())
    out = tmp_path / "sweep"
    sweeping.sweep(tiny_bert_dir, "0.25", "0.5", out, **quick_sweep(tiny_stsb_dir))
    point = out / "points" / "masked" / "s0.25-l0.5.json"
    good = point.read_text()
    point.write_text(good[: len(good) // 2])
    one_sentence_error(cli("report", out, "--no-figures"), "s0.25-l0.5.json", "delete it")
    point.write_text(good)
    (out / "sweep.json").write_bytes(b"\x00\xff garbage")
    one_sentence_error(cli("report", out, "--no-figures"), "sweep.json")


def test_a_failed_rewind_leaves_no_stub_settings(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path, monkeypatch):
    from sparsecse.sweeps import run as sweeping

    def refused(*args, **kw):
        raise SparseCSEError("The corpus has 40 sentences, fewer than one batch of 64.")

    monkeypatch.setattr(sweeping, "run_evaluation", SlowEvaluator())
    monkeypatch.setattr(sweeping, "run_rewind", refused)
    out = tmp_path / "sweep"
    with pytest.raises(SparseCSEError, match="fewer than one batch"):
        sweeping.sweep(tiny_bert_dir, "0.25", "0.5", out, rewind=RewindConfig(corpus=corpus),
                       **quick_sweep(tiny_stsb_dir))
    assert not (out / "rewound").exists() or not any((out / "rewound").iterdir())
    assert not list(out.rglob("*.lock"))
