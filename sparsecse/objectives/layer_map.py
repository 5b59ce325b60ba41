"""The layer map of layer-wise distillation: which teacher layer each student layer learns from, including for a
student whose whole layers were removed (it records where its layers sat in the model it was cut from)."""

from __future__ import annotations

from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.shrinking.layers import encoder_layers


def num_layers(encoder) -> int:
    """The number of transformer layers of ``encoder`` (:func:`~sparsecse.shrinking.layers.encoder_layers`)."""
    return encoder_layers(encoder)


def source_depths(encoder) -> tuple[list[int], int]:
    """Where each of the encoder's layers sat in the model it was cut from: (for layer i = 1..S, the
    1-based index of that layer in the source, the source's layer count). A model whose whole layers were
    removed records them (``kept_layers``, ``source_layers`` in its config); any other model is its own
    source (1..S of S)."""
    config = encoder.config
    kept, source = getattr(config, "kept_layers", None), getattr(config, "source_layers", None)
    if kept and source:
        return [int(k) + 1 for k in kept], int(source)
    return list(range(1, num_layers(encoder) + 1)), num_layers(encoder)


def parse_layer_map(spec: Any, student_layers: int, teacher_layers: int,
                    depths: tuple[list[int], int] | None = None) -> list[tuple[int, int]]:
    """The (student layer, teacher layer) pairs of a ``layer_map`` (0 is the embedding output).

    Args:
        spec: ``auto``, or ``"s:t/s:t;..."`` checked against the layer counts.
        student_layers: the student's layer count S.
        teacher_layers: the teacher's layer count T.
        depths: where the student's layers sat in the model it was cut from (:func:`source_depths`); None:
            the student is its own source.

    Returns:
        ``auto``: student layer i (1..S) to the teacher layer at the same relative depth, round(p_i*T/S0),
        where p_i is layer i's position among the S0 layers of the student's source: a student whose
        layers were removed learns each kept layer from the teacher layer it was cut from (with the
        teacher as its source, T = S0 and p_i itself), skipping the removed ones; otherwise round(i*T/S).
    """
    spec = str(spec).strip()
    if spec == "auto":
        positions, source = depths or (list(range(1, student_layers + 1)), student_layers)
        return [(i, max(1, round(p * teacher_layers / source))) for i, p in enumerate(positions, 1)]
    pairs: list[tuple[int, int]] = []
    for item in filter(None, (p.strip() for p in spec.replace(";", "/").split("/"))):
        s, sep, t = item.partition(":")
        try:
            pair = (int(s), int(t)) if sep else None
        except ValueError:
            pair = None
        if pair is None:
            raise SparseCSEError(f"layer_map entry {item!r} is not of the form STUDENT_LAYER:TEACHER_LAYER "
                                 "(e.g. layer_map=1:2/2:4/3:6).")
        if not (0 <= pair[0] <= student_layers and 0 <= pair[1] <= teacher_layers):
            raise SparseCSEError(f"layer_map entry {item!r} is out of range: the student has layers 0..{student_layers}"
                                 f" and the teacher 0..{teacher_layers} (0 = embeddings).")
        if pair[0] in {p[0] for p in pairs}:
            raise SparseCSEError(f"layer_map maps student layer {pair[0]} twice.")
        pairs.append(pair)
    if not pairs:
        raise SparseCSEError("layer_map is empty; give auto or pairs like 1:2/2:4/3:6.")
    return pairs
