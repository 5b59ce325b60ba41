"""The processes of a data-parallel run, as the objectives and the teacher cache see them.

Everything here is a no-op in one process (no ``torch.distributed`` group): rank 0 of 1. Under
``accelerate launch``, ``torchrun`` or ``srun`` (see :mod:`sparsecse.training.distributed`) the group is
the one Accelerate trains in: gloo between CPU processes, NCCL between GPUs.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def active() -> bool:
    """Whether more than one process trains (torch.distributed initialised with a world above 1)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 when alone)."""
    return dist.get_rank() if active() else 0


def world() -> int:
    """The number of training processes (1 when alone)."""
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Whether this is the main process."""
    return rank() == 0


def barrier() -> None:
    """Every process waits for the others. NCCL names the device (the process's own GPU); gloo does not:
    a ``device_ids`` there would make torch pick a GPU even for CPU processes."""
    if not active():
        return
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every process, in rank order (pickled; for small things and embedding blocks)."""
    if not active():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: Any = None) -> Any:
    """Process 0's ``obj``, on every process."""
    if not active():
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def share(items: Sequence[T]) -> list[T]:
    """This process's share of ``items``: every ``world()``-th one from its rank (interleaved, so a list
    sorted by length gives every process the same mix of long and short sentences)."""
    return list(items[rank()::world()])


def sharded(compute: Callable[[list[T]], Any], items: Sequence[T]) -> list[Any]:
    """``compute`` over ``items``, each process on its :func:`share`; the results in the order of ``items``
    on every process. ``compute`` returns a sequence (list or array) with one entry per item."""
    if not active():
        return list(compute(list(items)))
    parts = gather_objects(list(compute(share(items))))
    out: list[Any] = [None] * len(items)
    for r, part in enumerate(parts):
        out[r::len(parts)] = part
    return out
