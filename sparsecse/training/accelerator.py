"""The process layout a training run runs in: Accelerate's accelerator with the run's precision, and the
collectives the loop needs (a barrier that works for CPU processes, gathering objects)."""

from __future__ import annotations

from typing import Any

import torch

from sparsecse.modeling.encoder import check_device, resolve_precision
from sparsecse.training.distributed import init_process_group


def resolve_mixed_precision(mixed_precision: str | None, cpu: bool) -> str | None:
    """``auto`` -> ``bf16`` where the hardware runs it natively (emulated bf16 is slower than fp32), else
    ``no`` on a CPU and ``fp16`` on a GPU; any other value unchanged."""
    if mixed_precision != "auto":
        return mixed_precision
    native = resolve_precision("auto", "cpu" if cpu else "cuda") == "bf16"
    return "bf16" if native else ("no" if cpu else "fp16")


def make_accelerator(device: str | None = None, mixed_precision: str | None = None):
    """Accelerate picks the process layout (``accelerate launch`` or a plain process); on a GPU the
    default precision is bf16 where supported, else fp16; on CPU full precision. ``auto``: bf16 where the
    hardware runs it natively (CPU or GPU), else fp32 on CPU and fp16 on a GPU."""
    import os

    from accelerate import Accelerator, DistributedDataParallelKwargs
    from accelerate.state import AcceleratorState

    device = check_device(device)
    cpu = (device is not None and device.type == "cpu") or not torch.cuda.is_available()
    init_process_group(cpu)  # several processes: meet them first, or say in one sentence why not
    mixed_precision = resolve_mixed_precision(mixed_precision, cpu)
    if mixed_precision is None and not os.environ.get("ACCELERATE_MIXED_PRECISION"):
        mixed_precision = "no" if cpu else ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    # BERT's pooler (and some objectives' parts) get no gradient under cls_before_pooler / mean pooling
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    # Accelerate keeps one precision per process; a run's earlier training (a budget stage's recovery, an earlier
    # stage) may have used another. The process layout (PartialState, the process group) is kept.
    AcceleratorState._reset_state()
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision, kwargs_handlers=[ddp])


def wait_for_everyone(accelerator) -> None:
    """Accelerate's barrier passes ``device_ids=[local rank]``, which torch turns into a device of the
    machine's accelerator even for gloo: a CPU run on a 1-GPU machine then asks rank 1 for cuda:1 and
    fails. CPU processes meet at a plain gloo barrier instead."""
    if accelerator.num_processes > 1 and accelerator.device.type == "cpu":
        torch.distributed.barrier()
    else:
        accelerator.wait_for_everyone()



def gather_objects(obj: Any, accelerator) -> list[Any]:
    """``obj`` from every process, in rank order (``[obj]`` in one process)."""
    if accelerator.num_processes == 1:
        return [obj]
    gathered: list[Any] = [None] * accelerator.num_processes
    torch.distributed.all_gather_object(gathered, obj)
    return gathered
