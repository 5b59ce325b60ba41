"""A run's model against its target: its speed timed once more on the target's engine, side by side with the input
model (:func:`~sparsecse.targets.report.measure_speed`: on the pruned model, before the training that keeps its
shapes), and its dev score (:func:`~sparsecse.targets.report.judged`), plus what a model card states
(single-sentence latency p50/p95, throughput, parameters, file size, the dev score and its drop, the CPU's features)
and whether the target was met. Also the throughput speed-up on the STS-B
test sentences (:func:`stsb_speedups`), timed as a target's candidates are: the one timing behind a card's
speed-up and the benchmarks' tables."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from safetensors import safe_open

from sparsecse.artifacts.remote_code import is_own_model_dir
from sparsecse.artifacts.exported_model import export_settings, exported_format
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.modeling.cpu_features import cpu_features, describe_cpu
from sparsecse.modeling.adapters import layer_modules
from sparsecse.modeling.encoder import SentenceEncoder, encoding_device
from sparsecse.modeling.flops import size_report
from sparsecse.targets.engines import to_time
from sparsecse.targets.fresh import OnDisk
from sparsecse.targets.alone import ALONE, measure_alone, rounds_at
from sparsecse.targets.relative import NAMED
from sparsecse.targets.serving import profile_grid, profiles, rejudged, serving_table
from sparsecse.targets.spec import DEFAULT_ENGINE, Shape, Target, default_loader, engines
from sparsecse.targets.timing import (ROUNDS, Timing, engine_threads, measure, target_sentences,
                                      timing_sentences)

FINAL = "the final model"
STSB = "STS-B test"  # the sentences a throughput speed-up outside a target is timed on


def stsb_speedups(input_model: str, models: dict[str, Any], data_dir, batch_size: int, threads: int | None = None,
                  rounds: int = ROUNDS, show_progress: bool = False,
                  metric: str = "throughput") -> tuple[dict[str, Timing], Shape, list[str]]:
    """The speed-up of each of ``models`` over ``input_model`` on torch fp32 on the distinct STS-B test sentences,
    timed as a target times its candidates (:func:`~sparsecse.targets.timing.measure`: interleaved rounds, the
    figure the median of the rounds' ratios with its interval; the sentences longest first, thinned as a target's:
    :func:`~sparsecse.targets.timing.timing_sentences`): a card's speed-up, its backends' and every benchmark
    table's, so one model's figure is the same number by either road.

    Args:
        input_model: the reference (1x) model directory or name, loaded as a target loads torch fp32.
        models: name to a model directory (loaded likewise), to an :class:`~sparsecse.targets.fresh.OnDisk`
            (an exported graph, say; with directories, all timed in a fresh process) or to an encoder already
            loaded (then every model is timed in this process).
        data_dir: the SentEval data (its STS-B test split).
        batch_size: sentences per ``encode`` call.
        threads: torch's intra-op threads while timing (None: :func:`~sparsecse.targets.timing.engine_threads`).
        rounds: interleaved rounds.
        show_progress: a progress bar.
        metric: ``throughput``, ``latency-p50`` or ``latency-p95`` (:class:`~sparsecse.targets.spec.Shape`).

    Returns:
        (name to its :class:`~sparsecse.targets.timing.Timing`, the serving shape timed, the timed sentences).
    """
    loader = default_loader(DEFAULT_ENGINE)
    shape = Shape(metric, batch_size, threads or engine_threads(), STSB, DEFAULT_ENGINE, threads is None, loader)
    dense = SentenceEncoder.load(input_model, device="cpu")
    pairs = read_sts_benchmark(data_dir, "test")
    sentences = timing_sentences([p.s1 for p in pairs] + [p.s2 for p in pairs], dense.tokenizer, dense.max_length)
    placed = {name: to_time(m, DEFAULT_ENGINE, loader=loader) if isinstance(m, (str, os.PathLike)) else m
              for name, m in models.items()}
    return (measure(to_time(input_model, DEFAULT_ENGINE, loader=loader), placed, sentences, shape, rounds,
                    show_progress), shape, sentences)


def measure_target(target: Target, input_model: str, model_dir: str, dev, work: str | os.PathLike,
                   calibration: str | os.PathLike | None = None, seed: int = 0,
                   show_progress: bool = False, serving: bool = False) -> dict[str, Any]:
    """Every figure the card's Target section states, for ``model_dir`` against ``input_model``: its speed
    (:func:`measure_speed`) judged with its dev score (:func:`judged`).

    Args:
        target: the checked target the run aimed at.
        input_model: the model the run started from (the 1x reference).
        model_dir: the final model directory.
        dev: the dev set (``sentences`` are timed; ``score(encoder)`` gives the dev scores).
        work: a scratch directory for exported copies (removed afterwards).
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.
        show_progress: a progress bar while timing.
        serving: add the card's serving table (as :func:`measure_speed`).

    Returns:
        dict: :func:`measure_speed`'s figures with :func:`judged`'s.
    """
    speed = measure_speed(target, input_model, model_dir, dev, work, calibration, seed, show_progress, serving)
    return judged(target, speed, input_model, model_dir, dev)


def measure_speed(target: Target, input_model: str, model_dir: str, dev, work: str | os.PathLike,
                  calibration: str | os.PathLike | None = None, seed: int = 0,
                  show_progress: bool = False, serving: bool = False,
                  sized: tuple[dict[str, Any] | None, int] | None = None) -> dict[str, Any]:
    """The speed figures of the card's Target section, for ``model_dir`` against ``input_model``: they depend on the
    model's shapes only, so a run times them on its pruned model before the training that follows changes its
    weights (:func:`timed_shapes_hold` checks the final model has the same shapes).

    Args:
        target: the checked target the run aimed at.
        input_model: the model the run started from (the 1x reference).
        model_dir: the model directory timed.
        dev: the dev set (its ``sentences`` are timed).
        work: a scratch directory for exported copies (removed afterwards).
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.
        show_progress: a progress bar while timing.
        serving: add the card's serving table (:func:`~sparsecse.targets.serving.serving_table`, a fresh process);
            its judged row is replaced by the target's measurement, so the card holds one figure for that shape.
            The card's single-sentence latency and throughput are its rows on the shape's threads (without it, those
            two rows alone, timed the same way).
        sized: the facts of an A/A timing at this shape earlier in the run and the rounds it sized (the budget
            stage's, minutes before); None: an A/A timing now.

    The target's figure is timed with each model served alone (:func:`~sparsecse.targets.alone.measure_alone`),
    over the rounds the machine's noise at the shape needs for an interval narrower than the margin (an A/A
    timing first, :func:`~sparsecse.targets.timing.sized_rounds`; where even the most rounds cannot reach it,
    they are timed and ``precision`` says so). A target of another model's speed-up (``target.speedup_of``) times
    that model in the same session, beside the model, and is judged against its figure there.

    Returns:
        dict: JSON-ready, ``speedup`` (measured at the target's serving shape, ``shape``) and its ``spread``,
        ``interval`` (its ends and confidence), ``method`` (how it was timed, in words), ``aa`` (the input against
        itself), ``near_miss`` (short of the target, its interval covering it), ``met`` and ``met_speed`` (the speed
        alone), latency p50/p95 (ms) and throughput (sentences/s) on the engine, ``params`` and ``file_size_bytes``
        (the exported graph's on an exported engine, else the weights'), the CPU; ``depth`` (the most whole layers
        candidates could remove, ``depth_default`` when ``auto`` chose it), ``layers`` (the model's) and
        ``input_layers``; ``timed_model`` (the directory timed).
    """
    work = Path(work)
    dense = SentenceEncoder.load(input_model, device="cpu")
    final = SentenceEncoder.load(model_dir, device="cpu")
    sentences = target_sentences(target, dev.sentences, dense.tokenizer, dense.max_length)
    shape = target.shape(engine_threads())
    exported = engines()[target.engine] is not None
    try:
        reference = to_time(input_model, target.engine, work / "input", calibration, seed, shape.threads,
                            shape.loader)
        model = to_time(model_dir, target.engine, work / "model", calibration, seed, shape.threads, shape.loader)
        table = serving_table(target, shape, reference, model, sentences, None if serving else profile_grid(shape))
        named = {NAMED: to_time(target.speedup_of, target.engine, work / "named", calibration, seed, shape.threads,
                                shape.loader)} if target.speedup_of else {}
        if sized is None:
            aa, rounds, precision = rounds_at(reference, sentences, shape, target)
            aa_facts = aa.facts() if aa else None
        else:
            (aa_facts, rounds), precision = sized, None
        timings = measure_alone(reference, {FINAL: model, **named}, sentences, shape, rounds)
        timing = timings[FINAL]
        rejudged(table, timing, ALONE)
        speedup = timing.speedup
        profile, reference_profile = profiles(table, shape)  # the card's latency and throughput
        graph_bytes = _graph_bytes(model.path) if exported and isinstance(model, OnDisk) else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    goal = timings[NAMED].speedup if named else target.speedup  # another model's: its figure in this same session
    met_speed = goal is None or speedup >= float(goal)
    size = size_report(final.model, model_dir=model_dir)
    layers, input_layers = len(layer_modules(final.model)), len(layer_modules(dense.model))
    return {
        "speedup_target": None if goal is None else round(float(goal), 4), "max_drop": target.max_drop,
        "margin": target.margin,
        "engine": target.engine,
        "batch_size": shape.batch_size, "shape": shape.to_dict(), "speedup": round(speedup, 4),
        "depth": target.resolved_depth(input_layers, "custom" if is_own_model_dir(model_dir) else "stock"),
        "depth_default": target.depth is None, "layers": layers,
        "input_layers": input_layers,
        "spread": round(timing.spread, 4), "rounds": timing.rounds, "met": bool(met_speed),
        "interval": timing.facts(), "method": ALONE, "aa": aa_facts, "precision": precision,
        "near_miss": bool(not met_speed and timing.interval.high >= float(goal or 0)),
        "met_speed": bool(met_speed),
        "latency_ms": {"p50": round(profile["latency_ms_p50"], 3), "p95": round(profile["latency_ms_p95"], 3)},
        "reference_latency_ms": {"p50": round(reference_profile["latency_ms_p50"], 3),
                                 "p95": round(reference_profile["latency_ms_p95"], 3)},
        "throughput": round(profile["throughput"], 1), "reference_throughput": round(reference_profile["throughput"], 1),
        "params": int(size["parameters"]), "file_size_bytes": graph_bytes or size.get("weights_bytes"),
        "timed_sentences": len(sentences), "cpu": describe_cpu(),
        "cpu_features": [name for name, on in cpu_features().items() if on],
        "candidates_table": "candidates.csv", "candidates_plot": "candidates.png", "timed_model": str(model_dir),
        **({"serving": table} if serving else {}),
        **({"speedup_of": {"model": target.speedup_of, "speedup": round(timings[NAMED].speedup, 4),
                           "interval": timings[NAMED].facts(), "aimed": target.speedup}} if named else {}),
    }


def judged(target: Target, speed: dict[str, Any], input_model: str, model_dir: str, dev) -> dict[str, Any]:
    """``speed`` (:func:`measure_speed`'s figures, of ``model_dir`` or of a model of its shapes) with ``model_dir``'s
    dev score against ``input_model``'s and the verdict: ``dev_set``, ``dev_score``, ``reference_dev``, ``drop``,
    ``met_quality`` and ``met`` (the speed and the quality bound both kept)."""
    dense, final = SentenceEncoder.load(input_model, device="cpu"), SentenceEncoder.load(model_dir, device="cpu")
    with encoding_device(dense), encoding_device(final):  # scored on the GPU when there is one
        reference_dev, dev_score = float(dev.score(dense)), float(dev.score(final))
    drop = reference_dev - dev_score
    met_quality = target.max_drop is None or drop <= float(target.max_drop)
    return {**speed, "met": bool(speed["met_speed"] and met_quality), "met_quality": bool(met_quality),
            "dev_set": getattr(dev, "name", "dev"), "dev_score": round(dev_score, 4),
            "reference_dev": round(reference_dev, 4), "drop": round(drop, 4)}


def shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    """Every tensor of a model directory's weights, by name, with its shape (read from the files' headers where
    they are safetensors, else loaded)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return {k: tuple(v.shape) for k, v in SentenceEncoder.load(model_dir, device="cpu").model.state_dict().items()}
    found: dict[str, tuple[int, ...]] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            found.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
    return found


def timed_shapes_hold(timed_dir: str, model_dir: str) -> bool:
    """Whether a speed timed on ``timed_dir`` holds for ``model_dir``: the same tensors with the same shapes, in the
    same architecture (training changed the weights only)."""
    def architecture(directory: str) -> Any:
        config = Path(directory) / "config.json"
        return json.loads(config.read_text()).get("architectures") if config.is_file() else None

    return shapes(timed_dir) == shapes(model_dir) and architecture(timed_dir) == architecture(model_dir)


def _graph_bytes(directory: str) -> int | None:
    """Bytes of the graph file an exported directory runs (the one its export chose, read from its config, not
    loaded), with its companions (OpenVINO's weights beside its .xml)."""
    format = exported_format(directory)
    settings = export_settings(directory, format) if format else None
    graph = Path(directory) / settings["file"] if settings else None
    if graph is None or not graph.is_file():
        return None
    companions = [graph.with_suffix(".bin")] if graph.suffix == ".xml" else []
    return sum(f.stat().st_size for f in [graph, *companions] if f.is_file())
