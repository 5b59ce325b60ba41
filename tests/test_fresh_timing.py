"""Timings in a fresh process (sparsecse.targets.fresh): the worker loads model directories and times them, apart
from the process that built them; the interleaved rounds let the models take turns a few requests at a time, the order rotating."""

import os

import numpy as np
import pytest

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.targets import fresh
from sparsecse.targets.engines import to_time
from sparsecse.targets.spec import Shape
from sparsecse.targets.timing import ROUNDS, measure
from tests.helpers import worker_exit, worker_pid
from tests.tiny import make_tiny_model_dir

SENTENCES = ["a short one", "a somewhat longer sentence to embed here", "three words here", "and one more"]


@pytest.fixture
def in_fresh_process(monkeypatch):
    monkeypatch.setenv(fresh.ENV, "fresh")


def test_models_on_disk_run_in_another_process_and_embed_as_here(tmp_path, in_fresh_process):
    a = make_tiny_model_dir(tmp_path / "a", "bert", seed=1)
    pid, embeddings = fresh.run(worker_pid, {"a": fresh.OnDisk(str(a))}, SENTENCES)
    assert pid != os.getpid()
    np.testing.assert_allclose(embeddings["a"], SentenceEncoder.load(str(a), device="cpu").encode(SENTENCES),
                               atol=1e-5)
    again, _ = fresh.run(worker_pid, {"a": fresh.OnDisk(str(a))}, SENTENCES)
    assert again not in (pid, os.getpid())  # a new process for every timing


def test_a_directory_written_again_is_loaded_again(tmp_path, in_fresh_process):
    place = tmp_path / "probe"
    make_tiny_model_dir(place, "bert", seed=1)
    _, first = fresh.run(worker_pid, {"p": fresh.OnDisk(str(place))}, SENTENCES)
    make_tiny_model_dir(place, "bert", seed=2)
    _, second = fresh.run(worker_pid, {"p": fresh.OnDisk(str(place))}, SENTENCES)
    np.testing.assert_allclose(second["p"], SentenceEncoder.load(str(place), device="cpu").encode(SENTENCES),
                               atol=1e-5)
    assert not np.allclose(first["p"], second["p"])


def test_a_target_timing_in_a_fresh_process_gives_every_round(tmp_path, in_fresh_process):
    big = make_tiny_model_dir(tmp_path / "big", "bert", layers=2, seed=1)
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, seed=2)
    reference, candidate = to_time(str(big), "torch-fp32"), to_time(str(small), "torch-fp32")
    assert isinstance(reference, fresh.OnDisk) and reference.path == str(big.resolve())
    timing = measure(reference, {"small": candidate}, SENTENCES * 8, Shape("throughput", 8, 1))["small"]
    assert timing.rounds == ROUNDS and len(timing.ratios) == ROUNDS
    assert all(r > 0 for r in timing.ratios) and timing.figure > 0 and timing.reference_figure > 0


def test_models_already_loaded_are_timed_here(tmp_path, monkeypatch):
    monkeypatch.setenv(fresh.ENV, "fresh")
    encoder = SentenceEncoder.load(str(make_tiny_model_dir(tmp_path / "m", "bert")), device="cpu")
    pid, _ = fresh.run(worker_pid, {"m": encoder}, SENTENCES)
    assert pid == os.getpid()


def test_an_unknown_timing_mode_is_refused_in_one_sentence(monkeypatch):
    monkeypatch.setenv(fresh.ENV, "sideways")
    with pytest.raises(SparseCSEError, match=r"^SPARSECSE_TIMING='sideways' is not a timing mode; use fresh or "
                                             r"inline\.$"):
        fresh.mode()


def test_the_models_take_turns_a_few_requests_at_a_time_and_the_order_rotates(monkeypatch):
    calls = []
    monkeypatch.setattr(speed, "clock", lambda encoder, request, batch: calls.append((encoder, request[0])) or 1.0)
    requests = [["r1"], ["r2"], ["r3"]]
    seconds = speed.interleaved_rounds({"a": "A", "b": "B"}, requests, 1, 2, turn=2)
    timed = calls[2:]  # after one warm-up request each
    assert timed == [("A", "r1"), ("A", "r2"), ("B", "r1"), ("B", "r2"), ("B", "r3"), ("A", "r3"),
                     ("B", "r1"), ("B", "r2"), ("A", "r1"), ("A", "r2"), ("A", "r3"), ("B", "r3")]
    assert seconds["a"].shape == (2, 3)
    assert speed.turn_requests(1) == speed.TURN_SENTENCES and speed.turn_requests(128) == 1


def test_models_served_alone_run_in_processes_of_their_own_kept_for_the_whole_timing(tmp_path, in_fresh_process):
    big = make_tiny_model_dir(tmp_path / "big", "bert", layers=2, seed=1)
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, seed=2)
    requests = [[s] for s in SENTENCES]
    models = {"big": fresh.OnDisk(str(big)), "small": fresh.OnDisk(str(small))}
    with fresh.serving(models, requests, 1, 1) as servers:
        first = servers.time("small", range(2))
        again = servers.time("big", [3, 0, 1])
        processes = dict(servers.processes)
        assert len({p.pid for p in processes.values()} | {os.getpid()}) == 3 and all(
            p.is_alive() for p in processes.values())
    assert len(first) == 2 and len(again) == 3 and all(t > 0 for t in first + again)
    assert not any(p.is_alive() for p in processes.values())  # ended with the block


def test_a_serving_process_that_cannot_load_its_model_is_reported_in_one_sentence(tmp_path, in_fresh_process):
    broken = tmp_path / "broken"
    broken.mkdir()
    with pytest.raises(SparseCSEError, match=r"^The timing process of broken stopped before it finished"):
        with fresh.serving({"broken": fresh.OnDisk(str(broken))}, [["a"]], 1, 1):
            pass


def test_a_worker_that_dies_is_reported_in_one_sentence_and_the_next_timing_runs(tmp_path, in_fresh_process):
    a = fresh.OnDisk(str(make_tiny_model_dir(tmp_path / "a", "bert", seed=1)))
    with pytest.raises(SparseCSEError, match=r"^The timing process stopped before it finished .*run the command again"):
        fresh.run(worker_exit, {"a": a})
    pid, _ = fresh.run(worker_pid, {"a": a}, SENTENCES)
    assert pid != os.getpid()
