"""A target of another model's speed: "as fast as the model I would download instead". The named model's speed-up
over the input is measured once when the run starts, at the target's serving shape and served alone, as the final
model is (:func:`~sparsecse.targets.alone.measure_alone`, over the rounds the machine's noise needs), and becomes
the speed-up the search aims at; the final model is then timed beside the named model in one session
(:func:`~sparsecse.targets.report.measure_target`), and the target is met when it is at least as fast there.

Why: a fixed speed-up does not say whether the result beats the smaller model a user could download; that model's
speed-up over the input differs from machine to machine (paraphrase-MiniLM-L3-v2 over all-MiniLM-L6-v2 at batch 1
is well under 2x on one 2-core CPU and over it on another), so the target follows it.

    >>> Target(speedup_of="paraphrase-MiniLM-L3-v2", metric="latency-p50").check().describe()
    "paraphrase-MiniLM-L3-v2's speed-up on torch-fp32 (latency-p50, batch 1, up to half the layers removed)"
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import write_json
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.targets.alone import measure_alone, rounds_at
from sparsecse.targets.engines import to_time
from sparsecse.targets.spec import Target
from sparsecse.targets.timing import engine_threads, target_sentences

RESOLVED = "speedup_of.json"  # in the run's directory: the measured speed-up a resumed run aims at again
NAMED = "named model"


def timed_side_by_side(target: Target, input_model: str, models: dict[str, str], dev, work: str | os.PathLike,
                       calibration: str | os.PathLike | None = None, seed: int = 0):
    """The :class:`~sparsecse.targets.timing.Timing` of each of ``models`` (name to a model name or directory) over
    ``input_model`` at ``target``'s serving shape, each served alone, in one session (the rounds sized by an A/A
    timing of the input; where the machine cannot reach the margin's precision, the most rounds).

    Returns:
        (name to its timing, the A/A timing or None, the sentence saying the precision was not reached or None,
        the shape, the timed sentences' count).
    """
    work = Path(work)
    dense = SentenceEncoder.load(input_model, device="cpu")
    sentences = target_sentences(target, dev.sentences, dense.tokenizer, dense.max_length)
    shape = target.shape(engine_threads())
    try:
        reference = to_time(input_model, target.engine, work / "input", calibration, seed, shape.threads,
                            shape.loader)
        placed = {name: to_time(path, target.engine, work / f"model{i}", calibration, seed, shape.threads,
                                shape.loader) for i, (name, path) in enumerate(models.items())}
        aa, rounds, precision = rounds_at(reference, sentences, shape, target)
        timings = measure_alone(reference, placed, sentences, shape, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return timings, aa, precision, shape, len(sentences)


def resolve(target: Target, input_model: str, dev, out: str | os.PathLike, calibration: str | os.PathLike | None = None,
            seed: int = 0) -> tuple[Target, dict[str, Any]]:
    """``target`` with ``speedup`` set to the measured speed-up of its ``speedup_of`` model over ``input_model``
    (read back from ``out``/``speedup_of.json`` when an earlier attempt of the run measured it), and the facts of that
    measurement (model, speed-up, interval, shape, rounds). A target without ``speedup_of`` is returned as it is.

    One sentence when the named model is not faster than the input at the shape (a target is above 1x)."""
    if target.speedup_of is None:
        return target, {}
    facts = measured_earlier(out, target.speedup_of)
    if facts is None:
        timings, aa, precision, shape, count = timed_side_by_side(
            target, input_model, {NAMED: target.speedup_of}, dev, Path(out) / "eval" / "speedup_of", calibration, seed)
        timing = timings[NAMED]
        facts = {"model": target.speedup_of, "speedup": round(timing.speedup, 4), "interval": timing.facts(),
                 "shape": shape.to_dict(), "timed_sentences": count, "aa": aa.facts() if aa else None,
                 "precision": precision}
        if timing.speedup <= 1:
            raise SparseCSEError(f"{target.speedup_of} is not faster than {input_model} at {shape.describe()} "
                                 f"({timing.speedup:.2f}x, served alone): a target of its speed-up would be 1x or "
                                 "less; give --speedup instead.")
        write_json(Path(out) / RESOLVED, facts)
    return replace(target, speedup=float(facts["speedup"])), facts


def measured_earlier(out: str | os.PathLike, model: str) -> dict[str, Any] | None:
    """The facts an earlier attempt of the run in ``out`` wrote for ``model`` (what :func:`resolve` aims at again),
    or None: it times ``model`` anew."""
    try:
        facts = json.loads((Path(out) / RESOLVED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) and facts.get("model") == model and facts.get("speedup") else None
