"""The training loop: learning, resume, atomic output, lineage, rewinding, bad input."""

import json
import random

import pytest
import torch
from safetensors.torch import load_file

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts
from sparsecse.pruning.masks import Mask
from sparsecse.objectives.simcse import SimCSE
from sparsecse.training import rewind, train
from sparsecse.training.rewind import resolve_init
from tests.tiny import WORDS, make_tiny_model_dir
from tests.helpers import random_sentences, quick, make_mask


def weights(model_dir):
    return load_file(str(model_dir / "model.safetensors"))


def test_training_lowers_the_loss(tiny_bert_dir, corpus, tmp_path):
    # mean pooling: a random tiny model's CLS vector barely depends on the sentence
    result = train(tiny_bert_dir, corpus, tmp_path / "out", pooling="mean", **quick(max_steps=30))
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert len(losses) == 30
    first, last = sum(losses[:6]) / 6, sum(losses[-6:]) / 6
    assert last < first / 2, (first, last)


def test_output_directory_is_a_model_with_manifest_log_and_lineage(tiny_bert_dir, corpus, tiny_stsb_dir, tmp_path):
    out = tmp_path / "out"
    result = train(tiny_bert_dir, corpus, out, **quick(eval_steps=3, data_dir=tiny_stsb_dir))
    assert result.out == out and not (tmp_path / "out.partial").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "train_model"
    assert manifest["params"]["batch_size"] == 8 and manifest["params"]["recipe"] == "simcse-bert-base"
    assert manifest["inputs"]["corpus"]["sha256"]
    assert [h["step"] for h in manifest["history"]] == [3, 6]
    assert result.best_step in (3, 6) and result.best_score == max(h["score"] for h in manifest["history"])
    # the stage's wall time covers its steps (and the evaluations and saving the steps' rate leaves out)
    assert manifest["result"]["seconds"] == result.seconds >= result.steps / result.steps_per_second - 1e-3
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4, 5, 6]
    config = json.loads((out / "sparsecse_config.json").read_text())
    assert config["lineage"]["init"] == str(tiny_bert_dir) and config["lineage"]["stage"] == "train"
    # the MLP head is train-only: the saved model has exactly the backbone's weights
    assert set(weights(out)) == set(weights(tiny_bert_dir))
    reloaded = SentenceEncoder.load(out)
    assert reloaded.pooling == "cls_before_pooler"
    assert reloaded.encode(["a man is playing"]).shape == (1, 32)


def test_best_checkpoint_is_the_one_saved(tiny_bert_dir, corpus, tiny_stsb_dir, tmp_path):
    from sparsecse.training.dev_eval import stsb_dev_evaluator

    result = train(tiny_bert_dir, corpus, tmp_path / "out", **quick(eval_steps=2, data_dir=tiny_stsb_dir))
    # the same device and precision as the evaluation during training: the same weights give the same floats
    reloaded = SentenceEncoder.load(tmp_path / "out", device="cpu")
    assert stsb_dev_evaluator(tiny_stsb_dir)(reloaded) == pytest.approx(result.best_score, abs=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (mixed-precision training)")
def test_best_score_under_mixed_precision_is_the_saved_models_fp32_score(tiny_bert_dir, corpus, tiny_stsb_dir,
                                                                        tmp_path):
    """Training runs under bf16/fp16 autocast on a GPU; the dev evaluation must not, so a reload
    (fp32, same GPU) reproduces the recorded best score."""
    from sparsecse.training.dev_eval import stsb_dev_evaluator

    result = train(tiny_bert_dir, corpus, tmp_path / "out", pooling="mean",
                   **quick(eval_steps=2, data_dir=tiny_stsb_dir, device="cuda"))
    reloaded = SentenceEncoder.load(tmp_path / "out", device="cuda")
    assert stsb_dev_evaluator(tiny_stsb_dir)(reloaded) == pytest.approx(result.best_score, abs=1e-6)


class Killed(Exception):
    pass


def test_killed_and_resumed_run_equals_an_uninterrupted_run(tiny_bert_dir, corpus, tiny_stsb_dir, tmp_path,
                                                            monkeypatch):
    settings = dict(max_steps=10, eval_steps=4, save_steps=3, data_dir=tiny_stsb_dir, seed=3)
    reference = train(tiny_bert_dir, corpus, tmp_path / "reference", **quick(**settings))

    calls, forward = [], SimCSE.forward

    def dies_at_step_8(self, batch):
        calls.append(1)
        if len(calls) == 8:
            raise Killed()
        return forward(self, batch)

    monkeypatch.setattr(SimCSE, "forward", dies_at_step_8)
    with pytest.raises(Killed):
        train(tiny_bert_dir, corpus, tmp_path / "run", **quick(**settings))
    monkeypatch.setattr(SimCSE, "forward", forward)
    partial = tmp_path / "run.partial"
    assert not (tmp_path / "run").exists()  # nothing half-written in OUT
    assert [p.name for p in (partial / "checkpoints").iterdir()] == ["step-000006"]

    with pytest.raises(SparseCSEError, match="--resume"):
        train(tiny_bert_dir, corpus, tmp_path / "run", **quick(**settings))
    resumed = train(tiny_bert_dir, corpus, tmp_path / "run", **quick(resume=True, **settings))
    assert sorted(resumed.losses) == [7, 8, 9, 10]
    for step in resumed.losses:
        assert resumed.losses[step] == reference.losses[step]
    assert resumed.best_step == reference.best_step and resumed.history == reference.history
    expected, got = weights(tmp_path / "reference"), weights(tmp_path / "run")
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 11))


def test_resume_refuses_a_different_run(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    forward, calls = SimCSE.forward, []

    def killed(self, batch):  # after the step-2 checkpoint (a run killed before any is removed)
        if len(calls) == 2:
            raise Killed()
        calls.append(1)
        return forward(self, batch)

    monkeypatch.setattr(SimCSE, "forward", killed)
    with pytest.raises(Killed):
        train(tiny_bert_dir, corpus, tmp_path / "run", **quick(save_steps=2))
    monkeypatch.undo()
    with pytest.raises(SparseCSEError, match="different settings.*lr"):
        train(tiny_bert_dir, corpus, tmp_path / "run", **quick(resume=True, save_steps=2, lr=5e-4))


def test_finished_output_is_not_overwritten(tiny_bert_dir, corpus, tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(SparseCSEError, match="already exists"):
        train(tiny_bert_dir, corpus, tmp_path / "out", **quick())


def test_empty_corpus_is_refused(tiny_bert_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(SparseCSEError, match="holds no sentences"):
        train(tiny_bert_dir, empty, tmp_path / "out", **quick())


def test_missing_corpus_and_unknown_objective_fail_before_any_model_is_loaded(corpus, tmp_path):
    # the model path does not exist either: the corpus / objective must be what is reported
    with pytest.raises(SparseCSEError, match="corpus .* does not exist"):
        train(tmp_path / "no-model", tmp_path / "no-corpus.txt", tmp_path / "out")
    with pytest.raises(SparseCSEError, match="Unknown objective 'nope'"):
        train(tmp_path / "no-model", corpus, tmp_path / "out", objective="nope")
    with pytest.raises(SparseCSEError, match="corpus .* does not exist"):
        rewind(tmp_path / "no-mask.safetensors", tmp_path / "no-corpus.txt", tmp_path / "out")


def test_corpus_smaller_than_a_batch_is_refused(tiny_bert_dir, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("one sentence\nanother one\n")
    with pytest.raises(SparseCSEError, match="fewer than one batch"):
        train(tiny_bert_dir, small, tmp_path / "out", **quick())


def test_unknown_objective_lists_the_known_ones(tiny_bert_dir, corpus, tmp_path):
    with pytest.raises(SparseCSEError, match="Unknown objective 'nope'; known objectives: .*simcse"):
        train(tiny_bert_dir, corpus, tmp_path / "out", objective="nope", **quick())


def test_missing_dev_data_names_the_way_out(tiny_bert_dir, corpus, tmp_path):
    with pytest.raises(SparseCSEError, match="--eval-steps 0"):
        train(tiny_bert_dir, corpus, tmp_path / "out", **quick(eval_steps=5, data_dir=tmp_path / "nowhere"))


# ------------------------------------------------------------------------------------------ rewind
def expand(shrunk_model, mask, full_model):
    """Scatter a shrunk model's weights back into a full-size model; removed units get zero weights."""
    state = {k: v for k, v in shrunk_model.state_dict().items()}
    full_state = full_model.state_dict()
    for name in full_state:
        if name in state and state[name].shape == full_state[name].shape:
            full_state[name] = state[name].clone()
    full_model.load_state_dict(full_state)
    with torch.no_grad():
        for small, big, heads, neurons in zip(layer_parts(shrunk_model), layer_parts(full_model),
                                              mask.head_mask, mask.neuron_mask):
            d = big.head_dim
            rows = torch.cat([torch.arange(h * d, (h + 1) * d) for h in heads.nonzero().flatten().tolist()])
            for s, b in ((small.query, big.query), (small.key, big.key), (small.value, big.value)):
                b.weight.zero_(), b.bias.zero_()
                b.weight[rows], b.bias[rows] = s.weight, s.bias
            big.attn_out.weight.zero_()
            big.attn_out.weight[:, rows] = small.attn_out.weight
            kept = neurons.nonzero().flatten()
            big.ffn_in.weight.zero_(), big.ffn_in.bias.zero_(), big.ffn_out.weight.zero_()
            big.ffn_in.weight[kept], big.ffn_in.bias[kept] = small.ffn_in.weight, small.ffn_in.bias
            big.ffn_out.weight[:, kept] = small.ffn_out.weight
    return full_model


def test_rewind_trains_the_shrunk_model_and_pruned_units_stay_zero(tiny_bert_dir, corpus, tmp_path):
    trained = train(tiny_bert_dir, corpus, tmp_path / "trained", **quick(max_steps=3)).out
    mask_path, mask = make_mask(tmp_path, trained)
    assert resolve_init(mask, None) == (str(tiny_bert_dir), str(trained))  # the lineage's init

    result = rewind(mask_path, corpus, tmp_path / "rewound", **quick(max_steps=5))
    rewound = SentenceEncoder.load(result.out)
    assert rewound.model.config.heads_per_layer == [2, 3]
    assert [p.ffn_size for p in layer_parts(rewound.model)] == [28, 28]
    lineage = json.loads((result.out / "sparsecse_config.json").read_text())["lineage"]
    assert lineage["stage"] == "rewind" and lineage["init"] == str(tiny_bert_dir)
    assert lineage["parent"]["stage"] == "train"

    # Re-expanded to full size, the removed units hold zeros and change nothing: the full model with
    # the mask's gates, the full model without them and the shrunk model embed identically.
    full = SentenceEncoder.load(tiny_bert_dir)
    expand(rewound.model, mask, full.model)
    sentences = random_sentences(6, seed=5)
    shrunk_emb = torch.as_tensor(rewound.encode(sentences))
    plain_emb = torch.as_tensor(full.encode(sentences))
    with mask.apply(full.model):
        gated_emb = torch.as_tensor(full.encode(sentences))
    assert torch.allclose(shrunk_emb, gated_emb, atol=1e-5)
    assert torch.allclose(plain_emb, gated_emb, atol=1e-5)
    # and training moved the surviving weights away from the initial checkpoint
    assert not torch.allclose(shrunk_emb, torch.as_tensor(SentenceEncoder.load(tiny_bert_dir).encode(sentences)))


def test_rewind_starts_from_the_initial_weights(tiny_bert_dir, corpus, tmp_path):
    """With lr ~ 0 the rewound model is the init model shrunk, not the trained model shrunk."""
    from sparsecse.shrinking.surgery import shrink_encoder

    trained = train(tiny_bert_dir, corpus, tmp_path / "trained", **quick(max_steps=3, lr=1e-2)).out
    mask_path, mask = make_mask(tmp_path, trained)
    result = rewind(mask_path, corpus, tmp_path / "rewound", **quick(max_steps=1, lr=1e-30))
    expected = shrink_encoder(SentenceEncoder.load(tiny_bert_dir, device="cpu"), mask).model.state_dict()
    got = weights(result.out)
    assert all(torch.allclose(got[k], expected[k]) for k in got)


def test_rewind_refuses_a_mask_for_another_architecture(tiny_bert_dir, corpus, tmp_path):
    other = make_tiny_model_dir(tmp_path / "three_layers", layers=3)
    mask = Mask.full(3, 4, 48)
    mask.head_mask[0, 0] = False
    mask.manifest = {"model": str(other)}
    path = mask.save(tmp_path / "mask.safetensors")
    with pytest.raises(SparseCSEError, match="mask is for a model with 3 layers"):
        rewind(path, corpus, tmp_path / "out", init=tiny_bert_dir, **quick())


def test_rewind_needs_a_recorded_or_given_init(corpus, tmp_path):
    path = Mask.full(2, 4, 48).save(tmp_path / "mask.safetensors")
    with pytest.raises(SparseCSEError, match="pass --init"):
        rewind(path, corpus, tmp_path / "out", **quick())


# --------------------------------------------------------------------------------------------- CLI
def test_cli_train_and_rewind(tiny_bert_dir, corpus, tmp_path):
    from click.testing import CliRunner

    from sparsecse.cli import main

    runner = CliRunner()
    args = ["--corpus", str(corpus), "--batch-size", "8", "--max-steps", "2", "--eval-steps", "0", "--device", "cpu",
            "--json"]
    result = runner.invoke(main, ["train", "--model", str(tiny_bert_dir), "--out", str(tmp_path / "t"), *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["steps"] == 2
    mask_path, _ = make_mask(tmp_path, tmp_path / "t")
    result = runner.invoke(main, ["rewind", "--mask", str(mask_path), "--out", str(tmp_path / "r"), *args])
    assert result.exit_code == 0, result.output
    assert SentenceEncoder.load(tmp_path / "r").model.config.heads_per_layer == [2, 3]
    text = runner.invoke(main, ["train", "--model", str(tiny_bert_dir), "--out", str(tmp_path / "t2"), *args[:-1]])
    assert text.exit_code == 0, text.output  # no STS-B dev score measured: the report names the eval that gives it
    assert f"`sparsecse eval --model {tmp_path / 't2'} --tasks STSBenchmark --split dev`" in text.output


def test_cli_bad_input_is_one_sentence(tiny_bert_dir, tmp_path):
    from click.testing import CliRunner

    from sparsecse.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = CliRunner().invoke(main, ["train", "--model", str(tiny_bert_dir), "--corpus", str(empty),
                                       "--out", str(tmp_path / "out"), "--eval-steps", "0"])
    assert result.exit_code == 1
    assert "Error: The corpus" in result.output and "Traceback" not in result.output


def test_rewind_without_shrink_support_keeps_zeroed_units_at_zero(tmp_path, corpus):
    """DistilBERT cannot be shrunk: its pruned units are zeroed and must still be zero after training."""
    init = make_tiny_model_dir(tmp_path / "distil", arch="distilbert")
    mask_path, mask = make_mask(tmp_path, init)
    result = rewind(mask_path, corpus, tmp_path / "rewound", pooling="mean", **quick(max_steps=4, lr=1e-2))
    assert json.loads((result.out / "sparsecse_config.json").read_text())["lineage"]["removal"] == "zeroed"
    model = SentenceEncoder.load(result.out).model
    initial = SentenceEncoder.load(init).model
    for part, start, heads, neurons in zip(layer_parts(model), layer_parts(initial), mask.head_mask,
                                           mask.neuron_mask):
        rows = torch.cat([torch.arange(h * part.head_dim, (h + 1) * part.head_dim)
                          for h in (~heads).nonzero().flatten().tolist()])
        gone = (~neurons).nonzero().flatten()
        for proj in (part.query, part.key, part.value):
            assert torch.count_nonzero(proj.weight[rows]) == 0 and torch.count_nonzero(proj.bias[rows]) == 0
        assert torch.count_nonzero(part.attn_out.weight[:, rows]) == 0
        assert torch.count_nonzero(part.ffn_in.weight[gone]) == 0 and torch.count_nonzero(part.ffn_in.bias[gone]) == 0
        assert torch.count_nonzero(part.ffn_out.weight[:, gone]) == 0
        assert not torch.equal(part.ffn_in.weight, start.ffn_in.weight)  # the kept units did train


def test_tensorboard_logs_land_in_the_output(tiny_bert_dir, corpus, tmp_path):
    pytest.importorskip("tensorboard")
    result = train(tiny_bert_dir, corpus, tmp_path / "out", **quick(tensorboard=True, max_steps=2))
    assert any((result.out / "tensorboard").glob("events.out.tfevents.*"))


def test_figures_read_every_few_steps_as_on_a_gpu_log_every_step_and_stop_at_a_bad_loss(tiny_bert_dir, corpus,
                                                                                         tmp_path, monkeypatch):
    """The GPU's way (losses kept on the device, read every log_steps steps), run on the CPU: the same losses
    and a log line per step as reading every step; a non-finite loss still names its own step."""
    from sparsecse.training import loop

    every_step = train(tiny_bert_dir, corpus, tmp_path / "a", **quick(max_steps=7, save_steps=3))
    monkeypatch.setattr(loop.Trainer, "_read_every", lambda self: 4)
    deferred = train(tiny_bert_dir, corpus, tmp_path / "b", **quick(max_steps=7, save_steps=3))
    assert deferred.losses == every_step.losses and sorted(deferred.losses) == list(range(1, 8))
    lines = [json.loads(line) for line in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, 8)) and all(isinstance(r["loss"], float) for r in lines)

    forward, calls = SimCSE.forward, []

    def nan_from_step_5(self, batch):
        calls.append(1)
        out = forward(self, batch)
        return type(out)(out.loss * float("nan"), out.logs) if len(calls) >= 5 else out

    monkeypatch.setattr(SimCSE, "forward", nan_from_step_5)
    with pytest.raises(SparseCSEError, match=r"^The loss became nan at step 5; try a lower --lr\.$"):
        train(tiny_bert_dir, corpus, tmp_path / "c", **quick(max_steps=7, save_steps=0))


def test_two_trainings_in_one_process_may_use_different_precisions():
    """A budget stage's recovery trains in full precision, then the student stage in bf16, in one process: accelerate
    keeps one precision per process unless its state is reset (it raised 'AcceleratorState has already been
    initialized')."""
    from sparsecse.training.accelerator import make_accelerator

    assert make_accelerator("cpu", "no").mixed_precision == "no"
    assert make_accelerator("cpu", "bf16").mixed_precision == "bf16"
    assert make_accelerator("cpu", "no").mixed_precision == "no"


def test_patience_stops_training_once_the_dev_score_stops_rising(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    from sparsecse.training import api

    scripted = iter([50.0, 60.0, 60.05, 59.0, 70.0, 71.0])

    class ScriptedDev:  # the scores the evaluations get, in order
        def score(self, encoder):
            return next(scripted)

        def describe(self):
            return {"name": "scripted", "metric": "spearman"}

    monkeypatch.setattr(api, "checked_dev_set", lambda config: ScriptedDev())
    result = train(tiny_bert_dir, corpus, tmp_path / "out",
                   **quick(eval_steps=2, max_steps=12, patience=2, min_delta=0.1))
    # 60.05 is the best but not 0.1 above 60; with 59 after it, two evaluations have not beaten 60 by 0.1
    assert [h["step"] for h in result.history] == [2, 4, 6, 8]
    assert result.best_step == 6 and result.best_score == 60.05
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["params"]["stopped_early"] is True and manifest["params"]["steps_run_to"] == 8
    scripted = iter([50.0, 60.0, 61.0, 62.0, 63.0, 64.0])  # still rising: every step runs
    result = train(tiny_bert_dir, corpus, tmp_path / "rising",
                   **quick(eval_steps=2, max_steps=12, patience=2, min_delta=0.1))
    assert [h["step"] for h in result.history] == [2, 4, 6, 8, 10, 12] and result.best_step == 12
    with pytest.raises(SparseCSEError, match="patience stops training when the dev score stops rising"):
        train(tiny_bert_dir, corpus, tmp_path / "never", **quick(eval_steps=0, patience=2))
