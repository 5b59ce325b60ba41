"""--resume on a run directory: a partial directory with nothing to resume does not block, a damaged checkpoint
is refused in one sentence."""

from __future__ import annotations


import pytest

from tests.cli_checks import assert_refused, run_cli
from tests.helpers import random_sentences


@pytest.fixture
def small_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(random_sentences(40)) + "\n")
    return path


def test_a_partial_directory_with_nothing_to_resume_does_not_block(tmp_path, tiny_bert_dir, small_corpus):
    out = tmp_path / "out"
    partial = tmp_path / "out.partial"
    partial.mkdir()
    (partial / ".run.json.lock").write_text("{}")  # what a kill during its creation used to leave
    args = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--out", out, "--max-steps", "2",
            "--batch-size", "8", "--eval-steps", "0", "--quiet"]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert out.is_dir() and not partial.exists()
    partial.mkdir()
    result = run_cli(*args[:-1], "--resume", "--overwrite", "--quiet")
    assert result.exit_code == 0 and "Nothing to resume" in result.output, result.output


@pytest.mark.parametrize("damage", ["truncated tensors", "blank state", "blank skeleton"])
def test_a_damaged_checkpoint_on_resume_is_one_sentence(tmp_path, tiny_bert_dir, small_corpus, monkeypatch, damage):
    from sparsecse.training import loop

    out = tmp_path / "out"
    args = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--out", out, "--max-steps", "4",
            "--save-steps", "2", "--batch-size", "8", "--eval-steps", "0", "--quiet"]
    original = loop.Trainer._train_step

    def stop_at_three(self):
        if self.step == 2 and self.run_dir.latest_checkpoint() is not None:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(loop.Trainer, "_train_step", stop_at_three)
    result = run_cli(*args)
    assert result.exit_code == 130 and "checkpoint at step 2" in result.output and "--resume" in result.output
    monkeypatch.setattr(loop.Trainer, "_train_step", original)
    checkpoint = tmp_path / "out.partial" / "checkpoints" / "step-000002"
    if damage == "truncated tensors":
        f = checkpoint / "encoder.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "blank state":
        (checkpoint / "trainer_state.json").write_text("")
    else:
        (checkpoint / "optimizer.json").write_text("\n")
    result = run_cli(*args, "--resume")
    assert_refused(result, f"Cannot resume from {checkpoint}", "--overwrite")
    assert run_cli(*args, "--overwrite").exit_code == 0 and out.is_dir()
