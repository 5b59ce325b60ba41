"""benchmarks/gpu_compress.py's parts on the CPU: the utilisation sampler with a fake reader and clock, the stage
windows it reads from a run's times.jsonl, the steps per second from the stage summaries, and the refusal
without CUDA."""

import json

import pytest

from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield from load_benchmark("gpu_compress")


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_sampler_averages_each_stage_over_its_own_window(bench, tmp_path):
    clock, readings = FakeClock(), iter([10.0, None, 30.0, 50.0, 90.0, 70.0])
    times = tmp_path / "times.jsonl"
    sampler = bench.UtilizationSampler(lambda: next(readings), times_file=times, clock=clock)
    sampler.tick()  # t=100: 10 %
    clock.now = 101.0
    sampler.tick()  # no sample (the reader could not say)
    clock.now = 102.0
    sampler.tick()  # 30 %
    times.write_text(json.dumps({"stage": "budget", "seconds": 2.0, "finished": True}) + "\n")
    clock.now = 103.0
    sampler.tick()  # 50 %, and the budget stage ended: its window is [101, 103]
    clock.now = 106.0
    sampler.tick()  # 90 %
    with times.open("a") as f:
        f.write("not json\n")
        f.write(json.dumps({"stage": "student", "seconds": 3.0, "finished": True}) + "\n")
    clock.now = 107.0
    sampler.tick()  # 70 %, and the student stage ended: [104, 107]
    assert sampler.samples == [(100.0, 10.0), (102.0, 30.0), (103.0, 50.0), (106.0, 90.0), (107.0, 70.0)]
    assert sampler.stage_rows() == [{"stage": "budget", "seconds": 2.0, "gpu_util_mean": 40.0},
                                    {"stage": "student", "seconds": 3.0, "gpu_util_mean": 80.0}]
    assert sampler.mean(200.0, 300.0) is None
    assert sampler.mean(100.0, 107.0) == pytest.approx(50.0)


def test_the_sampler_thread_samples_until_stopped(bench):
    count = []
    sampler = bench.UtilizationSampler(lambda: count.append(1) or 42.0, interval=0.01).start()
    while len(count) < 3:
        pass
    sampler.stop()
    taken = len(sampler.samples)
    assert taken >= 3 and all(value == 42.0 for _, value in sampler.samples)
    assert len(sampler.samples) == taken  # nothing after stop()


def test_steps_per_second_come_from_the_training_stages_summaries(bench, tmp_path):
    stages = tmp_path / "stages"
    stages.mkdir()
    (stages / "1-budget.summary.json").write_text(json.dumps({"keep_flops": 0.45}))
    (stages / "3-student.summary.json").write_text(json.dumps({"steps_per_second": 12.3456, "best_step": 1000}))
    assert bench.steps_per_second(tmp_path) == {"student": 12.346}


def test_without_cuda_the_benchmark_refuses_in_one_sentence(bench, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--models", "all-MiniLM-L6-v2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has none" in err


def test_the_reader_falls_back_to_torch_without_pynvml(bench, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    name, reader = bench.pick_reader(0)
    assert name == "torch.cuda.utilization" and reader() is None  # no GPU here: no sample, no exception
