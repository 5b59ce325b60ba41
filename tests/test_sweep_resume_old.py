"""A sweep directory written before the restructuring (by commit f87e056, on the conftest's tiny BERT and
STS-B files) is resumed by the current code without recomputing a point or the scores.

tests/fixtures/sweep_f87e056 is that directory as the old code wrote it (dense, 2x2 masked and 2 budget
points, stand-in evaluation scores); only the fingerprint's two absolute paths (model and data directory,
which the old run had under /tmp) are pointed at this run's copies before resuming, and the model's sha256 is this
run's: the tiny model's config.json records the installed transformers version, so its hash is the version's, not
the layout's (it differed on a machine with another transformers)."""

import json
import shutil
from pathlib import Path

import pytest

from sparsecse.artifacts.files import hash_path
from sparsecse.sweeps import prepared, run as sweep_mod
from sparsecse.sweeps.config import SweepOptions
from sparsecse.sweeps.run import sweep
from tests.helpers import evaluation, scoring

FIXTURE = Path(__file__).parent / "fixtures" / "sweep_f87e056"


def _refuse(*args, **kw):
    raise AssertionError("the resumed sweep recomputed something")


@pytest.fixture
def old_sweep(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    out = tmp_path / "sweep"
    shutil.copytree(FIXTURE, out)
    state = json.loads((out / "sweep.json").read_text())
    state["fingerprint"]["model"] = str(tiny_bert_dir)
    state["fingerprint"]["model_sha256"] = hash_path(tiny_bert_dir)
    state["fingerprint"]["data_dir"] = str(Path(tiny_stsb_dir).resolve())
    (out / "sweep.json").write_text(json.dumps(state, indent=2))
    return out


def test_an_old_sweep_directory_resumes_without_recomputing(old_sweep, tiny_bert_dir, tiny_stsb_dir, monkeypatch):
    monkeypatch.setattr(sweep_mod, "run_evaluation", _refuse)
    monkeypatch.setattr(prepared, "score", _refuse)  # what computes a sweep's scores
    points_before = {p: p.read_bytes() for p in (old_sweep / "points").rglob("*.json")}

    result = sweep(tiny_bert_dir, sparsities="0.25,0.5", lambdas="0.25,0.75", keep_flops="0.7", out=old_sweep,
                   score=scoring(tiny_stsb_dir), evaluate=evaluation(tiny_stsb_dir, tasks="STSBenchmark,STS12"),
                   options=SweepOptions(show_progress=False, make_report=False))

    assert result.computed == []
    assert sorted(result.reused) == ["budget/f0.7-l0.25", "budget/f0.7-l0.75", "dense", "masked/s0.25-l0.25",
                                     "masked/s0.25-l0.75", "masked/s0.5-l0.25", "masked/s0.5-l0.75"]
    assert {p: p.read_bytes() for p in (old_sweep / "points").rglob("*.json")} == points_before
